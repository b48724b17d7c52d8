"""review87: what an open interrupted late keeps (LMDB only: PostgreSQL has no
environment, holder mark or held data file).

- ``Env._open_files`` kept LMDB's environment in a local until it returned: an interrupt
  (a signal handler's exception) landing after LMDB's open (the close-on-exec scan, the
  held file's open, the creation lock's release in its ``finally``) closed the mark and the
  held file but not LMDB's environment, which the exception's traceback kept open. While
  the exception lived (kept by the caller, ``sys.last_value`` in a REPL, a test runner), a
  new open of the store here opened LMDB on the same files a second time, and when the old
  one was freed its close dropped this process's POSIX locks on ``lock.mdb``: another
  process's open then found no live user and reset the reader table under this process's
  reads.
- A class call's return is a landing too (CPython checks for a pending signal after any
  call through C, a class's ``__init__`` included): an interrupt landing on the return of
  ``Env(...)`` in ``_open_new`` or ``HolderMark(...)`` in ``_open_files``, or on that of
  ``os.open`` in ``TailCover.hold``, lost the new object with its descriptors (and the
  mark with its lock) for the process's life. Each is now kept as it is made (a map's
  call and the loop's store: no landing between).
"""

from __future__ import annotations

import gc
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from test_begin_interrupted import _after_calls, fds_in

import cpstore
from cpstore.store import lmdb_env, lmdb_open, lmdb_registry

_PROBE = (
    "import fcntl, os, sys\n"
    "fd = os.open(sys.argv[1], os.O_RDWR)\n"
    "try:\n"
    "    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)\n"
    "    print('free')\n"
    "except OSError:\n"
    "    print('held')\n"
)


def _liveness_lock(path: Path) -> str:
    """Whether another process finds LMDB's liveness lock (byte 0 of ``lock.mdb``) held."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, str(path / "lock.mdb")],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


_CID: list[str] = []


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "s"
    with cpstore.open(path) as st:
        _CID[:] = [st.recorder("r").checkpoint(0, {"a": 1})]
    yield path
    assert not lmdb_registry.is_open_here(str(path))


def _interrupt_release_once() -> Callable[[list[int | None]], None]:
    """lmdb_env.release_folders, with an interrupt landing once after it released."""
    real, fired = lmdb_open.release_folders, [False][:0]

    def release(held: list[int | None]) -> None:
        real(held)
        if not fired:
            fired.append(True)
            raise KeyboardInterrupt("landed after the release")

    return release


def _interrupt_close_on_exec(*args: Any) -> Any:
    raise KeyboardInterrupt("landed in the close-on-exec scan")


@pytest.mark.parametrize("at", ["close_on_exec", "release"])
def test_an_open_interrupted_after_lmdbs_open_closes_lmdb_before_it_raises(
    store: Path, monkeypatch: pytest.MonkeyPatch, at: str
) -> None:
    if at == "close_on_exec":
        monkeypatch.setattr(lmdb_env, "close_on_exec", _interrupt_close_on_exec)
    else:
        monkeypatch.setattr(lmdb_env, "release_folders", _interrupt_release_once())
    kept: BaseException | None = None
    try:
        cpstore.open(store)
    except KeyboardInterrupt as exc:
        kept = exc  # the caller keeps it (a REPL's sys.last_value does)
    assert kept is not None
    monkeypatch.undo()
    gc.collect()
    # Before: LMDB's environment (data.mdb twice, lock.mdb) open while ``kept`` lived.
    assert fds_in(store) == []
    with cpstore.open(store) as st:
        assert _liveness_lock(store) == "held"
        kept = None
        gc.collect()
        # Before: the old environment's close, freed here, dropped this process's locks
        # on lock.mdb under the open one ("free").
        assert _liveness_lock(store) == "held"
        assert st.verify().ok
        with st.read(_CID[0]) as cp:
            assert cp.state() == {"a": 1}


def _landing_after_return(caller: str, callee: str) -> tuple[Callable[..., Any], list[str]]:
    """A trace function raising KeyboardInterrupt at the first landing point (an
    instruction after a call) of the ``caller`` frame once ``callee`` (a Python frame it
    called, through C or not) returned: a class call's return, where CPython checks for a
    pending signal. Where it landed."""
    armed: list[bool] = []
    landed: list[str] = []

    def trace(frame: FrameType, event: str, arg: object) -> Callable[..., Any] | None:
        name = frame.f_code.co_qualname
        if name == callee:
            back = frame.f_back
            if event == "return" and back is not None and back.f_code.co_qualname == caller:
                armed.append(True)
            return trace
        if name != caller:
            return None
        frame.f_trace_opcodes = True
        if (
            event == "opcode"
            and armed
            and not landed
            and frame.f_lasti in _after_calls(frame.f_code)
        ):
            landed.append(f"{caller}@{frame.f_lasti}")
            raise KeyboardInterrupt(landed[0])
        return trace

    return trace, landed


@pytest.mark.parametrize(
    ("caller", "callee"),
    [
        ("_open_new", "Env.__init__"),
        ("Env._open_files", "HolderMark.__init__"),
        ("TailCover.hold", "<os.open>"),
    ],
)
def test_an_interrupt_on_a_class_calls_return_in_the_open_leaves_no_descriptor(
    store: Path, caller: str, callee: str
) -> None:
    if callee == "<os.open>":
        trace, landed = _landing_after_open_in(caller, store)
    else:
        trace, landed = _landing_after_return(caller, callee)
    gc.disable()
    sys.settrace(trace)
    try:
        cpstore.open(store).close()
    except KeyboardInterrupt:
        pass
    finally:
        sys.settrace(None)
        gc.enable()
    assert landed
    gc.collect()
    # Before: the Env (its mark's folder descriptor and the held data.mdb) or the mark, or
    # the held file, left open for the process's life.
    assert fds_in(store) == []
    assert not lmdb_registry.is_open_here(str(store))
    with cpstore.open(store) as st, st.read(_CID[0]) as cp:
        assert cp.state() == {"a": 1}
        assert st.verify().ok


def _landing_after_open_in(name: str, folder: Path) -> tuple[Callable[..., Any], list[str]]:
    """A trace function raising KeyboardInterrupt at the first instruction after a call in
    the frame ``name`` once a descriptor more is open on ``folder`` (os.open's return)."""
    landed: list[str] = []
    before: list[int] = []

    def trace(frame: FrameType, event: str, arg: object) -> Callable[..., Any] | None:
        if frame.f_code.co_qualname != name:
            return None
        frame.f_trace_opcodes = True
        if event == "call":
            before[:] = [len(fds_in(folder))]
        elif (
            event == "opcode"
            and not landed
            and frame.f_lasti in _after_calls(frame.f_code)
            and len(fds_in(folder)) > before[0]
        ):
            landed.append(f"{name}@{frame.f_lasti}")
            raise KeyboardInterrupt(landed[0])
        return trace

    return trace, landed
