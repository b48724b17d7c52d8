"""left86: an interrupt (a signal handler's exception) landing in ``acquire_env`` after the
environment's handle was taken left the environment registered with a handle nobody held.

``_acquire`` counted the handle under the registry lock and returned; the lock's release
(the ``with`` block's end, a C call) and, for an open that had waited for a busy folder's
creation lock, acquire_env's release of that lock on its way out are landings after the
count. An interrupt there reached the caller without the environment: it stayed in the
registry, open, its handle count one too high, for the life of the process (a close of
every other handle never closed it; compact and an open with another mode or durability
were refused "already open in this process"). Now acquire_env drops that handle when
anything is raised after it was taken.

The sweep of tests/test_begin_interrupted.py lands a KeyboardInterrupt at each point of
the registry's open frames, for an open that finds the folder free and for one that
finds its creation lock held (by another descriptor of this process, let go just as the
open starts to wait for it); run in a child with a time limit, as a lock left held would
make the next open wait for ever.
"""

from __future__ import annotations

import os
from pathlib import Path

from test_begin_interrupted import (
    LockBlocker,
    folder_lock_free,
    interrupted_at,
    one_checkpoint,
    read_wrong,
    sweep_in_child,
    sweep_landings,
)

import cpstore
from cpstore.store import lmdb_registry_state

#: The frames of the registry's open, and the creation lock's take and release.
_OPENING = {
    "acquire_env",
    "_acquire",
    "_open_new",
    "_registered",
    "_shared",
    "lock_folder",
    "unlock_folder",
    "release_folders",
}


def _sweep(path: Path, contended: bool) -> list[str]:
    """Interrupt an open at each landing of ``_OPENING``; what each left wrong.
    ``contended``: the folder's creation lock is held (by a descriptor of this test) when
    the open starts, and let go as the open begins its wait for it."""
    cid = one_checkpoint(path)
    before = set(os.listdir("/proc/self/fd"))
    waited = [0]

    def interrupt(k: int) -> list[str]:
        if contended:
            blocker.hold()
        landed = interrupted_at(k, _OPENING, lambda: cpstore.open(path, durability="none").close())
        waited[0] += not blocker.let_go()  # still held: interrupted before the open waited
        return landed

    def left_wrong() -> str | None:
        if lmdb_registry_state._REGISTRY or lmdb_registry_state._BY_FILE:
            envs = list(lmdb_registry_state._BY_FILE.values())
            return f"left registered, {envs[0].handles} handle(s)"
        if not folder_lock_free(path):
            return "the folder's creation lock held"
        if set(os.listdir("/proc/self/fd")) != before:
            return "descriptors left open"
        return read_wrong(path, cid)

    with LockBlocker(path) as blocker:
        wrong = sweep_landings(interrupt, left_wrong, at_least=10)
    if contended and waited[0] < 5:
        wrong.append(f"the open waited for the lock in only {waited[0]} runs")
    return wrong


def free_sweep(path: Path) -> list[str]:
    return _sweep(path, contended=False)


def contended_sweep(path: Path) -> list[str]:
    return _sweep(path, contended=True)


def _in_child(sweep: str, path: Path) -> list[str]:
    """Run ``sweep`` in a child with a time limit (a lock left held hangs the next open)."""
    return sweep_in_child("test_left86_acquire_interrupted", sweep, path)


def test_an_open_interrupted_after_its_handle_was_taken_leaves_nothing_registered(
    tmp_path: Path,
) -> None:
    assert _in_child("free_sweep", tmp_path / "s") == []


def test_an_open_that_waited_interrupted_in_its_release_leaves_nothing_registered(
    tmp_path: Path,
) -> None:
    assert _in_child("contended_sweep", tmp_path / "s") == []
