"""review78's leftover: the other places that take the in-process write lock and then
enter a ``try``, swept as review78 swept ``EnvTxns.write``.

``LmdbBackend.try_flush_here`` (a finalizer's flush), ``EnvTxns.quiesced`` (a close's wait
for other threads' txns) and the registry's close of an environment a close left open each
took the lock, then entered the ``try`` whose ``finally`` lets it go. An interrupt (a signal
handler's exception) landing on the acquire's return left the lock this thread's for good:
every other thread's write then waited forever. The sweep lands a KeyboardInterrupt at
each point where CPython runs a pending handler in those frames and in the helper they
now share (``take_write_lock``); after each landing the lock must be free (and the
registry's close must leave the environment closable: meta80)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_begin_interrupted import interrupted_at
from test_review78_write_lock_interrupt import _another_thread_writes

import cpstore
from cpstore.errors import StoreError
from cpstore.store import lmdb_registry, lmdb_txns
from cpstore.store.lmdb_txns import take_write_lock

NAMES = {"take_write_lock", "try_flush_here", "quiesced", "_close_left_open"}


def _sweep(env: Any, call: Callable[[], Any]) -> tuple[int, list[str]]:
    """Interrupt ``call`` at each landing in turn until it runs through; the number of
    landings and those after which the write lock stayed held (released here)."""
    left: list[str] = []
    k = 0
    while True:
        k += 1
        landed = interrupted_at(k, NAMES, call)
        if not landed:
            return k - 1, left
        if env.write_lock._is_owned():
            left.append(landed[0])
            while env.write_lock._is_owned():
                env.write_lock.release()
        assert _another_thread_writes(env), landed[0]


def test_a_finalizers_flush_interrupted_anywhere_leaves_the_lock_free(tmp_path: Path) -> None:
    st = cpstore.open(tmp_path / "s", durability="batched", batch_size=1000)
    try:
        rec = st.recorder("r")
        rec.checkpoint(0, {"a": 1})
        env: Any = st.backend.env
        landings, left = _sweep(env, st.backend.try_flush_here)
        assert landings > 2 and left == []
        st.flush()
        assert _another_thread_writes(env)
    finally:
        st.close()


def test_a_close_wait_interrupted_anywhere_leaves_the_lock_free(tmp_path: Path) -> None:
    st = cpstore.open(tmp_path / "s", durability="none")
    try:
        st.recorder("r").checkpoint(0, {"a": 1})
        env: Any = st.backend.env

        def wait() -> None:
            with env.quiesced() as quiet:
                assert quiet

        landings, left = _sweep(env, wait)
        assert landings > 2 and left == []
    finally:
        st.close()


@pytest.mark.parametrize("how", ["try", "wait"])
def test_take_write_lock_interrupted_anywhere_keeps_no_lock(how: str) -> None:
    """The helper all three share (the registry's close of an environment left open
    takes the lock through it and lets it go at once), on a lock the thread does not
    hold (each caller returns before when it does)."""
    lock = threading.RLock()
    got: list[bool] = []

    def take() -> None:
        got.append(take_write_lock(lock, blocking=how == "wait"))

    k = 0
    while True:
        k += 1
        got.clear()
        landed = interrupted_at(k, {"take_write_lock"}, take)
        if not landed:
            assert got == [True]
            lock.release()
            break
        assert not lock._is_owned(), landed[0]  # type: ignore[attr-defined]
    assert k > 1


def _left_open(path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """An environment a close left open (another thread's read outlived the close's wait)
    whose read has ended since: registered, no handle, what ``_close_left_open`` closes."""
    monkeypatch.setattr(lmdb_txns, "CLOSE_WAIT_SECONDS", 0.05)
    st = cpstore.open(path, durability="none")
    cid = st.recorder("r").checkpoint(0, {"a": 1})
    env: Any = st.backend.env
    inside, done = threading.Event(), threading.Event()

    def read() -> None:
        with st.read(cid):
            inside.set()
            done.wait(10)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert inside.wait(10)
    with pytest.raises(StoreError, match="left open"):
        st.close()
    done.set()
    reader.join(10)
    assert not env.closed and env.handles == 0
    return env


def test_the_registrys_close_of_an_env_left_open_interrupted_anywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``lmdb_registry._close_left_open`` (the next open's, ``is_open_here``'s or a
    compact's close of an environment a close left open) interrupted at each landing in
    its frame and take_write_lock's: the write lock is free after each, and the
    environment is not stuck open (the next such close closes it); uninterrupted, it
    closes it. With a plain ``acquire(False)`` put back in its frame, the landing on the
    acquire's return keeps the lock (``_close_left_open@360``, as before 5f08159), every
    other thread's write then waits forever. meta80 found a second window: a landing on
    the registry lock's release after the close took its own handle, or at release_env's
    start, left that handle taken (``_close_left_open@536`` before): the env stayed open
    for good, every later open with another mode and every compact refused; the handle
    is now given back (``taken``). Landings in release_env's frame are swept too."""
    path = tmp_path / "s"
    key = lmdb_registry.canonical(str(path))
    k = 0
    while True:
        k += 1
        env = _left_open(path, monkeypatch)
        landed = interrupted_at(
            k,
            {"_close_left_open", "take_write_lock", "release_env"},
            lambda: lmdb_registry._close_left_open(key),
        )
        if not landed:
            assert env.closed
            break
        assert not env.write_lock._is_owned(), landed[0]
        lmdb_registry._close_left_open(key)  # the next open's
        assert env.closed, landed[0]
    assert k > 4, k
    with cpstore.open(path) as st:
        assert st.verify().ok
