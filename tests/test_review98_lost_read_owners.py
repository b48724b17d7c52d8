"""review98: which thread's lost read another thread's read may end (txns96's ``_end_lost``).

A lost read (a kept slice released after its block, an interrupted exit) is ended by its
own thread's next read, or by any thread's once its owner is gone: not a running
``threading`` thread and no Python frame. ``threading`` keeps a ``_DummyThread`` (made
when a thread it did not start, a raw ``_thread`` one or one started from C, calls
``threading.current_thread()``: ``logging`` does, for each record) in its registry after
that thread ended; such an owner looked alive for good, and its lost reads stayed listed
(and counted as reader entries) for the process's life, every later read of any thread
taking the gate and walking them. A thread that is alive keeps its entry in every case,
and an exited thread's ident handed to a new thread never ends the new thread's read.
"""

from __future__ import annotations

import _thread
import gc
import sys
import threading
import time
from pathlib import Path
from typing import Any

from lost_reads import a_live_raw_threads_lost_read_is_left_to_it, token_store


def _ran(fn: Any) -> None:
    """Run ``fn`` in a raw ``_thread`` thread and wait until that thread has ended (no
    Python frame left: the lock is released inside its last one)."""
    done = _thread.allocate_lock()
    done.acquire()

    def body() -> None:
        try:
            fn()
        finally:
            done.release()

    _thread.start_new_thread(body, ())
    done.acquire()
    while _last[0] in sys._current_frames():
        time.sleep(0.001)


_last: list[int] = [0]


def test_an_exited_dummy_threads_lost_read_is_ended_by_another_threads_read(
    tmp_path: Path,
) -> None:
    """Raw threads that asked ``threading.current_thread()`` keep slices and end; the
    caller drops the slices and reads: no lost read and no reader entry is left."""
    st, cid = token_store(tmp_path / "s")
    env = st._backend.env
    held: list[memoryview] = []

    def keep() -> None:
        _last[:] = [threading.current_thread().ident or 0]  # a _DummyThread, as logging makes
        with st.read(cid) as cp:
            held.append(cp.token_value_views()[0][1:])

    for _ in range(5):
        _ran(keep)
        assert isinstance(threading._active.get(_last[0]), threading._DummyThread)  # type: ignore[attr-defined]
    assert len(env.kept) == 5
    held.clear()
    gc.collect()
    with st.read(cid) as cp:
        assert cp.state() == {"a": 1}
    assert list(env._lost) == [] and list(env._active) == []
    st.close()
    assert env.closed


def test_a_live_dummy_threads_lost_read_is_left_to_it(tmp_path: Path) -> None:
    """A raw thread that asked ``threading.current_thread()`` keeps a slice and waits (in
    Python: it has a frame); the caller's read leaves its released read to it, and its
    own next read ends it."""
    a_live_raw_threads_lost_read_is_left_to_it(
        tmp_path / "s", lambda: threading.current_thread().ident or 0
    )


def test_a_new_thread_given_an_exited_threads_ident_keeps_its_own_read(
    tmp_path: Path,
) -> None:
    """Threads keep slices and end; a new thread (the OS hands out an exited thread's
    ident again at once) sits inside a read block while the caller drops the slices and
    reads: the new thread still holds its read, ends it, and once it has read again no
    lost read and no entry is left."""
    st, cid = token_store(tmp_path / "s")
    env = st._backend.env
    held: list[memoryview] = []
    old: list[int] = []

    def keep() -> None:
        old.append(threading.get_ident())
        with st.read(cid) as cp:
            held.append(cp.token_value_views()[0][1:])

    for _ in range(3):
        t = threading.Thread(target=keep)
        t.start()
        t.join()
    inside, go, out = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, Any] = {}

    def reader() -> None:
        seen["ident"] = threading.get_ident()
        with st.read(cid) as cp:
            inside.set()
            go.wait(30)
            seen["held"] = env.holds_read()
            seen["state"] = cp.state()
        seen["after"] = env.holds_read()
        with st.read(cid):  # its own next read ends what is left of its ident's
            pass
        out.set()

    t = threading.Thread(target=reader)
    t.start()
    assert inside.wait(30)
    held.clear()
    gc.collect()
    with st.read(cid):
        pass
    mine = env._active.count(seen["ident"])
    assert mine >= 1  # the live thread's read is never taken from it
    go.set()
    assert out.wait(30)
    t.join()
    assert seen["held"] is True and seen["state"] == {"a": 1} and seen["after"] is False
    with st.read(cid):
        pass
    assert list(env._lost) == [] and list(env._active) == []
    st.close()
    assert env.closed
