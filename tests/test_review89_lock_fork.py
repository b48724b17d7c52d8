"""review89: a creation lock (``lmdb_open.CreationLock``) carried into a fork() child.

A fork child closes at once every folder descriptor a creation lock holds
(``FORK_CLOSED_FDS``: the child must never keep its parent's flock), so in the child
the lock's number is free and the child's next open takes it. The lock object came
along all the same: freed there (intr88's ``__del__``, for a lock whose ``__exit__`` an
interrupt skipped and that garbage kept), or left there by a forking thread inside its
``with`` (``__exit__``), it closed that number: another descriptor of the child's, here
the child's own creation lock on another store, whose flock went with it (two writers
creating or compacting one store at once), and its owner later closed a number that
was no longer its own. A lock now closes only in the process that took it."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fork_child import child_env, run_child

_CHILD = """
import gc, os, sys
from cpstore.store import lmdb_open
from fork_child import report, take

a, b, how = sys.argv[1], sys.argv[2], sys.argv[3]


def wait(pid):
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, status


if how == "garbage":  # __exit__ skipped by an interrupt; garbage keeps the lock object
    gc.disable()
    lost = lmdb_open.creation_lock(a, exclusive=True)
    n = lost.__enter__()
    cycle = [lost]
    cycle.append(cycle)
    del lost, cycle
    pid = os.fork()
    if pid == 0:
        mine = take(n, b, "lock")
        gc.collect()  # the inherited lock object freed here
        report(n, mine, b)
    wait(pid)
else:  # forked inside the with; the child leaves it too
    with lmdb_open.creation_lock(a, exclusive=True) as n:
        pid = os.fork()
        if pid == 0:
            mine = take(n, b, "lock")
    if pid == 0:
        report(n, mine, b)
    wait(pid)
"""


@pytest.mark.parametrize("how", ["garbage", "with"])
def test_a_creation_lock_in_a_fork_child_never_closes_the_childs_descriptor(
    tmp_path: Path, how: str
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    done = run_child(_CHILD, str(a), str(b), how)
    took_its_number, state, still_open = done.stdout.split()
    assert took_its_number == "True"  # the child's lock took the number the fork freed
    assert state == "held"  # before: "lost", the child's lock on b released by a's object
    assert still_open == "True"


_PENDING = """
import gc, os, sys, threading
from cpstore.store import lmdb_open
from fork_child import flock_state, take

a, b = sys.argv[1], sys.argv[2]
kept = lmdb_open.creation_lock(a, exclusive=False)
kept.__enter__()  # a live lock on the same folder, taken first
lost = lmdb_open.creation_lock(a, exclusive=False)
n = lost.__enter__()  # its __exit__ never runs (an interrupt landed at its start)
forked = []


def fork_then_lock():
    # Waits in os.fork()'s before hook for FORK_GUARD, as the release thread does.
    pid = os.fork()
    if pid == 0:
        mine = take(n, b, "lock")
        gc.collect()
        if flock_state(b) == "lost":
            os._exit(3)  # the child's lock on b was released
        os.fstat(mine)
        os._exit(0)
    forked.append(pid)


with lmdb_open.FORK_GUARD:  # the collector frees the lost lock in a guarded region
    del lost
    forker = threading.Thread(target=fork_then_lock)
    forker.start()
forker.join(60)
for t in threading.enumerate():
    if t.name == "cpstore-creation-lock":
        t.join(60)
_, status = os.waitpid(forked[0], 0)
print(os.waitstatus_to_exitcode(status), flush=True)
# The live lock is untouched: its descriptor open, the folder still locked shared.
os.fstat(kept._held[0])
real = os.path.realpath(a)
on_a = [f for f in os.listdir("/proc/self/fd") if os.path.realpath(f"/proc/self/fd/{f}") == real]
print(len(on_a), flush=True)  # the lost lock's descriptor closed, the live one's open
print("ready", flush=True)
sys.stdin.readline()
kept.__exit__(None, None, None)
print("done", flush=True)
"""


def _locked(folder: Path, mode: int) -> bool:
    """Whether an flock of ``mode`` on ``folder`` is refused (another holds it)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def test_a_lost_lock_released_by_its_thread_leaves_live_locks_and_a_fork_child_alone(
    tmp_path: Path,
) -> None:
    """intr88's release thread (the lost lock freed inside a ``FORK_GUARD`` region),
    raced by a fork() from another thread: whichever takes the guard first, the child's
    own lock at the lost lock's number stands, and so does a live lock of the same
    folder in the parent (flock is the open file's: only the lost one's is dropped)."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-c", _PENDING, str(a), str(b)],
        env=child_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None and proc.stderr is not None
        child = proc.stdout.readline().strip()
        assert child == "0", proc.stderr.read() if child == "" else child
        assert proc.stdout.readline().strip() == "1"
        assert proc.stdout.readline().strip() == "ready"
        assert _locked(a, fcntl.LOCK_EX)  # refused, the live shared lock holds
        assert not _locked(a, fcntl.LOCK_SH)  # taken beside it
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "done"
        assert not _locked(a, fcntl.LOCK_EX)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
