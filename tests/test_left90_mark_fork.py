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

from pathlib import Path

import pytest
from fork_child import run_child

_CHILD = """
import os, sys
import cpstore
from cpstore.store.lmdb_registry import is_open_here
from fork_child import report, take

a, b, mine_is, closer = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
store = cpstore.open(a, durability="none")
env = store._backend.env
n = env._mark.fd
assert n is not None


pid = os.fork()
if pid == 0:
    mine = take(n, b, mine_is)
    if closer == "let_go":  # the environment's undoing, run in the child
        env._let_go()
    elif closer == "mark":
        env._mark.close()
    else:  # the store's close: a child's releases nothing of its parent's
        store.close()
    report(n, mine, b, mine_is)
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
    return run_child(script, str(a), str(b), *args).stdout


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
import os, sys
import cpstore
from cpstore.store import lmdb_open
from cpstore.store.lmdb_registry import pinned_for_compact, reserved_for_compact
from fork_child import flock_state

a, b = sys.argv[1], sys.argv[2]
with reserved_for_compact(a) as reserved, pinned_for_compact(a, None, reserved) as folder:
    own = int(folder.rsplit("/", 1)[1])  # the descriptor pin_folder opened: /proc/self/fd/N
    pid = os.fork()
    if pid == 0:
        inherited = os.path.samestat(os.fstat(own), os.stat(a))  # not closed by the fork
        mine = lmdb_open.lock_folder(b, exclusive=True)
if pid == 0:  # the child left the block: its finally closed its own copy of ``own``
    print(inherited, mine != own, flock_state(b), flush=True)
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
