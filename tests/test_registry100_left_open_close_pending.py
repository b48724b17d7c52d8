"""A look at the registry while its own thread closes an environment a nested close left
open (review97) answers from that close's outcome, never from its middle.

A close made inside its thread's own open or close (a signal handler's or finaliser's:
registry96) drops the last handle at once and leaves the environment open; a thread of the
registry closes it once the registry lock is free. No user handle is left, so a look at
the store then (``is_open_here``, compact, an open with another mode) must not be told
"open in this process" by that close's own handle or its wait for other threads' txns.
Before registry100 it was (session 41: ``is_open_here`` True, compact refused, a read-only
open refused "another mode"); now the look waits for the close under way (bounded by the
close's own wait) and answers from what it left: closed.

Each case runs in a child with a time limit (a hang is the failure). The close's thread
is held at a chosen point by a trace function until the look's thread waits in the
registry for that close (its ``Event.wait``), so the window is met every run, by events;
before the fix the look never waits and answers from the middle of the close.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from registry_looks import LOOK
from script_run import run_script

#: argv: look, held point, store path. Prints "look <answer>", facts, "done" last.
_SCRIPT = (
    r"""
import sys, threading
import cpstore
from cpstore.errors import StoreError
from cpstore.store import lmdb_copy, lmdb_registry
from cpstore.store.maintenance import compact_store

look, held_at, path = sys.argv[1:4]
with cpstore.open(path) as st:
    head = st.recorder("r").checkpoint(0, {"n": 0})

held, go = threading.Event(), threading.Event()


def hold():
    held.set()
    go.wait()


def in_close_thread(frame, event, arg):
    # Set for every new thread: only the registry's close thread runs release_env.
    code = frame.f_code
    if code.co_name == "release_env" and frame.f_locals.get("taken") is not None:
        if held_at == "own handle":  # its handle taken, the registry lock let go
            sys.settrace(None)
            hold()
        return None
    if (
        held_at == "close wait"
        and code.co_name == "take_write_lock"
        and frame.f_back.f_code.co_name == "quiesced"
    ):
        def at_return(frame, event, arg):  # the env's write lock held: the close's wait
            if event == "return":
                sys.settrace(None)
                hold()
            return at_return
        return at_return
    return None


"""
    + LOOK
    + r"""
st = cpstore.open(path)
threading.settrace(in_close_thread)
with lmdb_registry._REGISTRY_LOCK:  # as a handler's close inside this thread's open
    st.close()  # the last handle: dropped at once, the env left open for the registry's thread
threading.settrace(None)
closers = [t for t in threading.enumerate() if t is not threading.main_thread()]
print("close threads", len(closers))
held.wait()  # the registry's close is under way, held at ``held_at``
looker = threading.Thread(target=run_look)
looker.start()
looker.join()
go.set()
for t in closers:
    t.join()
print("look", *answer)
print("open here", lmdb_registry.is_open_here(path), "registered", sorted(lmdb_registry._REGISTRY))
with cpstore.open(path) as st:
    print("head kept", st.ref("r") == head and st.verify().ok)
print("done")
"""
)


def _look(look: str, held_at: str, tmp_path: Path) -> str:
    """The look's answer in the child; fails when it hung or crashed."""
    try:
        out = run_script(_SCRIPT, look, held_at, str(tmp_path / "s"), timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{look} at {held_at}: the process hung")
    assert out.returncode == 0, (out.returncode, out.stderr[-3000:])
    lines = out.stdout.splitlines()
    assert lines[-1] == "done", lines
    assert "close threads 1" in lines, lines
    assert "open here False registered []" in lines, lines
    assert "head kept True" in lines, lines
    return next(line for line in lines if line.startswith("look"))


_HELD = ["own handle", "close wait"]


@pytest.mark.parametrize("held_at", _HELD)
def test_is_open_here_is_false_while_the_registry_closes_a_left_open_env(
    held_at: str, tmp_path: Path
) -> None:
    """No handle is left: not open here (True before, from the close's own handle or wait)."""
    assert _look("is_open_here", held_at, tmp_path) == "look False"


@pytest.mark.parametrize("held_at", _HELD)
def test_compact_runs_while_the_registry_closes_a_left_open_env(
    held_at: str, tmp_path: Path
) -> None:
    """compact_store waits for that close, then compacts (refused "close the store" before)."""
    assert _look("compact", held_at, tmp_path) == "look compacted"


@pytest.mark.parametrize("held_at", _HELD)
def test_compacts_reservation_is_made_while_the_registry_closes_a_left_open_env(
    held_at: str, tmp_path: Path
) -> None:
    """lmdb_copy's reservation (compact_in_place's first step) itself waits for the close."""
    assert _look("reserve", held_at, tmp_path) == "look reserved"


@pytest.mark.parametrize("held_at", _HELD)
def test_an_open_with_another_mode_opens_while_the_registry_closes_a_left_open_env(
    held_at: str, tmp_path: Path
) -> None:
    """A read-only open is not refused "already open with another mode" by no handle."""
    assert _look("open readonly", held_at, tmp_path) == "look opened True"


@pytest.mark.parametrize("held_at", _HELD)
def test_an_open_with_the_same_mode_opens_while_the_registry_closes_a_left_open_env(
    held_at: str, tmp_path: Path
) -> None:
    """The same mode: opened (shared before, as the close gave way to it; opened anew now)."""
    assert _look("open", held_at, tmp_path) == "look opened True"
