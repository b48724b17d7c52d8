"""A fork() child of a process where another thread was taking the registry lock (review81).

CPython's ``Lock.locked()`` reads a flag the acquiring thread sets only once it holds the
GIL again: a thread woken in its blocking acquire has already taken the lock's semaphore
while the flag still says free. A child forked in that window inherited the semaphore
taken and the flag clear, so ``_after_fork_in_child``'s ``if locked(): release()`` left it
taken, and the child's first open of any store hung forever (a stress of 4 threads
opening/closing one store, the main thread forking: 2-3 children of ~200 in 40 s hung,
each with ``locked()`` False). The child now re-initialises the lock outright.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest
from test_registry_fork import _in_a_child

from cpstore.store import lmdb_registry_state

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="fork()")


def test_a_child_forked_while_a_waiter_takes_the_registry_lock_opens_stores(
    tmp_path: Path,
) -> None:
    """This thread holds the registry lock, another blocks in its acquire; the lock is let
    go and, this thread keeping the GIL (a long switch interval), the waiter has taken the
    lock's semaphore but not yet the GIL (``locked()`` still False) when the process forks:
    the child opens a store ("hung" before: the lock stayed taken in the child)."""
    lock = lmdb_registry_state._REGISTRY_LOCK
    got = threading.Event()

    def wait_for_it() -> None:
        with lock:
            got.set()

    interval = sys.getswitchinterval()
    lock.acquire()
    waiter = threading.Thread(target=wait_for_it, daemon=True)
    try:
        waiter.start()
        time.sleep(0.3)  # the waiter is in its blocking acquire, the GIL let go
        sys.setswitchinterval(1000.0)  # this thread keeps the GIL until it waits
        lock.release()
        taken, end = False, time.perf_counter() + 10
        while not taken and time.perf_counter() < end:  # until the waiter took it
            if lock.acquire(blocking=False):  # not yet: given back (the waiter woken again)
                lock.release()
            else:
                taken = True  # taken by the waiter, which waits for the GIL this thread keeps
        shown_free = not lock.locked()  # the flag: the waiter has not run since
        outcome = _in_a_child(tmp_path / "s")
    finally:
        sys.setswitchinterval(interval)
        if not got.wait(60):
            lock.release()
        waiter.join(60)
    assert taken and shown_free  # the window: taken, yet locked() False
    assert outcome == "opened"
