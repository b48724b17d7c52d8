"""audit47: a close's drain (BatchOwners.drain) when its own flush raises.

Since audit44 a close waits for every other thread's batch commit under way and commits
what such a flush, interrupted, puts back on the queue. It did so only when its own flush
returned: a close whose flush raised (its own batch's store error, or the error a thread
gets for its checkpoints another thread's failed commit dropped) returned at once and
closed the handle, and a flush of the main thread interrupted meanwhile requeued its batch
into the closed handle. The exit flush skips closed handles: every checkpoint of the
batch was lost without a word, as audit44 found for a close whose flush returned.
"""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
from flush_threads import close_in_the_next_apply
from pg_cluster import backend_url, pg_cluster, pg_url  # noqa: F401 - fixtures
from script_run import run_script

import cpstore
from cpstore.errors import StoreError
from cpstore.store.batch_owners import BatchOwners
from cpstore.store.model import CheckpointWrite


class _SeenWait:
    """``BatchOwners._cond`` whose waits on the closer's thread are signalled (the drain
    waiting for a flight); every other call goes to the real condition."""

    def __init__(self, real: threading.Condition, seen: threading.Event) -> None:
        self._real, self._seen = real, seen

    def wait(self, timeout: float | None = None) -> bool:
        if threading.current_thread().name == "closer":
            self._seen.set()
        return self._real.wait(timeout)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def test_a_close_whose_flush_raises_still_keeps_what_an_interrupted_flush_requeues(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Thread C closes while the main thread's flush applies its batch of 5; C's flush raises
    (the error its thread is owed for checkpoints another thread's commit dropped); then
    the main flush is interrupted and requeues its batch. Before: C's close raised and
    closed the handle at once, the 5 checkpoints queued in it, lost (the exit flush skips
    closed handles). Now C's close waits for the flight, raises its error, and the handle
    stays open with the batch queued: the next close commits it."""
    st = cpstore.open(url, durability="batched", batch_size=10_000)
    backend: Any = st.backend
    rec = st.recorder("r")
    ids = [rec.checkpoint(i, {"i": i}) for i in range(5)]
    decided = threading.Event()  # C's close returned or its drain waits for the flight
    owners: BatchOwners[CheckpointWrite] = backend._owners
    owners._cond = _SeenWait(owners._cond, decided)  # type: ignore[assignment]
    real_wait = BatchOwners.wait_mine

    def wait_mine(self: BatchOwners[CheckpointWrite], *behind: tuple[int, ...]) -> bool:
        again = real_wait(self, *behind)
        if threading.current_thread().name == "closer":
            raise StoreError("dropped by another thread's commit (injected)", where="test")
        return again

    monkeypatch.setattr(BatchOwners, "wait_mine", wait_mine)
    closer, told = close_in_the_next_apply(monkeypatch, st, decided, closed=decided)
    with pytest.raises(KeyboardInterrupt):
        st.flush()
    closer.join(60)
    assert not closer.is_alive()
    assert len(told) == 1 and isinstance(told[0], StoreError), told
    assert not backend.closed, "closed with the requeued batch queued in it"  # before: closed
    assert st.pending == 5
    monkeypatch.undo()
    st.close()
    with cpstore.open(url, readonly=True, create=False) as ro:
        assert [m.id for m in ro.history("r")] == ids[::-1]  # before: none stored


#: Thread R holds a read view; thread D's flush grows the map (the growth waits for R's
#: read); thread C closes (its drain waits for D's commit); then R closes inside its view
#: (it waits for C's close). Before: the three waited on each other for ever.
_CLOSE_IN_READ_WHILE_ANOTHER_CLOSES = """
import os, sys, threading, time
import cpstore
st = cpstore.open(sys.argv[1], durability="batched", batch_size=10_000, map_size=64 * 1024)
base = st.recorder("base").checkpoint(0, {"x": 0})
st.flush()
env, rd = st.backend.env, st.recorder("d")
ready, go, got = threading.Event(), threading.Event(), {}
last = [rd.checkpoint(k, {"pad": os.urandom(1500).hex()}) for k in range(40)]
def close(name):
    try:
        st.close()
        got[name] = "returned"
    except cpstore.CpstoreError as exc:
        got[name] = type(exc).__name__
def r():
    with st.read(base):
        ready.set()
        go.wait()
        close("r")
tr = threading.Thread(target=r, daemon=True)
tr.start()
assert ready.wait(120)
td = threading.Thread(target=st.flush, daemon=True)
td.start()
t0 = time.monotonic()
while not env._resizing and time.monotonic() - t0 < 120:
    time.sleep(0.005)
grew = env._resizing
tc = threading.Thread(target=close, args=("c",), daemon=True)
tc.start()
while st.backend._closer is None and time.monotonic() - t0 < 120:
    time.sleep(0.005)
go.set()
for t in (tr, tc, td):
    t.join(60)
if any(t.is_alive() for t in (tr, tc, td)):
    print("HANG", flush=True)
    os._exit(3)
with cpstore.open(sys.argv[1], readonly=True, create=False) as ro:
    print(got.get("r"), got.get("c"), grew, ro.ref("d") == last[-1], flush=True)
"""


def test_a_close_inside_a_read_view_never_waits_on_a_close_waiting_on_it(tmp_path: Path) -> None:
    """R's close inside its read view raises OutcomeUnknownError instead of waiting for C's
    close (which waits for D's growing commit, which waits for R's read); D's commit then
    lands and C's close returns. Before: a hang (before audit44, C's close gave up on D
    after 5 s and closed the environment under D's commit, which failed StoreClosedError)."""
    done = run_script(_CLOSE_IN_READ_WHILE_ANOTHER_CLOSES, str(tmp_path / "s"), timeout=600)
    assert done.returncode == 0, f"deadlocked or failed: {done.stdout} {done.stderr[-2000:]}"
    assert done.stdout.split() == ["OutcomeUnknownError", "returned", "True", "True"]


#: A daemon thread's flush of its own checkpoints grows the map and waits for a daemon's
#: read that never ends; the main thread ends, and an atexit close (run before cpstore's
#: exit flush) waits for that commit.
_ATEXIT_CLOSE_WHILE_A_COMMIT_NEVER_ENDS = """
import atexit, os, sys, threading, time
import cpstore
st = cpstore.open(sys.argv[1], durability="batched", batch_size=10_000, map_size=64 * 1024)
base = st.recorder("base").checkpoint(0, {"x": 0})
st.flush()
env, rd = st.backend.env, st.recorder("d")
ready = threading.Event()
def r():
    with st.read(base):
        ready.set()
        threading.Event().wait()
def d():
    for k in range(40):
        rd.checkpoint(k, {"pad": os.urandom(1500).hex()})
    st.flush()
threading.Thread(target=r, daemon=True).start()
assert ready.wait(120)
threading.Thread(target=d, daemon=True).start()
t0 = time.monotonic()
while not env._resizing and time.monotonic() - t0 < 120:
    time.sleep(0.005)
print("growing", env._resizing, flush=True)
def close():
    try:
        st.close()
        print("returned", flush=True)
    except cpstore.CpstoreError as exc:
        print(type(exc).__name__, flush=True)
atexit.register(close)
"""


def test_an_atexit_close_never_keeps_the_process_from_exiting(tmp_path: Path) -> None:
    """The atexit close gives up on the daemon's commit (OutcomeUnknownError: it may or may
    not be stored) and the process exits. Before: the close's drain waited for ever (no
    bound until the exit flush sets one, and it runs after), and the process never exited;
    before audit44 the close gave up after 5 s."""
    try:
        done = run_script(_ATEXIT_CLOSE_WHILE_A_COMMIT_NEVER_ENDS, str(tmp_path / "s"), timeout=120)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the process never exited: {exc.stdout!r}")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["growing", "True", "OutcomeUnknownError"]
