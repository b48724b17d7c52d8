"""left90: a holder mark (``lmdb_holders.HolderMark``) carried into a fork() child.

A fork child closes at once every holder mark's descriptor (``FORK_CLOSED_FDS``: an OFD
lock lives while any copy of its descriptor does), so in the child the mark's number is
free and the child's next open takes it; a mark or a creation lock lists that number in
``FORK_CLOSED_FDS`` again. The mark told a child's copy by that listing alone, so a
close of the parent's mark run in the child (the environment's undoing, ``Env._let_go``,
which an open's undo and ``close_quiesced`` run) closed the child's own descriptor: its
creation lock on another store (the flock gone: two writers creating or compacting that
store at once) or its mark (an upgrade beside it no longer saw this release). No public
path of a child runs that undoing on a parent's environment (``release_env`` stops at
the pid; review89 said so): it takes a fork made by the opening or closing thread
itself, past that check (a signal handler or a finalizer forking there). A mark now
closes only in the process that made it, as review89's ``CreationLock``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

_CHILD = """
import fcntl, os, sys
import cpstore
from cpstore.store import lmdb_open
from cpstore.store.lmdb_holders import HolderMark
from cpstore.store.lmdb_registry import is_open_here

a, b, mine_is, closer = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
store = cpstore.open(a, durability="none")
env = store._backend.env
n = env._mark.fd
assert n is not None


def take(n):
    # The child's next open takes the number the fork closed (the gaps below it filled).
    fill = []
    while (fd := os.open(os.devnull, os.O_RDONLY)) < n:
        fill.append(fd)
    os.close(fd)
    if mine_is == "lock":
        return lmdb_open.lock_folder(b, exclusive=True)
    mark = HolderMark(b, 7)
    return mark.fd


def report(n, mine):
    if mine_is == "lock":  # the child's flock on b: another open of b cannot take it
        probe = os.open(b, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
            state = "lost"
        except BlockingIOError:
            state = "held"
    else:  # the child's mark on b: its OFD lock, named by this pid, in /proc/locks
        st = os.stat(b)
        where = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
        at = str(7 << 32 | os.getpid())
        with open("/proc/locks") as f:
            lines = [ln.split() for ln in f]
        found = any(ln[1] == "OFDLCK" and ln[5] == where and ln[6] == at for ln in lines)
        state = "held" if found else "lost"
    try:
        same = os.path.samestat(os.fstat(mine), os.stat(b))
    except OSError:
        same = False
    print(mine == n, state, same, flush=True)
    os._exit(0)


pid = os.fork()
if pid == 0:
    mine = take(n)
    if closer == "let_go":  # the environment's undoing, run in the child
        env._let_go()
    elif closer == "mark":
        env._mark.close()
    else:  # the store's close: a child's releases nothing of its parent's
        store.close()
    report(n, mine)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, status
# The parent's mark is its own still, and closes with its store.
assert os.path.samestat(os.fstat(n), os.stat(a))
store.close()
assert not is_open_here(a)
try:
    os.fstat(n)
    print("parent mark left open", flush=True)
except OSError:
    pass
"""


def _in_child(tmp_path: Path, script: str, *args: str) -> str:
    """``script`` run in a fresh interpreter with a store at ``a`` and an empty folder
    ``b``; its output (it must exit 0)."""
    a, b = tmp_path / "a", tmp_path / "b"
    b.mkdir()
    with __import__("cpstore").open(a, durability="none"):
        pass
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    done = subprocess.run(
        [sys.executable, "-c", script, str(a), str(b), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _run(tmp_path: Path, mine_is: str, closer: str) -> str:
    return _in_child(tmp_path, _CHILD, mine_is, closer)


@pytest.mark.parametrize("mine_is", ["lock", "mark"])
@pytest.mark.parametrize("closer", ["let_go", "mark", "store"])
def test_a_parents_mark_closed_in_a_fork_child_leaves_the_childs_own(
    tmp_path: Path, mine_is: str, closer: str
) -> None:
    out = _run(tmp_path, mine_is, closer)
    # The child's lock or mark took the number; the parent's mark's close left it.
    assert out.splitlines()[0] == "True held True", out
    assert "parent mark left open" not in out, out


_PINNED = """
import fcntl, os, sys
import cpstore
from cpstore.store import lmdb_open
from cpstore.store.lmdb_registry import pinned_for_compact, reserved_for_compact

a, b = sys.argv[1], sys.argv[2]
with reserved_for_compact(a) as reserved, pinned_for_compact(a, None, reserved) as folder:
    own = int(folder.rsplit("/", 1)[1])  # the descriptor pin_folder opened: /proc/self/fd/N
    pid = os.fork()
    if pid == 0:
        inherited = os.path.samestat(os.fstat(own), os.stat(a))  # not closed by the fork
        mine = lmdb_open.lock_folder(b, exclusive=True)
if pid == 0:  # the child left the block: its finally closed its own copy of ``own``
    probe = os.open(b, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        state = "lost"
    except BlockingIOError:
        state = "held"
    print(inherited, mine != own, state, flush=True)
    os._exit(0)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, status
"""


def test_compacts_pin_left_in_a_fork_child_closes_only_the_childs_copy(tmp_path: Path) -> None:
    """``pinned_for_compact``'s own descriptor (a folder without a creation lock) is no
    fork-closed one: the child keeps its copy, so no open of the child takes its number,
    and the block's ``finally`` run there closes that copy alone (review89's doubt)."""
    out = _in_child(tmp_path, _PINNED)
    assert out.splitlines()[0] == "True True held", out
