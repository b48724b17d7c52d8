"""A look at the registry while another thread's own close of a store is under way waits
for that close's outcome, never answering from its middle (registry102).

registry100 made a look (``is_open_here``, compact and its reservation, an open) wait for
the registry's own close of an environment a nested close left open. A user's close on
another thread was not waited for: from its last handle's drop to its end (its wait for
other threads' txns, the env's write lock held) a look saw the environment registered
with no handle and its write lock busy, so ``is_open_here`` said True, compact and its
reservation were refused "close the store in this process", a read-only open was refused
"another mode", and a same-mode open was handed the env under that close's wait (its own
close then waited for the write lock the first close held, and gave up "left open").

Each case runs in a child with a time limit (a hang is the failure). The closing thread
is driven to a point of its close by a trace function (held there, or waiting for a read
another thread holds) and let go only when the look's thread waits in the registry for
that close (a ``wait`` called from cpstore/store/), so the window is met every run, by
events; before the fix the look never waits and answers from the middle of the close.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from registry_looks import LOOK
from script_run import run_script

import cpstore
from cpstore.store import lmdb_registry, lmdb_registry_state

#: argv: look, point, store path. Prints "look <answer>", "close <outcome>", facts, "done".
_SCRIPT = (
    r"""
import sys, threading
import cpstore
from cpstore.errors import StoreError
from cpstore.store import lmdb_registry, lmdb_registry_state
from cpstore.store.maintenance import compact_store

look, point, path = sys.argv[1:4]
with cpstore.open(path) as st:
    head = st.recorder("r").checkpoint(0, {"n": 0})

at_point, go, reading = threading.Event(), threading.Event(), threading.Event()


def in_close_thread(frame, event, arg):
    code = frame.f_code
    if point == "dropped" and code.co_name == "quiesced":  # its handle dropped, no lock held
        sys.settrace(None)
        at_point.set()
        go.wait()
        return None
    if point == "write lock" and code.co_name == "take_write_lock" and (
        frame.f_back.f_code.co_name == "quiesced"
    ):
        def at_return(frame, event, arg):  # the env's write lock held: the close's wait
            if event == "return":
                sys.settrace(None)
                at_point.set()
                go.wait()
            return at_return
        return at_return
    if point in ("reads", "look in read") and code.co_name == "_reads_left":
        sys.settrace(None)  # inside its wait for the other thread's read (not held here)
        at_point.set()
    return None


outcome = []


"""
    + LOOK
    + r"""
st = cpstore.open(path)


def read():  # another thread's read of the store: the close waits for it
    with st.read(head):
        reading.set()
        if point == "look in read":
            at_point.wait(60)  # the close waits for this read
            run_look()  # inside its own read: never waits for the close waiting for it
        else:
            go.wait(60)


def close():
    sys.settrace(in_close_thread)
    try:
        st.close()
        outcome.append("closed")
    except StoreError as exc:
        outcome.append(f"{type(exc).__name__}: {exc.what}")
    finally:
        sys.settrace(None)


reader = None
if point in ("reads", "look in read"):
    reader = threading.Thread(target=read)
    reader.start()
    reading.wait(60)
closer = threading.Thread(target=close)
closer.start()
at_point.wait(60)  # the close is under way, at ``point``
if point == "look in read":
    reader.join(60)
else:
    looker = threading.Thread(target=run_look)
    looker.start()
    looker.join(60)
    go.set()
closer.join(60)
if reader is not None:
    reader.join(60)
print("look", *answer)
print("close", *outcome)
print("waited", *waited)
print("pending", len(lmdb_registry_state._CLOSING_LEFT))
print("open here", lmdb_registry.is_open_here(path), "registered", sorted(lmdb_registry._REGISTRY))
with cpstore.open(path) as st:
    print("head kept", st.ref("r") == head and st.verify().ok)
print("done")
"""
)


def _run(look: str, point: str, tmp_path: Path) -> list[str]:
    """The child's lines past its common checks; fails when it hung or crashed."""
    try:
        out = run_script(_SCRIPT, look, point, str(tmp_path / "s"), timeout=90)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{look} at {point}: the process hung")
    assert out.returncode == 0, (out.returncode, out.stderr[-3000:])
    lines = out.stdout.splitlines()
    assert lines[-1] == "done", lines
    assert "pending 0" in lines, lines
    assert "open here False registered []" in lines, lines
    assert "head kept True" in lines, lines
    return lines


def _look(look: str, point: str, tmp_path: Path) -> str:
    """The look's answer; the close under way closed the store."""
    lines = _run(look, point, tmp_path)
    assert "close closed" in lines, lines
    return next(line for line in lines if line.startswith("look"))


#: The close's points: its handle dropped (before its wait), its wait with the env's write
#: lock held, its wait for another thread's read.
_POINTS = ["dropped", "write lock", "reads"]


@pytest.mark.parametrize("point", _POINTS)
def test_is_open_here_is_false_while_another_thread_closes_the_store(
    point: str, tmp_path: Path
) -> None:
    """Its last handle closed: not open here (True before, from the close's wait)."""
    assert _look("is_open_here", point, tmp_path) == "look False"


@pytest.mark.parametrize("point", _POINTS)
def test_compact_runs_while_another_thread_closes_the_store(point: str, tmp_path: Path) -> None:
    """compact_store waits for that close, then compacts (refused "close the store" before)."""
    assert _look("compact", point, tmp_path) == "look compacted"


@pytest.mark.parametrize("point", _POINTS)
def test_compacts_reservation_is_made_while_another_thread_closes_the_store(
    point: str, tmp_path: Path
) -> None:
    """lmdb_copy's reservation (compact_in_place's first step) waits for the close too."""
    assert _look("reserve", point, tmp_path) == "look reserved"


@pytest.mark.parametrize("point", _POINTS)
def test_an_open_with_another_mode_opens_while_another_thread_closes_the_store(
    point: str, tmp_path: Path
) -> None:
    """A read-only open is not refused "already open with another mode" by no handle."""
    assert _look("open readonly", point, tmp_path) == "look opened True"


@pytest.mark.parametrize("point", _POINTS)
def test_an_open_with_the_same_mode_opens_while_another_thread_closes_the_store(
    point: str, tmp_path: Path
) -> None:
    """The same mode: opened anew once the close ended (before, at the write-lock point,
    it was handed the closing env, and its own close gave up "left open")."""
    assert _look("open", point, tmp_path) == "look opened True"


def test_a_look_inside_a_read_the_close_waits_for_does_not_wait_for_that_close(
    tmp_path: Path,
) -> None:
    """The look's own thread holds the read the close waits for: it answers at once (open
    here: its read keeps the env), never waiting for a close that waits for it."""
    lines = _run("is_open_here", "look in read", tmp_path)
    assert "look True" in lines, lines
    assert "waited" in lines, lines  # no wait called in the registry
    assert "close closed" in lines, lines  # the read ended, the close went on


def test_a_look_on_the_closing_thread_itself_never_waits_for_its_own_close(
    tmp_path: Path,
) -> None:
    """A signal handler's (or finaliser's) look on the closing thread, inside its close's
    wait (the env's write lock held): answered at once from the registry (registered:
    open here), never a wait for the close it interrupts (it would wait out its bound,
    then answer the same)."""

    path = str(tmp_path / "s")
    st = cpstore.open(path)
    answers: list[bool] = []
    waited: list[str] = []

    def look_here(frame: FrameType, event: str, arg: object) -> Any:
        if (
            frame.f_code.co_name == "take_write_lock"
            and frame.f_back is not None
            and (frame.f_back.f_code.co_name == "quiesced")
        ):

            def at_return(frame: FrameType, event: str, arg: object) -> Any:
                if event == "return" and not answers:
                    sys.settrace(watch_waits)  # as a handler run where the close is
                    answers.append(lmdb_registry.is_open_here(path))
                    sys.settrace(None)
                return at_return

            return at_return
        return None

    def watch_waits(frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_code.co_qualname == "LeftOpenClose.wait":
            waited.append(frame.f_code.co_qualname)

    assert threading.current_thread() is threading.main_thread()
    sys.settrace(look_here)
    try:
        st.close()
    finally:
        sys.settrace(None)
    assert answers == [True]  # still registered in the close's middle: open here
    assert waited == []
    assert not lmdb_registry_state._CLOSING_LEFT
    assert not lmdb_registry.is_open_here(path)
