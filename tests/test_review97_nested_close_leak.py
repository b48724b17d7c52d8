"""review97: a signal handler's (or finaliser's) close of a store's last handle inside its
thread's open of another store (registry96's ``_drop_nested``) left that store's LMDB
environment open with no handle until the process opened the same path again, or exited:
its descriptors, reader slot and locks stayed, so another process's compact of the store
was refused ("another process has the store open") for as long as this one lived, though
every handle of it was closed. Now a helper thread closes it once the registry lock is free
(unless the interrupted open is sharing it).

Each case runs in a child process with a time limit; the handler runs where a signal lands
(a trace function raising it at the start of ``_open_new``, under the registry lock)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from script_run import run_script

_SCRIPT = r"""
import gc, signal, subprocess, sys, threading
import cpstore
from cpstore.store import lmdb_registry

a, b, durability, how = sys.argv[1:5]
for p in (a, b):
    with cpstore.open(p) as st:
        st.recorder("r").checkpoint(0, {"n": 0})

other = cpstore.open(b, durability=durability)
kept = other.recorder("r").checkpoint(1, {"n": 1})


def land(action):
    def trace(frame, event, arg):
        code = frame.f_code
        if event == "call" and code.co_name == "_open_new" and code.co_filename.endswith(
            "lmdb_registry.py"
        ):
            sys.settrace(None)
            action()
        return None

    gc.disable()
    sys.settrace(trace)


if how == "signal":
    signal.signal(signal.SIGUSR1, lambda signum, frame: other.close())
    land(lambda: signal.raise_signal(signal.SIGUSR1))
else:  # a finaliser's close, run by a collection inside the open
    class Owner:
        def __init__(self, store):
            self.store, self.me = store, self  # a cycle: only a collection frees it

        def __del__(self):
            self.store.close()

    Owner(other)
    other = None
    land(gc.collect)
st = cpstore.open(a)
sys.settrace(None)
gc.enable()
for t in threading.enumerate():
    if t is not threading.current_thread():
        t.join(60)
print("left open", len(lmdb_registry._LEFT_OPEN))
# Another process's compact of b, this process still alive, a still open.
q = subprocess.run(
    [sys.executable, "-c",
     "import sys, cpstore\n"
     "from cpstore.store.maintenance import compact_store\n"
     "try:\n    compact_store(sys.argv[1]); print('compacted')\n"
     "except cpstore.StoreError as e: print('refused')",
     b],
    capture_output=True, text=True, timeout=60,
)
print("compact", q.stdout.strip() or q.stderr[-500:])
st.recorder("r").checkpoint(1, {"n": 1})  # the interrupted open's handle works
st.close()
with cpstore.open(b) as again:
    print("b kept", again.ref("r") == kept and again.verify().ok)
print("done")
"""


@pytest.mark.parametrize("durability", ["sync", "none"])
@pytest.mark.parametrize("how", ["signal", "finaliser"])
def test_nested_close_of_a_last_handle_closes_the_env(
    tmp_path: Path, durability: str, how: str
) -> None:
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    try:
        done = run_script(_SCRIPT, a, b, durability, how, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("hung")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[:4] == [
        "left open 0",
        "compact compacted",
        "b kept True",
        "done",
    ], (done.stdout, done.stderr[-2000:])
