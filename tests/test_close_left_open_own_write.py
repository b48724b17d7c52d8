"""A close of a store left open, run by its next open or is_open_here (lmdb_registry
._close_left_open), from the thread inside the write that kept it open (a signal handler
of that thread asking whether the store is open, or opening it): the write lock is an
RLock, so the idle check took the thread's own write for none, closed the environment
under it, said "not open here", and the checkpoint was refused StoreClosedError (audit50).
"""

from __future__ import annotations

from pathlib import Path

from script_run import run_script

import cpstore

_SCRIPT = r"""
import os, sys, threading, time
import cpstore
from cpstore.errors import StoreError
from cpstore.store import lmdb_registry, lmdb_txns, lmdb_env
lmdb_txns.CLOSE_WAIT_SECONDS = 0.3
path = sys.argv[1]
st = cpstore.open(path)
st.recorder("r").checkpoint(0, {"a": 1})
env = st.backend.env
inside, closed = threading.Event(), threading.Event()
real = type(env)._cover_tail
def cover(self):
    if threading.current_thread() is not threading.main_thread():
        return real(self)
    inside.set(); closed.wait(10)
    # what a signal handler of this thread does mid-write: asks about (or opens) the store
    print("open here", lmdb_registry.is_open_here(path), flush=True)
    return real(self)
type(env)._cover_tail = cover
def closer():
    inside.wait(10)
    try:
        st.close()
    except StoreError as exc:
        print("left open", "left open" in str(exc), flush=True)
    closed.set()
t = threading.Thread(target=closer); t.start()
try:
    c = st.recorder("r").checkpoint(1, {"a": 2})
    print("wrote", flush=True)
except BaseException as exc:
    print("write", type(exc).__name__, str(exc)[:200], flush=True)
t.join()
type(env)._cover_tail = real
with cpstore.open(path, readonly=True, create=False) as ro:
    print("steps", [m.step for m in ro.history("r")], flush=True)
"""


def test_a_close_of_a_store_left_open_waits_for_the_calling_threads_own_write(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "s")
    out = run_script(_SCRIPT, path)
    assert out.returncode == 0, (out.returncode, out.stdout, out.stderr[-2000:])
    lines = out.stdout.splitlines()
    assert lines[0] == "left open True", lines
    assert "open here True" in lines, lines  # before: False, the env closed under the write
    assert "wrote" in lines, lines  # before: StoreClosedError
    assert "steps [1, 0]" in lines, lines
    with cpstore.open(path, readonly=True, create=False) as ro:
        assert [m.step for m in ro.history("r")] == [1, 0]
