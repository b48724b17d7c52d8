"""refkey100: a ref whose key took a flipped bit is damage beside its key, not absence.

One flipped bit in the key of a ref row (``refs/run/main`` stored as ``refs/run/maio``)
keeps the table's count, so refs70's count check did not see it: ``Store.ref("run")``
answered None, and a recorder (or ``set_ref(expected_old=None)``) on the run started it
anew from a new root beside the damaged row. Now a ref created from nothing, and a ref
read as absent, first checks the rows beside its key (its run's rows, the rows just
before and after them: ``cpstore.store.ref_neighbours``); one that fails its check is
IntegrityError naming that row, and nothing is written. A flip in an early byte of the
run id that sorts the row among other runs' refs is not seen (documented; verify names
it). The damage is done behind cpstore's back: LMDB by another process (a raw lmdb
handle renaming the row, or one bit flipped in ``data.mdb``), PostgreSQL by an UPDATE of
the row's key on another connection.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from lg_puts import cfg, put_value
from pg_cluster import backend_url  # noqa: F401 - fixture
from small_store import compact_small_store, flip_key

import cpstore
from cpstore.errors import IntegrityError
from cpstore.langgraph import CpstoreSaver
from cpstore.langgraph._codec import run_for
from cpstore.store.facade import Store
from cpstore.store.model import ref_key
from cpstore.store.pg_open import parse_url
from cpstore.store.ref_neighbours import RUN_ROWS

ROOT = Path(__file__).resolve().parent.parent

_LMDB_RENAME = """
import sys, lmdb
path, old, new = sys.argv[1], bytes.fromhex(sys.argv[2]), bytes.fromhex(sys.argv[3])
env = lmdb.open(path, max_dbs=64, subdir=True, create=False)
db = env.open_db(b"refs", create=False)
with env.begin(write=True, db=db) as txn:
    value = txn.get(old)
    assert value is not None and txn.get(new) is None
    txn.delete(old)
    txn.put(new, value)
env.close()
"""


def _flipped(key: bytes, at: int, bit: int) -> bytes:
    out = bytearray(key)
    out[at] ^= bit
    return bytes(out)


def _rename(url: str, old: bytes, new: bytes) -> None:
    """Move ref row ``old`` to key ``new``, value unchanged (a flipped key: the row fails
    its check), behind cpstore's back; the table keeps its count."""
    if url.startswith("postgresql"):
        schema = parse_url(url).schema
        with psycopg.connect(parse_url(url).conninfo, autocommit=True) as conn:
            done = conn.execute(f'UPDATE "{schema}"."refs" SET k = %s WHERE k = %s', (new, old))
            assert done.rowcount == 1
        return
    subprocess.run(
        [sys.executable, "-c", _LMDB_RENAME, url, old.hex(), new.hex()],
        check=True,
        capture_output=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )


def _refs(st: Store) -> list[tuple[bytes, bytes]]:
    b = st.backend
    with b.read_txn() as txn, txn.cursor(db=b.db("refs")) as cur:
        return sorted((bytes(k), bytes(v)) for k, v in cur)


def _damage_named(exc: IntegrityError, damaged: bytes) -> None:
    run, _, branch = damaged.partition(b"\0")
    assert exc.where == f"refs/{run.decode()}/{branch.decode()}", exc
    assert "a damaged ref key may be this ref" in str(exc)
    assert "repair_ref" in str(exc)


def _store(st: Store, branches: tuple[str, ...] = ()) -> str:
    """Runs ``a`` and ``zz`` (one checkpoint each) and ``run``: main of three checkpoints,
    ``branches`` forked at its head; the head."""
    st.recorder("a").checkpoint(0, {"a": 0})
    rec = st.recorder("run")
    head = ""
    for i in range(3):
        head = rec.checkpoint(i, {"i": i})
    for name in branches:
        st.fork("run", name, head)
    st.recorder("zz").checkpoint(0, {"z": 0})
    return head


def test_a_flipped_last_byte_refuses_the_resume_and_every_create(url: str) -> None:
    with cpstore.open(url) as st:
        head = _store(st)
        damaged = _flipped(ref_key("run", "main"), -1, 0x01)  # refs/run/maio
        _rename(url, ref_key("run", "main"), damaged)
        before = _refs(st)
        with pytest.raises(IntegrityError) as read:
            st.ref("run")  # was None: the run read as never recorded
        _damage_named(read.value, damaged)
        with pytest.raises(IntegrityError) as latest, st.latest("run"):
            pass  # was NotFoundError "no such branch"
        _damage_named(latest.value, damaged)
        with pytest.raises(IntegrityError) as resumed:
            st.recorder("run").checkpoint(9, {"new": "root"})  # was a new root
        _damage_named(resumed.value, damaged)
        with pytest.raises(IntegrityError) as created:
            st.set_ref("run", "main", head, expected_old=None)  # the create path itself
        _damage_named(created.value, damaged)
        with pytest.raises(IntegrityError) as forked:
            st.fork("run", "other", head)  # another branch of the run: in its rows
        _damage_named(forked.value, damaged)
        assert _refs(st) == before
        # Refs whose neighbourhood holds no damaged row read and move as before.
        assert st.ref("a") is not None and st.ref("zz") is not None
        st.recorder("zz").checkpoint(1, {"z": 1})


def test_a_flip_among_the_runs_refs_is_seen_though_not_beside_the_key(url: str) -> None:
    """``main`` -> ``eain`` (bit 3 of its first byte): the damaged row sorts before ``f``
    and ``g``, not beside ``main``'s place; the walk over the run's rows finds it."""
    with cpstore.open(url) as st:
        _store(st, ("b", "f", "g", "x"))
        damaged = _flipped(ref_key("run", "main"), len(b"run\0"), 0x08)
        assert damaged == b"run\0eain"
        _rename(url, ref_key("run", "main"), damaged)
        with pytest.raises(IntegrityError) as read:
            st.ref("run", "main")
        _damage_named(read.value, damaged)
        with pytest.raises(IntegrityError) as created:
            st.recorder("run", branch="y").checkpoint(0, {"y": 0})
        _damage_named(created.value, damaged)


def test_a_flipped_separator_sorts_just_past_the_run_and_is_seen(url: str) -> None:
    """``run NUL main`` -> ``run 0x02 main``: past every ``run NUL`` row, before ``zz``."""
    with cpstore.open(url) as st:
        _store(st, ("b",))
        damaged = _flipped(ref_key("run", "main"), len(b"run"), 0x02)
        _rename(url, ref_key("run", "main"), damaged)
        with pytest.raises(IntegrityError) as read:
            st.ref("run", "main")
        assert read.value.where == "refs/run\x02main/"  # no NUL: all of it reads as the run
        assert "a damaged ref key may be this ref" in str(read.value)


def test_a_run_with_many_refs_checks_the_rows_beside_the_key(url: str) -> None:
    """Past RUN_ROWS refs of the run, the rows just before and after the key are checked:
    the run's next-to-last fork, its last byte flipped (an even number made odd), refuses
    its own create beside it; a create far from it in the same run (``b001``, near the
    run's first rows) does not see it (documented)."""
    names = tuple(f"b{i:03d}" for i in range(0, 2 * (RUN_ROWS + 8), 2))
    with cpstore.open(url) as st:
        head = _store(st, names)
        target = names[-2]
        damaged = _flipped(ref_key("run", target), -1, 0x01)
        assert damaged.decode()[-1] in "13579" and damaged.decode()[4:] not in names
        _rename(url, ref_key("run", target), damaged)
        with pytest.raises(IntegrityError) as created:
            st.fork("run", target, head)
        _damage_named(created.value, damaged)
        st.fork("run", "b001", head)  # not beside it: not seen here (verify names it)
        assert st.ref("run", "b001") == head


def test_a_flip_in_an_early_run_byte_is_not_seen_here_verify_names_it(url: str) -> None:
    """The limit (docs/store.md, "Refs, branches, listing"): ``thread-2`` -> ``vhread-2``
    sorts past every ``thread-*`` ref, beside none of ``thread-2``'s neighbours. The
    miss reads as absence; verify (the full walk) names the damaged row."""
    with cpstore.open(url) as st:
        for n in (1, 2, 3):
            st.recorder(f"thread-{n}").checkpoint(0, {"n": n})
        damaged = _flipped(ref_key("thread-2", "main"), 0, 0x02)
        assert damaged == b"vhread-2\0main"
        _rename(url, ref_key("thread-2", "main"), damaged)
        assert st.ref("thread-2") is None  # not claimed: the damaged row sorts far away
        report = st.verify()
        assert any(p.where == "refs/vhread-2/main" for p in report.problems), report.problems


def test_an_intact_store_reads_and_creates_as_before(url: str) -> None:
    names = tuple(f"b{i:03d}" for i in range(RUN_ROWS + 2))
    with cpstore.open(url) as st:
        head = _store(st, names)
        assert st.ref("run", "nope") is None and st.ref("nope") is None
        st.fork("run", "new", head)
        st.set_ref("run", "new2", head, expected_old=None)
        rec = st.recorder("new-run")
        first = rec.checkpoint(0, {"n": 0})
        assert st.manifest(first).parent is None
        assert st.ref("run", "new") == head == st.ref("run", "new2")
        assert st.verify().ok


def test_the_langgraph_saver_finds_the_thread_and_refuses_to_go_on(url: str) -> None:
    """get_tuple answers from the saver's own index (intact): the thread's newest
    checkpoint, not None. A put going on from it plans on the run's head, which is now
    IntegrityError naming the damaged row, not a new branch beside it."""
    with cpstore.open(url) as st:
        saver = CpstoreSaver(st)
        parent = put_value(saver, "t", None, "a1")
        parent = put_value(saver, "t", parent, "a2")
        key = ref_key(run_for("t"), "main")
        damaged = _flipped(key, -1, 0x01)
        _rename(url, key, damaged)
        before = _refs(st)
        fresh = CpstoreSaver(st)
        found = fresh.get_tuple(cfg("t"))
        assert found is not None and found.config["configurable"]["checkpoint_id"] == parent
        with pytest.raises(IntegrityError) as went_on:
            put_value(fresh, "t", parent, "a3")
        _damage_named(went_on.value, damaged)
        assert _refs(st) == before


def test_one_bit_flipped_in_the_data_file(tmp_path: Path) -> None:
    """The defect as found: a bit of the ref key flipped in ``data.mdb`` (LMDB)."""
    path = compact_small_store(tmp_path)
    with cpstore.open(path, readonly=True) as st:
        head = st.ref("run")
    assert head is not None
    flip_key(path, ref_key("run", "main"))
    with cpstore.open(path) as st:
        before = _refs(st)
        acts: list[Callable[[], object]] = [
            lambda: st.ref("run"),
            lambda: st.recorder("run").checkpoint(9, {"x": 1}, seal_ledger=False),
            lambda: st.set_ref("run", "main", head, expected_old=None),
        ]
        for act in acts:
            with pytest.raises(IntegrityError) as told:
                act()
            _damage_named(told.value, b"run\0maio")
        assert _refs(st) == before
    with cpstore.open(path, readonly=True) as st, pytest.raises(IntegrityError):
        st.ref("run")  # a read-only handle reads the same
