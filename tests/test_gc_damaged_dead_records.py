"""gc beside a dead checkpoint record that does not hash to its id (audit10).

Such a record is left for verify and nothing it names becomes a candidate; the
rest of the sweep must still be whole: its sound dead neighbours (its own child
included) swept and tombstoned, a dry run's report the real run's, the report's
counts what left the store, and the same on PostgreSQL (retention is shared).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pg_cluster import Cluster, pg_cluster, pg_url  # noqa: F401 - fixtures
from stored import edit_raw, to_layout_5
from test_pg_store import _sql

import cpstore
from cpstore.native.canonical import encode_value
from cpstore.store.content import objects_of, records_of
from cpstore.store.pg_open import parse_url


def _object_keys(st: cpstore.Store) -> set[bytes]:
    with st.backend.read_txn() as txn:
        return set(objects_of(st.backend.dbs).keys(txn))


def _record_ids(st: cpstore.Store) -> set[bytes]:
    with st.backend.read_txn() as txn:
        return set(records_of(st.backend.dbs).keys(txn))


def _tombstoned(st: cpstore.Store, cid: str) -> bool:
    with st.backend.read_txn() as txn:
        return txn.get(bytes.fromhex(cid), None, st.backend.dbs["tombstones"]) is not None


def _damaged_run(st: cpstore.Store) -> tuple[str, str, str, bytes, bytes]:
    """(kept head, damaged dead record, its sound dead child, a loose object, the damaged
    record's real part): run "other" is parent -> child, "keep" stays."""
    keep = st.recorder("keep").checkpoint(0, {"a": 1})
    rec = st.recorder("other")
    parent = rec.checkpoint(0, {"b": 2})
    child = rec.checkpoint(1, {"b": 3, "c": "child's own"})
    loose = st.put_object(encode_value("not the dead checkpoint's"))
    assert st.unpin_object(loose)
    with st.read(parent) as cp:
        part = bytes.fromhex(cp.manifest.state_parts["b"])
    return keep, parent, child, loose, part


def test_a_dry_run_beside_a_damaged_dead_record_reports_what_the_real_run_does(
    tmp_path: Path,
) -> None:
    """With a damaged dead record: the dry run's report equals the real run's; the real run
    tombstones exactly the records it removed (the sound child), never the damaged one,
    and its object count is the objects that left the store."""
    path = tmp_path / "s"
    with cpstore.open(path) as st:
        keep, parent, child, loose, part = _damaged_run(st)
    edit_raw(path, "checkpoints", bytes.fromhex(parent), lambda old: old.replace(part, loose))
    with cpstore.open(path) as st:
        dry = st.gc(delete_run="other", dry_run=True)
        before = _object_keys(st)
        real = st.gc(delete_run="other")
        after = _object_keys(st)
        assert (dry.checkpoints, dry.objects_removed, dry.bytes_removed) == (
            real.checkpoints,
            real.objects_removed,
            real.bytes_removed,
        )
        assert dry.dry_run and not real.dry_run
        assert real.checkpoints == (child,)
        assert real.objects_removed == len(before - after) > 0
        assert _tombstoned(st, child) and not _tombstoned(st, parent)
        assert bytes.fromhex(parent) in _record_ids(st)
        assert {loose, part} <= after  # neither the damaged nor the real reference is taken
        problems = st.verify().problems
        assert problems and all(parent in p.where for p in problems), problems
        with st.read(keep) as cp:
            assert cp.state() == {"a": 1}
        # A second sweep changes nothing more: the damaged record stays, nothing else goes.
        assert st.prune(keep_last=1) == 0
        assert _object_keys(st) == after and bytes.fromhex(parent) in _record_ids(st)


def test_a_gc_report_counts_only_objects_that_were_stored(tmp_path: Path) -> None:
    """An object a swept record names but that is already missing (damage) is not counted
    as removed: objects_removed is what left the store."""
    path = tmp_path / "s"
    with cpstore.open(path) as st:
        st.recorder("keep").checkpoint(0, {"a": 1})
        doomed = st.recorder("other").checkpoint(0, {"b": 2, "c": 3})
        with st.read(doomed) as cp:
            gone = bytes.fromhex(cp.manifest.state_parts["b"])
    edit_raw(path, "objects", gone, lambda _old: None)
    with cpstore.open(path) as st:
        before = _object_keys(st)
        assert gone not in before
        dry = st.gc(delete_run="other", dry_run=True)
        report = st.gc(delete_run="other")
        assert report.objects_removed == dry.objects_removed == len(before - _object_keys(st))


def test_postgres_gc_leaves_a_damaged_dead_record_and_sweeps_its_sound_child(
    pg_url: str,  # noqa: F811 - the fixture
) -> None:
    """PostgreSQL: a dead record rewritten to name another object is left (no tombstone),
    neither object is deleted, its sound child is swept, and dry run and real run agree."""
    with cpstore.open(pg_url) as st:
        keep, parent, child, loose, part = _damaged_run(st)
        schema = parse_url(pg_url).schema
        _sql(
            pg_url,
            f'UPDATE "{schema}".checkpoints SET v = overlay(v placing %s from position(%s in v))'
            " WHERE k = %s",
            (loose, part, bytes.fromhex(parent)),
        )
        with pytest.raises(cpstore.errors.IntegrityError), st.read(parent):
            pass
        dry = st.gc(delete_run="other", dry_run=True)
        real = st.gc(delete_run="other")
        assert (dry.checkpoints, dry.objects_removed) == (real.checkpoints, real.objects_removed)
        assert real.checkpoints == (child,)
        assert _tombstoned(st, child) and not _tombstoned(st, parent)
        assert {loose, part} <= _object_keys(st)
        assert any(parent in p.where for p in st.verify().problems)
        with st.read(keep) as cp:
            assert cp.state() == {"a": 1}


@pytest.mark.parametrize("kind", ["r", "c"])
def test_gc_leaves_a_dead_record_cut_short_of_its_header_and_sweeps_the_rest(
    tmp_path: Path, kind: str
) -> None:
    """A dead record cut shorter than its header (so it cannot hash to its id) is left for
    verify like any other damaged one: the sweep of its sound neighbours goes on."""
    path = tmp_path / "s"
    with cpstore.open(path) as st:
        keep = st.recorder("keep").checkpoint(0, {"a": 1})
        rec = st.recorder("other")
        cut = rec.checkpoint(0, {"b": 2})
        child = rec.checkpoint(1, {"b": 3})
    if kind == "c":
        to_layout_5(path)
    edit_raw(path, "checkpoints", bytes.fromhex(cut), lambda old: old[:5])
    with cpstore.open(path) as st:
        report = st.gc(delete_run="other")
        assert report.checkpoints == (child,)
        assert bytes.fromhex(cut) in _record_ids(st) and not _tombstoned(st, cut)
        assert any(cut in p.where for p in st.verify().problems)
        with st.read(keep) as cp:
            assert cp.state() == {"a": 1}


@pytest.mark.parametrize("kind", ["r", "c"])
def test_gc_stopped_by_a_kept_record_cut_short_names_the_checkpoint(
    tmp_path: Path, kind: str
) -> None:
    """A kept head's record cut shorter than its header stops the sweep with an
    IntegrityError that names the checkpoint, and nothing is swept."""
    path = tmp_path / "s"
    with cpstore.open(path) as st:
        rec = st.recorder("keep")
        first = rec.checkpoint(0, {"a": 1})
        head = rec.checkpoint(1, {"a": 2})
        gone = st.recorder("other").checkpoint(0, {"b": 2})
    if kind == "c":
        to_layout_5(path)
    edit_raw(path, "checkpoints", bytes.fromhex(head), lambda old: old[:5])
    with cpstore.open(path) as st:
        with pytest.raises(cpstore.errors.IntegrityError) as info:
            st.gc(delete_run="other")
        assert info.value.where == f"checkpoints/{head}"
        assert {bytes.fromhex(c) for c in (first, gone)} <= _record_ids(st)
