"""What the fork-child tests' scripts (each run in a fresh interpreter) share.

:data:`TELL_EACH`: what a fork() child's reads raised, told to its parent through a
pipe: source the scripts begin with. The functions below: a child's lock or mark taking
the descriptor number a fork closed (``FORK_CLOSED_FDS``) and whether it stands once the
parent's object was closed there; a script run by :func:`run_child` (which puts the
repository and this folder on its path) imports them (``from fork_child import take,
report``).
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

from cpstore.store import lmdb_open
from cpstore.store.lmdb_holders import HolderMark

#: Defines ``tell_each(w, reads)``: in the child, tries each ``(name, read)`` of ``reads``
#: in turn, writes ``name read`` or ``name <its exception's class>``, a line each, to the
#: pipe's end ``w``, and ends the child (``os._exit(0)``).
TELL_EACH = r"""
import os


def tell_each(w, reads):
    said = []
    for name, read in reads:
        try:
            read()
            said.append(f"{name} read")
        except Exception as exc:
            said.append(f"{name} {type(exc).__name__}")
    os.write(w, "\n".join(said).encode())
    os._exit(0)
"""

#: The mark's purpose byte in the children's ``HolderMark(folder, 7)`` (its OFD lock's
#: owner in /proc/locks is ``7 << 32 | pid``).
MARK_PURPOSE = 7


def take(n: int, folder: str, mine_is: str) -> int:
    """The child's next open takes ``n``, the number the fork closed (the gaps below it
    filled): a creation lock's flock on ``folder`` (``mine_is`` "lock") or a holder mark
    on it ("mark"); its descriptor."""
    fill = []
    while (fd := os.open(os.devnull, os.O_RDONLY)) < n:
        fill.append(fd)
    os.close(fd)
    return own_lock_or_mark(folder, mine_is)


def own_lock_or_mark(folder: str, mine_is: str) -> int:
    """A creation lock's flock on ``folder`` ("lock") or a holder mark on it ("mark"): its
    descriptor."""
    if mine_is == "lock":
        fd = lmdb_open.lock_folder(folder, exclusive=True)
    else:
        fd = HolderMark(folder, MARK_PURPOSE).fd
    assert fd is not None, folder  # the folder is there: each test made it
    return fd


def flock_state(folder: str) -> str:
    """``"held"`` while a flock on ``folder`` stands (another open of it cannot take one),
    else ``"lost"``."""
    probe = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return "lost"
    except BlockingIOError:
        return "held"


def mark_state(folder: str) -> str:
    """``"held"`` while this process's mark on ``folder`` stands (its OFD lock, named by this
    pid, in /proc/locks), else ``"lost"``."""
    st = os.stat(folder)
    where = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    at = str(MARK_PURPOSE << 32 | os.getpid())
    with open("/proc/locks") as f:
        lines = [ln.split() for ln in f]
    found = any(ln[1] == "OFDLCK" and ln[5] == where and ln[6] == at for ln in lines)
    return "held" if found else "lost"


def same_folder(fd: int, folder: str) -> bool:
    """Whether ``fd`` is open on ``folder`` still."""
    try:
        return os.path.samestat(os.fstat(fd), os.stat(folder))
    except OSError:
        return False


def report(n: int, mine: int, folder: str, mine_is: str = "lock") -> None:
    """Print whether ``mine`` took ``n``, whether the child's lock or mark stands, and
    whether ``mine`` is open on ``folder`` still; then end the child (``os._exit(0)``)."""
    state = flock_state(folder) if mine_is == "lock" else mark_state(folder)
    print(mine == n, state, same_folder(mine, folder), flush=True)
    os._exit(0)


def child_env() -> dict[str, str]:
    """This process's environment with the repository and this folder as the path."""
    here = Path(__file__).parent
    return {**os.environ, "PYTHONPATH": os.pathsep.join((str(here.parent), str(here)))}


def run_child(
    script: str, *args: str, prefix: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """``script`` run in a fresh interpreter (under ``prefix``, e.g. ``unshare``) with
    ``args``, cpstore and this folder on its path; it must exit 0."""
    done = subprocess.run(
        [*prefix, sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=child_env(),
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done
