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
from collections.abc import Callable, Container
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from test_begin_interrupted import interrupted_at, one_checkpoint, read_wrong, sweep_landings

import cpstore
from cpstore.store import lmdb_registry_state
from cpstore.store.lmdb_holders import _F_OFD_SETLK
from cpstore.store.lmdb_open import FolderBusyError, lock_folder, pin_folder, unlock_folder

needs_ofd = pytest.mark.skipif(_F_OFD_SETLK is None, reason="no OFD locks: no holder mark")


#: A landing at the mark's close's start is its caller's (Env.close_quiesced: not swept).
_CLOSE = frozenset({"HolderMark.close"})


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


class _Owned:
    """The qualified names of ``owner``'s methods ("": none) and ``names``."""

    def __init__(self, owner: str, names: frozenset[str]) -> None:
        self.owner, self.names = owner, names

    def __contains__(self, name: object) -> bool:
        own = bool(self.owner) and isinstance(name, str) and name.startswith(self.owner + ".")
        return own or name in self.names


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
    return interrupted_at(
        k,
        _Owned(owner, names),
        call,
        qualified=True,
        start_counts=lambda frame: frame.f_code.co_qualname not in not_at_start,
    )


def _sweep_fds(
    names: Container[str],
    call: Callable[[], Any],
    *,
    at_least: int = 2,
    fresh: Callable[[], Callable[[], Any]] | None = None,
    reads: tuple[Path, str] | None = None,
    qualified: bool = False,
    start_counts: Callable[[FrameType], bool] | None = None,
) -> list[str]:
    """Interrupt ``call`` (or, each time, the one ``fresh()`` makes before the trace is
    set) at each landing in ``names`` (:func:`interrupted_at`, with its ``qualified`` and
    ``start_counts``); the landing that left a descriptor (or, with ``reads``, a store's
    path and checkpoint id, left an environment registered or the store unreadable), and
    fewer than ``at_least`` landings."""
    gc.collect()
    before = _fds()

    def interrupt(k: int) -> list[str]:
        run = call if fresh is None else fresh()
        return interrupted_at(k, names, run, qualified=qualified, start_counts=start_counts)

    def left_wrong() -> str | None:
        if _fds() != before:
            return f"{sorted(_fds() - before)} left open"
        if reads is None:
            return None
        if lmdb_registry_state._REGISTRY:
            return "left registered"
        return read_wrong(*reads)

    return sweep_landings(interrupt, left_wrong, at_least=at_least)


def _holder_sweep(
    path: Path,
    at_least: int,
    call: Callable[[], Any],
    fresh: Callable[[], Callable[[], Any]] | None = None,
) -> list[str]:
    """:func:`_sweep_fds` of ``call`` (or ``fresh``'s), in ``HolderMark``'s frames (its
    close's start left out), on a store at ``path`` made to hold one checkpoint."""
    return _sweep_fds(
        _Owned("HolderMark", frozenset()),
        call,
        at_least=at_least,
        fresh=fresh,
        reads=(path, one_checkpoint(path)),
        qualified=True,
        start_counts=lambda frame: frame.f_code.co_qualname not in _CLOSE,
    )


@needs_ofd
def test_an_open_interrupted_in_its_holder_mark_leaves_no_descriptor(tmp_path: Path) -> None:
    path = tmp_path / "s"
    assert _holder_sweep(path, 4, lambda: cpstore.open(path, durability="none").close()) == []


@needs_ofd
def test_a_close_interrupted_in_its_holder_marks_release_leaves_no_descriptor(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s"
    held: list[cpstore.Store] = []

    def fresh() -> Callable[[], Any]:
        held[:] = [cpstore.open(path, durability="none")]  # kept through the checks
        return held[0].close

    assert _holder_sweep(path, 1, lambda: None, fresh) == []


def test_a_pin_of_its_own_interrupted_leaves_no_descriptor(tmp_path: Path) -> None:
    path = tmp_path / "s"
    one_checkpoint(path)

    def pin() -> None:
        where, own = pin_folder(str(path), None, ())
        assert own is not None and where.startswith("/proc/self/fd/")
        unlock_folder(own)

    assert _sweep_fds({"pin_folder", "open_into"}, pin) == []


def test_a_busy_lock_try_interrupted_leaves_no_descriptor(tmp_path: Path) -> None:
    path = tmp_path / "s"
    one_checkpoint(path)
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
    one_checkpoint(path)

    def take() -> None:
        unlock_folder(lock_folder(str(path), exclusive=True))

    assert _sweep_fds({"lock_folder"}, take) == []
