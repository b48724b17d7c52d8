"""An interrupt landing while a thread that already holds the write lock takes it again
(session 34; session 33's leftover): the interrupted take must leave exactly the outer
hold, in ``take_write_lock`` and in ``EnvTxns.write``'s inline copy.

``write`` let go of a hold only when the lock had not been owned before the call, so an
interrupt landing on its acquire's return in a thread already holding the lock kept the
hold the acquire added: once the outer block ended, the lock stayed this thread's for good
and every other thread's write waited forever. ``LmdbBackend.try_flush_here`` (a
finalizer's flush) holds the lock and then calls ``flush``, which writes through
``write``. Both now compare the RLock's own recursion count before and after
(``take_write_lock``, which asked only whether the lock was owned, was right at every
landing CPython has; its sweep here pins that)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_begin_interrupted import interrupted_at
from test_review78_write_lock_interrupt import _another_thread_writes

import cpstore
from cpstore.store.lmdb_txns import take_write_lock


def _count(lock: Any) -> int:
    n: int = lock._recursion_count()
    return n


def _sweep_held(lock: Any, names: set[str], call: Callable[[], Any]) -> tuple[int, list[str]]:
    """Hold ``lock`` once, then interrupt ``call`` at each landing in turn until it runs
    through; the landings and those after which this thread's count was not 1."""
    wrong: list[str] = []
    k = 0
    while True:
        k += 1
        lock.acquire()
        landed = interrupted_at(k, names, call)
        if landed and _count(lock) != 1:
            wrong.append(f"{landed[0]}: count {_count(lock)}")
        while _count(lock):
            lock.release()
        if not landed:
            return k - 1, wrong


@pytest.mark.parametrize("how", ["try", "wait"])
def test_take_write_lock_on_a_held_lock_interrupted_anywhere_keeps_the_outer_hold(
    how: str,
) -> None:
    """Each landing leaves the one hold taken before the call; run through, two."""
    lock = threading.RLock()

    def take() -> None:
        assert take_write_lock(lock, blocking=how == "wait")
        assert _count(lock) == 2
        lock.release()

    landings, wrong = _sweep_held(lock, {"take_write_lock"}, take)
    assert landings >= 2 and wrong == []


def test_write_on_a_held_lock_interrupted_anywhere_keeps_the_outer_hold(tmp_path: Path) -> None:
    """``EnvTxns.write`` run by a thread holding the write lock (no txn open), swept
    through ``write`` and ``_lock_writes``: the outer hold alone is left, and once it is
    let go another thread writes."""
    st = cpstore.open(tmp_path / "s", durability="none")
    try:
        env: Any = st.backend.env
        db = env.dbs["meta"]
        landings, wrong = _sweep_held(
            env.write_lock,
            {"write", "_lock_writes"},
            lambda: env.write(lambda txn: txn.put(b"outer-hold", b"1", db=db)),
        )
        assert landings >= 3 and wrong == []
        assert _another_thread_writes(env)
    finally:
        st.close()


def test_take_write_lock_counts_on_every_supported_lock() -> None:
    """The recursion count the helper reads exists on the C RLock and on the pure-Python
    one (a build without ``_thread.RLock``), and moves with each hold."""
    for lock in (threading.RLock(), threading._PyRLock()):  # type: ignore[attr-defined]
        assert _count(lock) == 0
        assert take_write_lock(lock, blocking=False)
        assert take_write_lock(lock, blocking=False)
        assert _count(lock) == 2
        lock.release()
        lock.release()
        assert _count(lock) == 0


def test_a_finalizers_flush_interrupted_inside_its_write_leaves_the_lock_free(
    tmp_path: Path,
) -> None:
    """``try_flush_here`` takes the lock, then its flush writes through ``write``: swept
    through both frames (and ``_lock_writes``), the lock is free after every landing and
    the batch lands once the sweep runs through."""
    st = cpstore.open(tmp_path / "s", durability="batched", batch_size=1000)
    try:
        rec = st.recorder("r")
        cid = rec.checkpoint(0, {"a": 1})
        env: Any = st.backend.env
        left: list[str] = []
        k = 0
        while True:
            k += 1
            names = {"try_flush_here", "write", "_lock_writes"}
            landed = interrupted_at(k, names, st.backend.try_flush_here)
            if not landed:
                break
            if _count(env.write_lock):
                left.append(f"{landed[0]}: count {_count(env.write_lock)}")
                while _count(env.write_lock):
                    env.write_lock.release()
            assert _another_thread_writes(env), landed[0]
        assert k > 3 and left == []
        st.flush()
        with st.read(cid) as cp:
            assert cp.state() == {"a": 1}
    finally:
        st.close()
