"""review94: a lost LMDB read of an owner that never reads again kept its reader slot.

review93 made any thread's next read or write abort every lost read's txn (its snapshot
no longer pinned), and left the txn object in ``EnvTxns._lost`` until its owner thread
reads again ("a few hundred bytes each"). py-lmdb keeps an aborted read txn's reader slot
(in the lock file every process shares, 1,022 of them) until the txn object is freed: each
lost read of an idle or exited owner held a slot for the environment's life, and once the
slots ran out every read of the store, in every process, failed MDB_READERS_FULL
(reader_check frees only dead processes' slots). Another thread's abort now lets go of
the txn object (the entry stays its owner's to remove, as review90 counts it), and
``_drop_unused_txns`` frees it where no close runs beside.
"""

from __future__ import annotations

import threading
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
from test_review93_lost_read_idle_owner import _reopened_intact

import cpstore
from cpstore.store.lmdb_backend import LmdbBackend
from cpstore.store.lmdb_env import Env

_LOSERS = 6


def _env(st: Any) -> Env:
    backend = st._backend
    assert isinstance(backend, LmdbBackend)
    return backend.env


def _slots(env: Env) -> int:
    """Reader slots of the lock file held by a process (mdb_reader_list's rows)."""
    return len(env.env.readers().splitlines()) - 1


def _lose_reads(st: Any, cid: str, kind: str, idle: threading.Event) -> list[threading.Thread]:
    """``_LOSERS`` threads, each with a read handed over as lost (its holder's finalizer run
    before the generator's close, an order a cycle's collection may pick), then idle."""

    def block() -> Generator[Any, None, None]:
        if kind == "_Read":
            holder = st._backend.read_txn()
            with holder as txn:
                yield holder
                txn.get(b"x")
        else:
            with st.read(cid) as cp:
                yield cp
                cp.state()

    started: list[threading.Event] = []

    def worker(lost: threading.Event) -> None:
        gen = block()
        holder = next(gen)
        holder.__del__()  # handed over: its txn still set
        gen.close()  # the block's exit returns: the read is the store's to end
        del holder, gen
        lost.set()
        idle.wait(60)

    threads = []
    for _ in range(_LOSERS):
        lost = threading.Event()
        started.append(lost)
        thread = threading.Thread(target=worker, args=(lost,))
        thread.start()
        threads.append(thread)
        assert lost.wait(60)
    return threads


@pytest.mark.parametrize("kind", ["_Read", "CheckpointView"])
@pytest.mark.parametrize("then", ["reads", "writes"])
def test_lost_reads_of_idle_owners_give_their_reader_slots_back(
    tmp_path: Path, kind: str, then: str
) -> None:
    st = cpstore.open(tmp_path / "s")
    cid = str(st.recorder("keep").checkpoint(0, {"a": 1}))
    env = _env(st)
    with st.read(cid) as cp:
        assert cp.state() == {"a": 1}
    baseline = _slots(env)
    idle = threading.Event()
    threads: list[threading.Thread] = []
    try:
        threads = _lose_reads(st, cid, kind, idle)
        assert len(env._lost) == _LOSERS
        for i in range(8):  # other threads' work: each aborts the lost txns, then frees
            if then == "reads":
                with st.read(cid) as cp:
                    assert cp.state() == {"a": 1}
            else:
                st.recorder(f"w{i}").checkpoint(0, {"i": i})
        # Before: each idle owner's aborted txn kept its slot (baseline + 6).
        assert _slots(env) <= baseline + 1, env.env.readers()
        assert len(env._lost) == _LOSERS  # the entries are their owners' (review90)
        assert not env.reads_anywhere()
    finally:
        idle.set()
        for thread in threads:
            thread.join()
    st.close()
    _reopened_intact(tmp_path / "s", cid)
