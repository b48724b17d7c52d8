"""review92: a holder mark or a creation lock in a fork() descendant that got its maker's
pid again.

left90's ``HolderMark`` and review89's ``CreationLock`` close their descriptor only in the
process that made them, told by the pid. A pid is reused: a process X opens a store (its
mark, or a creation lock held), forks C and exits; a fork of C after X is reaped may get
X's pid (a long-lived child forking workers wraps the pid space: 32,768 pids by default,
fewer in a container's namespace). That grandchild G carries X's objects and passes the
pid check: when G's own lock or mark on another store took the number the fork closed,
X's mark closed there (by ``Store.close``, whose registry check is by the pid too) or
X's lock's exit closed G's descriptor, and G's lock went under it (two writers creating
or compacting that store at once). Each now records this process's token
(``lmdb_open.PROCESS``, a fresh object in every fork child), not its pid.

Run in a new user and pid namespace (``unshare``), where ``ns_last_pid`` sets the next
pid; skipped where that cannot be made.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fork_child import run_child
from pg_cluster import fresh_url, pg_cluster  # noqa: F401 - fixture

#: Runs ``in_x()`` in a process X, which forks C and exits; once X is reaped, C sets
#: ``ns_last_pid`` and forks G, which gets X's pid and prints ``in_g(<in_x's result>)``
#: ("no reuse" when G did not get it). A script defines both and ends with ``descend()``.
_DESCEND = """
import os, sys

def descend():
    go_r, go_w = os.pipe()
    out_r, out_w = os.pipe()
    if os.fork() == 0:  # X
        x = os.getpid()
        made = in_x()
        if os.fork() == 0:  # C: once X is reaped, forks G with X's pid
            os.read(go_r, 1)
            with open("/proc/sys/kernel/ns_last_pid", "w") as f:
                f.write(str(x - 1))
            if os.fork() == 0:  # G
                try:
                    said = in_g(made) if os.getpid() == x else "no reuse"
                except BaseException as exc:
                    said = f"G raised {exc!r}"
                os.write(out_w, f"{said}\\n".encode())
                os._exit(0)
            os.wait()
            os._exit(0)
        os._exit(0)
    os.wait()  # X
    os.write(go_w, b"g")
    os.close(out_w)
    while True:  # C, reparented to this process (pid 1 of the namespace)
        try:
            os.wait()
        except ChildProcessError:
            break
    print(os.read(out_r, 1000).decode(), end="")
"""

_SCRIPT = """
import cpstore
import cpstore.errors
from cpstore.store import lmdb_open
from fork_child import same_folder, take

a, b, made_is, mine_is, closer = sys.argv[1:6]

def in_x():  # opens a (its mark) or holds its creation lock
    if made_is in ("mark", "store"):
        store = cpstore.open(a, durability="none")
        return store, (store._backend.env._mark.fd if made_is == "mark" else -1)
    lock = lmdb_open.creation_lock(a, exclusive=True)
    return lock, lock.__enter__()

def in_g(made):
    held, n = made
    if made_is == "store":  # X's store used here: refused, as in any fork child
        got = []
        for use in (lambda: cpstore.open(a, durability="none"), held.retained):
            try:
                opened = use()
                got.append("used")
                if mine_is == "postgresql" and isinstance(opened, cpstore.Store):
                    opened.close()
            except cpstore.errors.ForkError:
                got.append("refused")
        return " ".join(got)
    mine = take(n, b, mine_is)  # G's next open takes the number the forks closed
    if made_is == "lock":
        held.__exit__(None, None, None)
    elif closer == "mark":
        held._backend.env._mark.close()
    else:
        held.close()
    return f"{mine == n} {same_folder(mine, b)}"

descend()
"""


def _unshare() -> list[str]:
    tool = shutil.which("unshare")
    if tool is None:
        pytest.skip("no unshare")
    cmd = [tool, "--user", "--map-root-user", "--pid", "--fork"]
    probe = subprocess.run(
        [*cmd, sys.executable, "-c", "open('/proc/sys/kernel/ns_last_pid', 'w').write('50')"],
        capture_output=True,
        timeout=60,
        check=False,
    )
    if probe.returncode != 0:
        pytest.skip("cannot set the next pid in a new pid namespace here")
    return cmd


def _script(cmd: list[str], *args: str, script: str = _SCRIPT) -> subprocess.CompletedProcess[str]:
    """``script`` (after _DESCEND) run under ``cmd`` (the pid namespace) with ``args``;
    skips when the grandchild did not get the exited opener's pid."""
    done = run_child(_DESCEND + script, *args, prefix=tuple(cmd))
    if done.stdout.strip() == "no reuse":
        pytest.skip("the grandchild did not get the pid")
    return done


@pytest.mark.parametrize(
    ("made", "mine_is", "closer"),
    [
        ("mark", "lock", "mark"),
        ("mark", "lock", "store"),
        ("mark", "mark", "mark"),
        ("mark", "mark", "store"),
        ("lock", "lock", "exit"),
    ],
)
def test_a_descendant_with_the_makers_pid_keeps_its_own(
    tmp_path: Path, made: str, mine_is: str, closer: str
) -> None:
    cmd = _unshare()
    a, b = tmp_path / "a", tmp_path / "b"
    b.mkdir()
    with __import__("cpstore").open(a, durability="none"):
        pass
    done = _script(cmd, str(a), str(b), made, mine_is, closer)
    # G's lock or mark took the number X's held; X's close or exit in G left it open.
    assert done.stdout.splitlines() == ["True True"], (done.stdout, done.stderr[-3000:])


@pytest.mark.parametrize("backend", ["lmdb", "postgresql"])
def test_a_descendant_with_the_openers_pid_is_refused_its_store(
    tmp_path: Path, backend: str
) -> None:
    """The LMDB registry told a parent's environment by its opener's pid, and
    ``PgBackend`` its process: G's open of the store was handed X's environment
    (inherited through two forks: LMDB's liveness lock on X's pid is no process's, so
    another process's reader check frees G's reader slots and a writer may reuse the
    pages G reads), and X's store read on in G (on PostgreSQL through X's pool, whose
    threads G does not have)."""
    cmd = _unshare()
    a = str(tmp_path / "a") if backend == "lmdb" else fresh_url()
    with __import__("cpstore").open(a, durability="none"):
        pass
    done = _script(cmd, a, str(tmp_path), "store", backend, "-")
    # LMDB refuses the open too; PostgreSQL's open of the URL in G makes a pool of G's own.
    want = "refused refused" if backend == "lmdb" else "used refused"
    assert done.stdout.splitlines() == [want], (done.stdout, done.stderr[-3000:])


_RECORDER = """
import gc, warnings
import cpstore

a, b, end = sys.argv[1:4]

def in_x():  # a recorder holding one effect no checkpoint sealed
    rec = cpstore.open(a, durability="none").recorder("r")
    rec.effect("mail", b"sent")
    return [rec]

def ended(held):  # the dropped-effects warnings the recorder's end gave here
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        if end == "exit":  # its with-block left on an error
            held[0].__exit__(ValueError, ValueError("x"), None)
        held.clear()  # collected
        gc.collect()
    return sum("dropped" in str(w.message) for w in seen)

def in_g(held):
    own = [cpstore.open(b, durability="none").recorder("r")]  # G's own: warned, a control
    own[0].effect("mail", b"sent")
    return f"{ended(held)} {ended(own)}"

descend()
"""


@pytest.mark.parametrize("end", ["exit", "gc"])
def test_a_descendant_with_the_makers_pid_is_silent_on_its_recorder(
    tmp_path: Path, end: str
) -> None:
    """left93: the recorder told the process that made it by the pid (``recorder_ends``):
    G, given X's pid, warned that X's recorder dropped effects X still holds (a
    ``RuntimeWarning`` naming X's run, an error under ``-W error``, in place of the error
    leaving the block)."""
    cmd = _unshare()
    done = _script(cmd, str(tmp_path / "a"), str(tmp_path / "b"), end, script=_RECORDER)
    # X's recorder: silent in G, as in any fork child; G's own: warned.
    assert done.stdout.splitlines() == ["0 1"], (done.stdout, done.stderr[-3000:])
