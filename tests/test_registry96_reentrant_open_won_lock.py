"""A signal handler's open landing while its thread's open holds the creation lock it
waited for (between that wait and the registry lock) is refused, never a wait for itself.

An open that finds a store folder's creation lock busy waits for it without the registry
lock (lmdb_registry.acquire_env), then opens under the lock it won. A handler's open of
the same folder landing there found the folder busy (its own thread's lock: a flock of
another descriptor conflicts) and waited for it for good; registry96's guard on the
registry lock did not see it. Now it is ``ReentrantOpenError`` at once, and the
interrupted open completes. Run in a child with a time limit (a hang is the failure)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from script_run import run_script

_SCRIPT = r"""
import fcntl, os, signal, sys, threading
import cpstore
from cpstore.errors import StoreError

path = sys.argv[1]
cpstore.open(path).close()
seen = []


def handler(signum, frame):
    try:
        cpstore.open(path).close()
        seen.append("handler ok")
    except StoreError as exc:
        seen.append(f"handler {type(exc).__name__}")


signal.signal(signal.SIGUSR1, handler)


def trace(frame, event, arg):
    # At the return of the wait for the creation lock that acquire_env won (held).
    code = frame.f_code
    if event == "return" and code.co_name == "lock_folder" and arg is not None:
        if frame.f_back is not None and frame.f_back.f_code.co_name == "acquire_env":
            sys.settrace(None)
            signal.raise_signal(signal.SIGUSR1)
    return trace if event == "call" else None


busy = os.open(path, os.O_RDONLY | os.O_DIRECTORY)  # another holder of the creation lock
fcntl.flock(busy, fcntl.LOCK_EX)
threading.Timer(0.5, os.close, (busy,)).start()
sys.settrace(trace)
with cpstore.open(path) as st:
    sys.settrace(None)
    cid = st.recorder("r").checkpoint(0, {"a": 1})
print(*seen, sep="\n")
with cpstore.open(path, durability="none") as again:  # nothing left open or registered
    print("kept", again.ref("r") == cid)
print("done")
"""


def test_a_handlers_open_while_its_thread_holds_a_won_creation_lock_is_refused(
    tmp_path: Path,
) -> None:
    """The handler's open is ReentrantOpenError; the interrupted open writes and closes."""
    try:
        out = run_script(_SCRIPT, str(tmp_path / "s"), timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("the process hung (the handler waited for its own thread's creation lock)")
    assert out.returncode == 0, (out.returncode, out.stderr[-3000:])
    lines = out.stdout.splitlines()
    assert lines[-1] == "done", lines
    assert "handler ReentrantOpenError" in lines, lines
    assert "kept True" in lines, lines
