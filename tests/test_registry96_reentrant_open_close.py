"""A signal handler or a finaliser that opens or closes a store while its own thread is
inside an open or close (holding the process's registry lock) never waits for itself.

Before registry96 the registry lock was a plain ``threading.Lock``: such a handler's open or
close waited for the lock its own thread held, and the process hung for good. Now an open
(or compact, ``is_open_here``) there is refused at once with ``ReentrantOpenError``, and a
close drops its handle at once (the last one's environment synced and left open, closed by
the next open of the store or at exit, as a close that gave up leaves it): the registry
never hands out a closed environment, never opens one file twice, never loses a count.

Each case runs in a child process with a time limit (a hang is the failure). The handler
is run where a signal lands: a trace function raises the signal at the start of a chosen
registry function (``signal.raise_signal`` runs the Python handler before it returns), or,
for a finaliser, runs a collection there (what an allocation's collection would do)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from script_run import run_script

#: argv: case, store a, store b. Prints one line per fact, "done" last.
_SCRIPT = r"""
import gc, signal, sys
import cpstore
from cpstore.errors import StoreError
from cpstore.store import lmdb_registry

case, a, b = sys.argv[1:4]
seen = []


def land(name, action):
    # ``action`` runs at the first start of registry function ``name`` (its own thread).
    def trace(frame, event, arg):
        code = frame.f_code
        if event == "call" and code.co_name == name and code.co_filename.endswith(
            ("lmdb_registry.py", "lmdb_env.py")
        ):
            sys.settrace(None)
            action()
        return None

    gc.disable()
    sys.settrace(trace)


def by_signal(work):
    def handler(signum, frame):
        try:
            work()
            seen.append("handler ok")
        except StoreError as exc:
            seen.append(f"handler {type(exc).__name__} {exc.where is not None}")

    signal.signal(signal.SIGUSR1, handler)
    return lambda: signal.raise_signal(signal.SIGUSR1)


def checkpoint(path, step):
    with cpstore.open(path) as st:
        return st.recorder("r").checkpoint(step, {"n": step})


def verified(path, cid):
    with cpstore.open(path) as st:
        return st.ref("r") == cid and st.verify().ok


ca, cb = checkpoint(a, 0), checkpoint(b, 0)
if case == "open_opens":  # a handler's open inside an open (the new env half-made)
    land("_open_new", by_signal(lambda: cpstore.open(a).close()))
    st = cpstore.open(a)
elif case == "open_closes":  # a handler's close of another store's last handle
    other = cpstore.open(b)
    land("_open_new", by_signal(other.close))
    st = cpstore.open(a)
    # The left-open env is closed by the registry's thread once the open's lock is free
    # (review97); a look racing that close waits for its outcome (registry100: ci112 saw
    # it still open, ~1 run in 10, while the test waited for the thread first).
    print("b open here", lmdb_registry.is_open_here(b))
elif case == "open_shares_closes":  # a handler's close of the env the open is sharing
    other = cpstore.open(a)
    land("_acquire", by_signal(other.close))
    st = cpstore.open(a)
    print("shared env open", not st._backend.env.closed, st._backend.env.handles)
elif case == "close_closes":  # a handler's close of another store inside a last close
    st, other = cpstore.open(a), cpstore.open(b)
    land("close_quiesced", by_signal(other.close))
    st.close()
elif case == "close_opens":  # a handler's open of another store inside a last close
    st = cpstore.open(a)
    land("close_quiesced", by_signal(lambda: cpstore.open(b).close()))
    st.close()
elif case == "shared_last_close":  # a handler's open of the env being closed
    first, st = cpstore.open(a), cpstore.open(a)
    first.close()
    land("close_quiesced", by_signal(lambda: seen.append(cpstore.open(a))))
    st.close()
elif case == "gc_open":  # a finaliser's close, collected inside an open
    class Owner:
        def __init__(self, store):
            self.store, self.me = store, self  # a cycle: only a collection frees it

        def __del__(self):
            try:
                self.store.close()
                seen.append("finaliser ok")
            except StoreError as exc:
                seen.append(f"finaliser {type(exc).__name__}")

    Owner(cpstore.open(b))
    land("_open_new", gc.collect)
    st = cpstore.open(a)
else:
    raise SystemExit(f"no case {case}")
sys.settrace(None)
gc.enable()
print(*seen, sep="\n")
if case in ("open_opens", "open_closes", "open_shares_closes", "gc_open"):
    st.recorder("r").checkpoint(1, {"n": 1})  # the interrupted open's handle works
    st.close()
print("a open here", lmdb_registry.is_open_here(a), "b open here", lmdb_registry.is_open_here(b))
print("registered", sorted(lmdb_registry._REGISTRY))
for path, cid in ((a, ca), (b, cb)):
    with cpstore.open(path) as st:
        print("head kept", st.ref("r") is not None and st.verify().ok)
print("done")
"""


def _run(case: str, tmp_path: Path) -> list[str]:
    """The child's output lines; fails when it hung (killed at the limit) or crashed."""
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    try:
        out = run_script(_SCRIPT, case, a, b, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{case}: the process hung (a handler waited for its own thread's lock)")
    assert out.returncode == 0, (out.returncode, out.stderr[-3000:])
    lines = out.stdout.splitlines()
    assert lines[-1] == "done", lines
    assert "a open here False b open here False" in lines, lines
    assert "registered []" in lines, lines
    assert lines.count("head kept True") == 2, lines
    return lines


def test_a_handlers_open_inside_an_open_is_refused_at_once(tmp_path: Path) -> None:
    """The handler's open of the very store being opened is ReentrantOpenError (with where)."""
    lines = _run("open_opens", tmp_path)
    assert "handler ReentrantOpenError True" in lines, lines


def test_a_handlers_close_inside_an_open_drops_its_handle(tmp_path: Path) -> None:
    """The handler's close of another store's last handle returns; that store is closed
    (by the registry's thread once the open's lock is free: review97) and opens again."""
    lines = _run("open_closes", tmp_path)
    assert "handler ok" in lines, lines
    assert "b open here False" in lines, lines


def test_a_handlers_close_of_the_env_an_open_shares_leaves_it_open_for_that_open(
    tmp_path: Path,
) -> None:
    """The handler drops the last other handle of the environment the interrupted open is
    about to share: the open gets it open, with its own handle counted (never a closed one,
    never a count lost: its close then closes it)."""
    lines = _run("open_shares_closes", tmp_path)
    assert "handler ok" in lines, lines
    assert "shared env open True 1" in lines, lines


def test_a_handlers_close_inside_a_close_drops_its_handle(tmp_path: Path) -> None:
    """The handler's close of another store's last handle inside a last close returns."""
    lines = _run("close_closes", tmp_path)
    assert "handler ok" in lines, lines


def test_a_handlers_open_inside_a_close_is_refused_at_once(tmp_path: Path) -> None:
    """The handler's open of another store inside a last close is refused, the close ends."""
    lines = _run("close_opens", tmp_path)
    assert "handler ReentrantOpenError True" in lines, lines


def test_a_handlers_open_inside_the_last_close_of_a_shared_env_gets_no_closed_env(
    tmp_path: Path,
) -> None:
    """The handler's open of the environment its thread is closing is refused: never handed
    the closed environment, never a second environment of the file."""
    lines = _run("shared_last_close", tmp_path)
    assert "handler ReentrantOpenError True" in lines, lines


def test_a_finalisers_close_collected_inside_an_open_completes(tmp_path: Path) -> None:
    """A store closed by a ``__del__`` collected inside an open: the close returns."""
    lines = _run("gc_open", tmp_path)
    assert "finaliser ok" in lines, lines
