"""review93: a lost read whose owner thread never reads again kept its LMDB snapshot.

A read whose holder (``_Read``, ``CheckpointView``) is freed with its block's exit not run
(a cycle's collection calling the holder's finalizer before the generator's close, an
interrupt at the exit's start) is handed over (``EnvTxns.lost_read``) and was aborted only
by its owner thread's next read or resize (``_end_lost``), or by a map resize. An owner
that exited (a worker thread) or idles (a pool thread) never reads again: its txn stayed
open, its reader slot pinned its snapshot, and no page freed since could be reused, in this
process or any other: a store deleting and writing grew its data file by every page it
freed (9.5 MB over six 2 MB put-and-delete rounds in the probe, 0 without the lost read)
until the map next had to grow. Any thread's next read now aborts every lost txn (as a
resize does); the entry stays its owner's to remove (its counts, review90).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest
from test_review90_lost_cycle import _blocks

import cpstore
from cpstore.store.lmdb_backend import LmdbBackend
from cpstore.store.lmdb_env import Env

_ROUNDS = 6
_STATE = 1 << 20  # random bytes per checkpoint (hex: 2 MB of pages)


def _reopened_intact(path: Path, cid: str) -> None:
    """The store opened again reads the kept checkpoint and verifies whole."""
    st = cpstore.open(path)
    with st.read(cid) as cp:
        assert cp.state() == {"a": 1}
    assert st.verify().ok
    st.close()


def _env(st: Any) -> Env:
    backend = st._backend
    assert isinstance(backend, LmdbBackend)
    return backend.env


def _file_bytes(st: Any) -> int:
    return os.path.getsize(os.path.join(st.path, "data.mdb"))


def _put_and_delete(st: Any, run: str) -> None:
    st.recorder(run).checkpoint(0, {"x": os.urandom(_STATE).hex()})
    st.delete_run(run)


def _lose_a_read(st: Any, cid: str, kind: str, idle: threading.Event | None) -> None:
    """A worker thread whose read is handed over as lost (its holder's finalizer run before
    the generator's close, an order a cycle's collection may pick), then exits, or (``idle``
    given) lives on without reading until ``idle`` is set."""
    lost = threading.Event()

    def worker() -> None:
        gen = _blocks(st, cid)[kind]()
        holder = next(gen)
        holder.__del__()  # handed over: its txn still set
        gen.close()  # the block's exit: returns, the read is the owner's to end
        lost.set()
        if idle is not None:
            idle.wait(60)

    thread = threading.Thread(target=worker)
    thread.start()
    assert lost.wait(60)
    if idle is None:
        thread.join()
    assert len(_env(st)._lost) == 1


@pytest.mark.parametrize("kind", ["_Read", "CheckpointView"])
@pytest.mark.parametrize("owner", ["exited", "idle"])
def test_a_lost_read_of_a_thread_that_never_reads_again_frees_its_snapshot(
    tmp_path: Path, kind: str, owner: str
) -> None:
    st = cpstore.open(tmp_path / "s")
    cid = st.recorder("keep").checkpoint(0, {"a": 1})
    for i in range(2):  # the file at its steady size: a put reuses what a delete freed
        _put_and_delete(st, f"warm{i}")
    idle = threading.Event() if owner == "idle" else None
    try:
        _lose_a_read(st, cid, kind, idle)
        with st.read(cid) as cp:  # this thread's read: the lost txn is aborted here
            assert cp.state() == {"a": 1}
        before = _file_bytes(st)
        for i in range(_ROUNDS):
            _put_and_delete(st, f"r{i}")
        # Each round frees what the last one wrote: nothing pins it, so the file keeps its
        # size (before: every round's pages were new, ~2 MB each).
        assert _file_bytes(st) - before < _STATE
        env = _env(st)
        # An idle owner's entry is its to remove (review90); an exited one's, any thread's
        # read removes (txns96).
        assert len(env._lost) == (1 if owner == "idle" else 0)
        assert not env.reads_anywhere()  # a lost read is not a read: a close goes ahead
    finally:
        if idle is not None:
            idle.set()
    st.close()
    _reopened_intact(tmp_path / "s", cid)


def test_the_owner_ends_its_own_lost_read_after_another_thread_aborted_it(
    tmp_path: Path,
) -> None:
    """The owner's next read removes its entry once: the txn another thread aborted is
    aborted again (nothing), and the owner's counts are its own (no read held)."""
    st = cpstore.open(tmp_path / "s")
    cid = st.recorder("keep").checkpoint(0, {"a": 1})
    env = _env(st)
    gen = _blocks(st, cid)["_Read"]()
    holder = next(gen)
    holder.__del__()
    gen.close()
    assert len(env._lost) == 1
    other: list[bool] = []

    def read_elsewhere() -> None:
        with st.read(cid) as cp:
            other.append(cp.state() == {"a": 1})

    thread = threading.Thread(target=read_elsewhere)
    thread.start()
    thread.join()
    assert other == [True]
    assert len(env._lost) == 1  # aborted, still this thread's to remove
    assert not env.holds_read()
    with st.read(cid) as cp:
        assert env.holds_read()
        assert cp.state() == {"a": 1}
    assert list(env._lost) == []
    assert threading.get_ident() not in env._active
    st.close()


def test_threads_losing_reading_and_growing_the_map_at_once(tmp_path: Path) -> None:
    """Threads each losing reads, reading (which aborts every lost txn) and writing past a
    small map (its resizes abort them too) at once: no error, every read sees its state, and
    every lost read ends with its owner's next read, none left."""
    st = cpstore.open(tmp_path / "s", map_size=1 << 16)
    cid = st.recorder("keep").checkpoint(0, {"a": 1})
    env = _env(st)
    errors: list[BaseException] = []
    owners = 4

    def worker(n: int) -> None:
        try:
            for i in range(15):
                gen = _blocks(st, cid)["_Read" if i % 2 else "CheckpointView"]()
                holder = next(gen)
                holder.__del__()
                gen.close()
                with st.read(cid) as cp:
                    assert cp.state() == {"a": 1}
                st.recorder(f"w{n}").checkpoint(i, {"x": os.urandom(4096).hex()})
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(owners)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert list(env._lost) == []
    assert list(env._active) == []
    assert st.verify().ok
    st.close()


_COMMITS = 600


@pytest.mark.parametrize("owner", ["exited", "idle"])
def test_a_writer_that_never_reads_frees_a_lost_snapshot(tmp_path: Path, owner: str) -> None:
    """A process that only writes after the read was lost (a recorder's checkpoints: no read
    of its own) ends it too: each commit's copied-on-write pages are reused, not new (before:
    every commit's, ~12 pages, for good; 157 MB over 3,000 small checkpoints in the probe)."""
    st = cpstore.open(tmp_path / "s")
    cid = st.recorder("keep").checkpoint(0, {"a": 1})
    rec = st.recorder("r")
    for i in range(100):
        rec.checkpoint(i, {"x": i})
    idle = threading.Event() if owner == "idle" else None
    try:
        _lose_a_read(st, cid, "_Read", idle)
        before = _file_bytes(st)
        for i in range(100, 100 + _COMMITS):
            rec.checkpoint(i, {"x": i})
        # Less than two pages a commit on average (a reused page adds none).
        assert _file_bytes(st) - before < _COMMITS * 2 * 4096
    finally:
        if idle is not None:
            idle.set()
    with st.read(cid) as cp:
        assert cp.state() == {"a": 1}
    st.close()
