"""intr88: an interrupt (a signal handler's exception: Ctrl-C, a watchdog's alarm) landing
at the start of the creation lock's ``__exit__``.

A frame's start is a point where CPython runs pending signal handlers, so such a landing
runs nothing of ``__exit__``: ``CreationLock`` keeps the folder's descriptor as an int in
a list, so when the lock object was freed with the exception the descriptor stayed open,
and the store's exclusive creation lock (an flock on it) was this process's for good:
every later open of the store, here or in another process, waited forever. Compaction
takes it so, and so does a writable open upgrading an older layout. ``CreationLock``
now lets go of what it still holds when it is freed (``__del__``): held while the
exception lives, as every lock in a frame that exception keeps, never for good."""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path

import pytest
from test_begin_interrupted import (
    fds_in,
    folder_lock_free,
    landing_at_start,
    one_checkpoint,
    read_wrong,
    take_creation_lock,
)


@pytest.mark.parametrize("via", ["creation_lock", "compact_store"])
def test_a_creation_lock_exit_interrupted_at_its_start_frees_the_lock(
    tmp_path: Path, via: str
) -> None:
    path = tmp_path / "s"
    cid = one_checkpoint(path)
    assert landing_at_start("CreationLock.__exit__", lambda: take_creation_lock(path, via))
    gc.collect()  # the exception is gone: nothing keeps the lock object
    assert folder_lock_free(path)  # before: held for good, every later open waited
    assert fds_in(path) == []
    assert read_wrong(path, cid) is None


_FREED_UNDER_THE_FORK_GUARD = """
import fcntl, os, sys, threading
from cpstore.store import lmdb_open

path = sys.argv[1]
lock = lmdb_open.creation_lock(path, exclusive=True)
lock.__enter__()  # taken; its __exit__ never runs (an interrupt landed at its start)
with lmdb_open.FORK_GUARD:  # the collector ran __del__ in a guarded region of this thread
    del lock
for t in threading.enumerate():
    if t.name == "cpstore-creation-lock":
        t.join(20)
fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    print("free")
except BlockingIOError:
    print("held")
"""


def test_a_lost_creation_lock_freed_inside_a_fork_guarded_region_does_not_deadlock(
    tmp_path: Path,
) -> None:
    """The collector may free a lost ``CreationLock`` while this very thread holds
    ``FORK_GUARD`` (a plain lock, held around the descriptor bookkeeping, where an
    allocation can start a collection): its ``__del__`` waiting for the guard waited for
    good. It leaves the release to a thread of its own then, which frees the lock once
    the guard is let go."""
    path = tmp_path / "d"
    path.mkdir()
    try:
        done = subprocess.run(
            [sys.executable, "-c", _FREED_UNDER_THE_FORK_GUARD, str(path)],
            check=False,
            capture_output=True,
            text=True,
            timeout=30,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("freeing the lost lock under FORK_GUARD deadlocked")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["free"]
