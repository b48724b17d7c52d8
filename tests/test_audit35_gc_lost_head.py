"""Audit 35: a sweep never takes the sound history under a checkpoint record that is lost.

A ref (or a retained head) whose checkpoint record is gone, or a lineage whose parent
record is gone with no tombstone to say retention pruned it, is damage (verify reports
"ref does not resolve", "retained head does not resolve", "parent checkpoint does not
resolve"). The sweep's mark walk treated the missing record as the end of the lineage:
every sound ancestor below it looked unreachable and any gc, prune or delete_run of
any run swept them, so a branch that ``reset_ref`` could have moved back to its last
sound checkpoint lost its whole history. Now the sweep stops with IntegrityError naming
the record, nothing removed (as it stops on a ref that fails its check or a kept record
that does not hash to its id), on LMDB and PostgreSQL; once the operator moves the ref
back (``reset_ref``) and releases the lost head, it sweeps again and keeps the history.
"""

from __future__ import annotations

import pytest
from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures

import cpstore
from cpstore.errors import IntegrityError
from cpstore.native.canonical import decode_value
from cpstore.store import Store
from cpstore.store.chunk_tree import read_root
from cpstore.store.content import objects_of, records_of
from cpstore.store.verify import children


def _lose(st: Store, cid: str) -> None:
    """Delete a checkpoint record behind cpstore's back (no tombstone)."""
    raw = bytes.fromhex(cid)
    st.backend.write_txn(lambda txn: records_of(st.backend.dbs).delete(txn, raw))


def _stored(st: Store, ids: list[str]) -> list[str]:
    with st.backend.read_txn() as txn:
        records = records_of(st.backend.dbs)
        return [c for c in ids if records.get(txn, bytes.fromhex(c)) is not None]


def _history(st: Store) -> list[str]:
    rec = st.recorder("a")
    ids = [rec.checkpoint(i, {"i": i, "text": f"step {i} " * 40}) for i in range(6)]
    st.recorder("other").checkpoint(0, {"o": 1})
    return ids


def _sweeps(st: Store) -> list[tuple[str, object]]:
    return [
        (
            "delete_run",
            lambda: st.gc(keep_last=None, run_id=None, delete_run="other", dry_run=False),
        ),
        ("dry run", lambda: st.gc(keep_last=None, run_id=None, delete_run="other", dry_run=True)),
        ("prune", lambda: st.prune(keep_last=10)),
    ]


@pytest.mark.parametrize("lost", ["head", "parent", "retained"])
def test_a_lost_checkpoint_record_stops_the_sweep_and_its_ancestors_survive(
    url: str, lost: str
) -> None:
    with cpstore.open(url) as st:
        ids = _history(st)
        if lost == "head":
            _lose(st, ids[-1])
            where, survivors = "refs/a/main", ids[:-1]
        elif lost == "parent":
            _lose(st, ids[3])
            where, survivors = f"checkpoints/{ids[3]}", ids[:3] + ids[4:]
        else:  # the branch reset away from its head, which is then lost
            st.reset_ref("a", "main", ids[1], expected_old=ids[-1], operator="op", reason="t")
            _lose(st, ids[-1])
            where, survivors = f"meta/retained/{ids[-1]}", ids[:-1]
        for name, sweep in _sweeps(st):
            with pytest.raises(IntegrityError) as err:
                sweep()  # type: ignore[operator]
            assert err.value.where == where, (name, err.value)
            assert "sweep stops" in err.value.what
        assert _stored(st, survivors) == survivors  # nothing of the sound history swept
        assert st.ref("other") is not None  # nor the run the gc was asked to delete


def test_after_the_operator_moves_the_ref_back_the_sweep_runs_and_keeps_the_history(
    url: str,
) -> None:
    with cpstore.open(url) as st:
        ids = _history(st)
        _lose(st, ids[-1])
        with pytest.raises(IntegrityError):
            st.prune(keep_last=10)
        st.reset_ref("a", "main", ids[-2], expected_old=ids[-1], operator="op", reason="lost")
        with pytest.raises(IntegrityError):  # the lost head is retained now: still damage
            st.prune(keep_last=10)
        st.release_retained(ids[-1], operator="op", reason="the record is gone")
        report = st.gc(keep_last=None, run_id=None, delete_run="other", dry_run=False)
        assert len(report.checkpoints) == 1  # the other run's checkpoint only
        assert _stored(st, ids[:-1]) == ids[:-1]
        assert st.verify().ok


def _container(st: Store, head: str, which: str) -> tuple[bytes, list[bytes]]:
    """A container object the head reaches (its history tree's upper spine, or its
    observations log) and the leaves under it that older checkpoints name too."""
    objects = objects_of(st.backend.dbs)
    with st.read(head) as view:
        raw = view.manifest.raw
    with st.backend.read_txn() as txn:
        if which == "observations":
            log = bytes(raw["observations"])
            entries = decode_value(bytes(objects.get(txn, log) or b""))
            return log, [bytes(e[2]) for e in entries]
        root = bytes(raw["state"]["chunked"]["history"])
        upper = read_root(bytes(objects.get(txn, root) or b""), "")[3]
        assert upper is not None  # the history is long enough for a multi-level tree
        kids = children(txn, objects, "state.chunked", root, set())
        return upper, [bytes(k) for k in kids if len(k) == 17]


@pytest.mark.parametrize("which", ["upper spine", "observations"])
def test_a_lost_container_a_kept_checkpoint_reaches_stops_the_sweep(url: str, which: str) -> None:
    """A kept checkpoint's chunk-tree upper spine (or its observations log) is lost: the
    frames (payloads) under it, which the pruned older checkpoints also name, were swept
    as unreachable by prune; now the sweep stops naming the object, nothing removed."""
    with cpstore.open(url) as st:
        rec = st.recorder("a")
        msgs = [f"message {i} " + "words " * (60 + i % 13) for i in range(160)]
        ids = []
        for i in range(30):
            rec.observe(i, "src", f"payload {i}".encode() * 20, pinned_at=float(i))
            ids.append(rec.checkpoint(i, {"history": msgs[: 120 + i]}))
        lost, leaves = _container(st, ids[-1], which)
        objects = objects_of(st.backend.dbs)
        st.backend.write_txn(lambda txn: objects.delete(txn, lost))
        with pytest.raises(IntegrityError) as err:
            st.prune(keep_last=1)
        assert err.value.where == f"objects/{lost.hex()}"
        assert "sweep stops" in err.value.what
        with st.backend.read_txn() as txn:
            assert [k for k in leaves if not objects.stored(txn, k)] == []
        assert _stored(st, ids) == ids
