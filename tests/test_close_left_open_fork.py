"""A fork() while another thread closes a store a close left open (lmdb_registry
._close_left_open, run by the next open): the child forgets it, as it forgets every
environment no handle holds, and opens the store itself. The close's own transient handle
was counted as a user's: the child's every open of the store raised ForkError "opened
before fork()" for its whole life, though no handle of it was open anywhere (audit50).
"""

from __future__ import annotations

from pathlib import Path

from script_run import run_script

import cpstore

_SCRIPT = r"""
import os, sys, threading
import cpstore
from cpstore.errors import StoreError
from cpstore.store import lmdb_registry, lmdb_txns
lmdb_txns.CLOSE_WAIT_SECONDS = 0.5
path = sys.argv[1]
st = cpstore.open(path)
cid = st.recorder("r").checkpoint(0, {"a": 1})
opened, release = threading.Event(), threading.Event()
def reader():
    with st.read(cid):
        opened.set()
        release.wait(30)
t = threading.Thread(target=reader)
t.start()
opened.wait(30)
try:
    st.close()
except StoreError as exc:
    print("left open", "left open" in str(exc), flush=True)
release.set()
t.join(30)
real = lmdb_registry.release_env
def release_env(env, failed=None):  # _close_left_open's: fork with its handle taken
    pid = os.fork()
    if pid == 0:
        try:
            with cpstore.open(path, durability="none") as child:
                child.recorder("r").checkpoint(1, {"a": 2})
                print("child wrote", flush=True)
        except BaseException as exc:
            print("child", type(exc).__name__, exc, flush=True)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    print("child status", status, flush=True)
    return real(env, failed)
lmdb_registry.release_env = release_env
lmdb_registry.is_open_here(path)  # closes the store left open (release_env)
lmdb_registry.release_env = real
with cpstore.open(path) as again:
    print("parent sees", [m.step for m in again.history("r")], flush=True)
"""


def test_a_fork_child_beside_a_close_of_a_store_left_open_opens_it(tmp_path: Path) -> None:
    path = str(tmp_path / "s")
    out = run_script(_SCRIPT, path)
    assert out.returncode == 0, (out.returncode, out.stdout, out.stderr)
    lines = out.stdout.splitlines()
    assert lines[0] == "left open True", lines
    assert "child wrote" in lines, lines  # before: child ForkError
    assert "child status 0" in lines, lines
    assert "parent sees [1, 0]" in lines, lines
    with cpstore.open(path, readonly=True, create=False) as ro:
        assert [m.step for m in ro.history("r")] == [1, 0]
