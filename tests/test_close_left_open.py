"""A close that cannot quiesce the environment leaves it open instead of crashing.

LMDB frees the environment at close; a thread of this process inside a call that
released the GIL (a write txn's begin waiting for LMDB's writer lock, which another
process held) then used freed memory. The close waited CLOSE_WAIT_SECONDS (5 s) for
such a thread and then closed all the same: the process died of SIGSEGV when the other
process let the lock go. Now the close raises StoreError "left open", the environment
stays open, and the waiting thread's checkpoint commits as it would.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from script_run import run_script

import cpstore
from cpstore.errors import StoreError
from cpstore.store import lmdb_txns

_SCRIPT = r"""
import subprocess, sys, threading, time
import cpstore
from cpstore.errors import StoreError
path = sys.argv[1]
st = cpstore.open(path, durability="sync")
rec = st.recorder("r")
rec.checkpoint(0, {"a": 0})
holder = subprocess.Popen([sys.executable, "-c", '''
import lmdb, sys, time
env = lmdb.open(sys.argv[1], max_dbs=64)
txn = env.begin(write=True)  # LMDB's writer lock, across processes
print("held", flush=True)
time.sleep(7)
txn.abort()
''', path], stdout=subprocess.PIPE, text=True)
assert holder.stdout.readline().strip() == "held"
got = []
def write():
    try:
        got.append("ok " + rec.checkpoint(1, {"a": 1}))
    except BaseException as exc:
        got.append(f"{type(exc).__name__}: {exc}")
writer = threading.Thread(target=write)
writer.start()
time.sleep(0.5)  # inside the write txn's begin, waiting for the holder's lock
try:
    st.close()
    print("close returned", flush=True)
except StoreError as exc:
    print("close raised", type(exc).__name__, "left open" in str(exc), flush=True)
writer.join()
print("writer", got[0], flush=True)
holder.wait()
"""


def test_a_close_under_a_thread_waiting_for_another_process_lock_leaves_it_open(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "s")
    out = run_script(_SCRIPT, path)
    assert out.returncode == 0, (out.returncode, out.stdout, out.stderr)  # before: -11
    lines = out.stdout.splitlines()
    assert "close raised StoreError True" in lines, lines
    (writer,) = [ln for ln in lines if ln.startswith("writer ")]
    assert writer.startswith("writer ok "), writer
    cid = writer.split()[-1]
    with cpstore.open(path, readonly=True, create=False) as ro:
        assert ro.ref("r") == cid
        assert [m.step for m in ro.history("r")] == [1, 0]
        assert ro.verify().ok


def test_a_close_under_a_read_view_held_open_leaves_it_readable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lmdb_txns, "CLOSE_WAIT_SECONDS", 0.5)
    st = cpstore.open(str(tmp_path / "s"))
    cid = st.recorder("r").checkpoint(0, {"a": [1, 2]})
    opened, release = threading.Event(), threading.Event()
    seen: list[object] = []

    def reader() -> None:
        with st.read(cid) as view:
            opened.set()
            release.wait(30)
            seen.append(view.state())  # the environment was not closed under it

    thread = threading.Thread(target=reader)
    thread.start()
    assert opened.wait(30)
    with pytest.raises(StoreError, match="left open"):
        st.close()
    with pytest.raises(StoreError):  # this handle is closed all the same
        st.recorder("r")
    release.set()
    thread.join(30)
    assert seen == [{"a": [1, 2]}]
    again = cpstore.open(str(tmp_path / "s"))  # shares the environment left open
    try:
        assert again.ref("r") == cid
        again.recorder("r").checkpoint(1, {"a": [3]})
        assert [m.step for m in again.history("r")] == [1, 0]
    finally:
        again.close()
