"""left86: a second interrupt (a signal handler's exception) landing in the undoing of a
first, in the opening layer's own frames.

Every sweep before this one stops at the first interrupt: tests/test_begin_interrupted.py's
landings leave out those inside an ``except`` or a ``finally`` run for an exception. Here
the first interrupt lands at each of those landings in turn (a trace function, which
Python unsets once it raised), and a second one at each later landing of the same frames
in turn, handlers included (a profile function: a frame's start, or a C function's
return, ``c_return``, whose result is then lost as an interrupt there loses it). A
frame's start counts when its caller is one of the frames too: the undoing of
``lmdb_env`` (``Env._open_files``' release, ``Env.__init__``'s close of its mark) is not
this layer's, nor is a first one at the start of the mark's close (Env.close_quiesced
calls it once) or of ``release_env`` (the backend's close). After each pair
``is_open_here`` says no (closing an environment noted as left open), the folder's
creation lock is free, no descriptor is left and nothing is registered.

Before: a second interrupt landing at the start of the undoing call (``release_folders``
in ``lock_folder``'s handlers, ``_close`` in ``HolderMark.__init__``'s) leaked the
descriptor; each undoing now loops until its list is empty, catching what lands in it.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from test_begin_interrupted import (
    LockBlocker,
    _interrupting,
    folder_lock_free,
    one_checkpoint,
    run_traced,
    sweep_in_child,
)

import cpstore
from cpstore.store import lmdb_registry, lmdb_registry_state

#: This layer's frames (by qualified name).
_MINE = frozenset(
    {
        "acquire_env",
        "_acquire",
        "_open_new",
        "lock_folder",
        "unlock_folder",
        "release_folders",
        "pin_folder",
        "open_into",
        "HolderMark.__init__",
        "HolderMark.close",
        "HolderMark._drop",
        "release_env",
        "_unregister",
    }
)
#: Frames whose start, called from outside the layer, is their caller's landing: the
#: backend's close calls ``release_env`` once, ``Env.close_quiesced`` the mark's close.
_CALLERS_OWN = frozenset({"HolderMark.close", "release_env"})


def _starts_counted(frame: FrameType) -> bool:
    """Whether a frame's start is a landing: not that of one of ``_CALLERS_OWN`` called
    from outside the layer."""
    name, back = frame.f_code.co_qualname, frame.f_back
    return name not in _CALLERS_OWN or (back is not None and back.f_code.co_qualname in _MINE)


def _twice(k: int, m: int, call: Callable[[], Any]) -> list[str]:
    """Run ``call`` with a KeyboardInterrupt at its k-th first landing and another at the
    m-th landing after it (module docstring); where they landed."""
    mine = _MINE  # read at each call: tests/test_env_twice_interrupted.py widens it
    trace, landed = _interrupting(k, mine, qualified=True, start_counts=_starts_counted)
    after = [0]

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if len(landed) != 1 or event not in ("call", "c_return"):
            return
        if frame.f_code.co_qualname not in mine:
            return
        if event == "call" and (
            frame.f_back is None or frame.f_back.f_code.co_qualname not in mine
        ):
            return
        after[0] += 1
        if after[0] == m:
            landed.append(f"{frame.f_code.co_qualname}@{frame.f_lasti}:{event}")
            raise KeyboardInterrupt(landed[1])

    run_traced(trace, call, profile)
    return landed


def twice_sweep(path: Path, contended: bool) -> list[str]:
    """Every pair of landings of an open and close; the first that left something wrong.
    ``contended``: the creation lock is held when the open starts, let go as it waits."""
    one_checkpoint(path)
    before = set(os.listdir("/proc/self/fd"))
    pairs = 0
    with LockBlocker(path) as blocker:
        k = 0
        while True:
            k += 1
            m = 0
            while True:
                m += 1
                if contended:
                    blocker.hold()
                landed = _twice(k, m, lambda: cpstore.open(path, durability="none").close())
                blocker.let_go()
                gc.collect()
                if not landed:
                    return [] if pairs > 20 else [f"only {pairs} pairs"]
                pairs += len(landed) == 2
                if lmdb_registry.is_open_here(str(path)):  # closes what a close left open
                    return [f"{landed}: still open here, no handle"]
                if not folder_lock_free(path):
                    return [f"{landed}: the folder's creation lock held"]
                if set(os.listdir("/proc/self/fd")) != before:
                    return [f"{landed}: {sorted(set(os.listdir('/proc/self/fd')) - before)} open"]
                if lmdb_registry_state._REGISTRY or lmdb_registry_state._BY_FILE:
                    return [f"{landed}: left registered"]
                if len(landed) == 1:
                    break  # no landing after the first: the next first landing


def _in_child(contended: bool, path: Path) -> list[str]:
    return sweep_in_child(
        "test_left86_twice_interrupted", "twice_sweep", path, contended, timeout=300
    )


def test_a_second_interrupt_in_an_opens_undoing_leaves_nothing(tmp_path: Path) -> None:
    assert _in_child(False, tmp_path / "s") == []


def test_a_second_interrupt_in_a_waiting_opens_undoing_leaves_nothing(tmp_path: Path) -> None:
    assert _in_child(True, tmp_path / "s") == []
