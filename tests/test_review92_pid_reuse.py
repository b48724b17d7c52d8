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

_SCRIPT = """
import os, sys
import cpstore
import cpstore.errors
from cpstore.store import lmdb_open
from fork_child import same_folder, take

a, b, made, mine_is, closer = sys.argv[1:6]
go_r, go_w = os.pipe()
out_r, out_w = os.pipe()
if os.fork() == 0:  # X: opens a (its mark) or holds its creation lock, forks C, exits
    x = os.getpid()
    if made in ("mark", "store"):
        store = cpstore.open(a, durability="none")
        n = store._backend.env._mark.fd if made == "mark" else -1
    else:
        lock = lmdb_open.creation_lock(a, exclusive=True)
        n = lock.__enter__()
    if os.fork() == 0:  # C: once X is reaped, forks G with X's pid
        os.read(go_r, 1)
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(x - 1))
        if os.fork() == 0:  # G
            if os.getpid() != x:
                os.write(out_w, b"no reuse\\n")
                os._exit(0)
            if made == "store":  # X's store used here: refused, as in any fork child
                got = []
                for use in (lambda: cpstore.open(a, durability="none"), store.retained):
                    try:
                        opened = use()
                        got.append("used")
                        if mine_is == "postgresql" and isinstance(opened, cpstore.Store):
                            opened.close()
                    except cpstore.errors.ForkError:
                        got.append("refused")
                os.write(out_w, (" ".join(got) + "\\n").encode())
                os._exit(0)
            mine = take(n, b, mine_is)  # G's next open takes the number the forks closed
            if made == "lock":
                lock.__exit__(None, None, None)
            elif closer == "mark":
                store._backend.env._mark.close()
            else:
                store.close()
            os.write(out_w, f"{mine == n} {same_folder(mine, b)}\\n".encode())
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


def _script(cmd: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    """_SCRIPT run under ``cmd`` (the pid namespace) with ``args``; skips when the
    grandchild did not get the exited opener's pid."""
    done = run_child(_SCRIPT, *args, prefix=tuple(cmd))
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
