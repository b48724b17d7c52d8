"""left86: descriptors an interrupt (a signal handler's exception) leaked in the opening
layer, none with a creation lock held (those are review85's).

- ``HolderMark``: its folder descriptor was opened by a bare ``os.open`` and only an
  ``OSError`` closed it, so a KeyboardInterrupt landing on the open's return, the
  ``struct.pack``, the ``fcntl`` (the mark's OFD lock taken) or the release of the fork
  guard left it open with no one to close it (the mark never reached the environment);
  its close forgot the descriptor (``FORK_CLOSED_FDS.discard``) and closed it in two
  calls, so one landing on the discard's return left it (and the mark) for good.
- ``pin_folder`` without a creation lock's descriptor opens its own: the same bare open.
- ``lock_folder`` with ``wait=False`` finding the lock busy closed the descriptor in an
  ``except OSError`` handler with a call whose start (and the busy error's making) is a
  landing: the descriptor leaked.

Swept with tests/test_begin_interrupted.py's landings (a frame's start, a C call's
return), counting ``/proc/self/fd`` before and after each.
"""

from __future__ import annotations

import fcntl
import gc
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from test_begin_interrupted import _after_calls, interrupted_at

import cpstore
from cpstore.store import lmdb_registry
from cpstore.store.lmdb_holders import _F_OFD_SETLK
from cpstore.store.lmdb_open import FolderBusyError, lock_folder, pin_folder, unlock_folder

needs_ofd = pytest.mark.skipif(_F_OFD_SETLK is None, reason="no OFD locks: no holder mark")


#: A landing at the mark's close's start is its caller's (Env.close_quiesced: not swept).
_CLOSE = frozenset({"HolderMark.close"})


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _interrupted_in(
    k: int,
    owner: str,
    call: Callable[[], Any],
    *,
    not_at_start: frozenset[str] = frozenset(),
    names: frozenset[str] = frozenset(),
) -> list[str]:
    """interrupted_at's sweep, in the frames of ``owner``'s methods (by qualified name:
    ``__init__`` and ``close`` are not names of their own; "": none) and of ``names``
    only. ``not_at_start``: those whose frame's start is no landing swept (one there is
    its caller's to undo)."""
    seen, landed = [0], []
    called_python: set[int] = set()

    def trace(frame: FrameType, event: str, arg: object) -> Callable[..., Any] | None:
        if event == "call" and frame.f_back is not None:
            called_python.add(id(frame.f_back))
        name = frame.f_code.co_qualname
        if not (owner and name.startswith(owner + ".")) and name not in names:
            return None
        frame.f_trace_opcodes = True
        at_landing = (event == "call" and name not in not_at_start) or (
            event == "opcode"
            and frame.f_lasti in _after_calls(frame.f_code)
            and id(frame) not in called_python
        )
        if at_landing:
            seen[0] += 1
            if seen[0] == k:
                landed.append(f"{name}@{frame.f_lasti}")
                raise KeyboardInterrupt(landed[0])
        if event == "opcode":
            called_python.discard(id(frame))
        return trace

    gc.disable()
    sys.settrace(trace)
    try:
        call()
    except KeyboardInterrupt:
        pass
    finally:
        sys.settrace(None)
        gc.enable()
    return landed


def _store(path: Path) -> str:
    with cpstore.open(path, durability="none") as st:
        cid: str = st.recorder("r").checkpoint(0, {"a": 1})
    gc.collect()
    return cid


def _reads(path: Path, cid: str) -> bool:
    with cpstore.open(path, durability="none") as again, again.read(cid) as cp:
        return bool(cp.state() == {"a": 1})


@needs_ofd
def test_an_open_interrupted_in_its_holder_mark_leaves_no_descriptor(tmp_path: Path) -> None:
    path = tmp_path / "s"
    cid = _store(path)
    before = _fds()
    wrong: list[str] = []
    k = 0
    while True:
        k += 1
        landed = _interrupted_in(
            k,
            "HolderMark",
            lambda: cpstore.open(path, durability="none").close(),
            not_at_start=_CLOSE,
        )
        gc.collect()
        if not landed:
            break
        if _fds() != before:
            wrong.append(f"{landed[0]}: {sorted(_fds() - before)} left open")
            break
        if lmdb_registry._REGISTRY or not _reads(path, cid):
            wrong.append(f"{landed[0]}: left registered, or the store unreadable")
            break
        gc.collect()
    assert wrong == []
    assert k > 4


@needs_ofd
def test_a_close_interrupted_in_its_holder_marks_release_leaves_no_descriptor(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s"
    cid = _store(path)
    before = _fds()
    wrong: list[str] = []
    k = 0
    while True:
        k += 1
        st = cpstore.open(path, durability="none")
        landed = _interrupted_in(k, "HolderMark", st.close, not_at_start=_CLOSE)
        gc.collect()
        if not landed:
            break
        if _fds() != before:
            wrong.append(f"{landed[0]}: {sorted(_fds() - before)} left open")
            break
        if lmdb_registry._REGISTRY or not _reads(path, cid):
            wrong.append(f"{landed[0]}: left registered, or the store unreadable")
            break
        gc.collect()
    assert wrong == []
    assert k > 1


def _sweep_fds(names: set[str], call: Callable[[], Any]) -> list[str]:
    """Interrupt ``call`` at each landing in ``names``; the landings that left a descriptor."""
    gc.collect()
    before = _fds()
    wrong: list[str] = []
    k = 0
    while True:
        k += 1
        landed = interrupted_at(k, names, call)
        gc.collect()
        if not landed:
            break
        if _fds() != before:
            wrong.append(f"{landed[0]}: {sorted(_fds() - before)} left open")
            break
    if k <= 2:
        wrong.append(f"only {k - 1} landings")
    return wrong


def test_a_pin_of_its_own_interrupted_leaves_no_descriptor(tmp_path: Path) -> None:
    path = tmp_path / "s"
    _store(path)

    def pin() -> None:
        where, own = pin_folder(str(path), None, ())
        assert own is not None and where.startswith("/proc/self/fd/")
        unlock_folder(own)

    assert _sweep_fds({"pin_folder"}, pin) == []


def test_a_busy_lock_try_interrupted_leaves_no_descriptor(tmp_path: Path) -> None:
    path = tmp_path / "s"
    _store(path)
    blocker = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(blocker, fcntl.LOCK_EX)

    def busy() -> None:
        with pytest.raises(FolderBusyError):
            lock_folder(str(path), exclusive=True, wait=False)

    try:
        assert _sweep_fds({"lock_folder", "unlock_folder", "release_folders"}, busy) == []
    finally:
        os.close(blocker)


def test_a_lock_take_interrupted_leaves_no_descriptor(tmp_path: Path) -> None:
    path = tmp_path / "s"
    _store(path)

    def take() -> None:
        unlock_folder(lock_folder(str(path), exclusive=True))

    assert _sweep_fds({"lock_folder"}, take) == []
