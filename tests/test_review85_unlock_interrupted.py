"""review85: an interrupt landing in the release of a folder's creation lock leaves it held
for good.

tests/test_begin_interrupted.py's sweep, widened to the frames that release the lock
(``unlock_folder``, ``creation_lock``, ``acquire_env``): an open's ``_open_files`` let go
of the pinned folder's descriptor and then of the lock in two calls, so a KeyboardInterrupt
landing at the first's start skipped the second; ``unlock_folder`` forgot the descriptor
(``FORK_CLOSED_FDS.discard``) and closed it in two calls, so one landing on the discard's
return skipped the close; ``creation_lock``'s and ``acquire_env``'s ends had one call each,
whose start is a landing too. The exclusive flock then stayed this process's, and every
later open of the store, here or in any other process, waited on it forever (the
compaction's sweep hung at its verify's open). Now every release on the way out takes the
descriptors out of a list as one C call closes each, and is tried again from an
``except`` when interrupted.
"""

from __future__ import annotations

import os
from pathlib import Path

import test_compact_interrupted as compact
from test_begin_interrupted import (
    folder_lock_free,
    interrupted_at,
    one_checkpoint,
    read_wrong,
    sweep_in_child,
    sweep_landings,
)

import cpstore
from cpstore.store import lmdb_registry_state

#: Every frame of an open and of a compaction that takes or lets go of the folder's lock.
_LOCKING = {
    "acquire_env",
    "_open_files",
    "creation_lock",
    "lock_folder",
    "unlock_folder",
    "release_folders",
    "pin_folder",
    "open_into",
}


def _open_sweep(path: Path) -> list[str]:
    """Interrupt an open at each landing in the locking frames; what each left wrong."""
    cid = one_checkpoint(path)
    before = set(os.listdir("/proc/self/fd"))

    def interrupt(k: int) -> list[str]:
        return interrupted_at(k, _LOCKING, lambda: cpstore.open(path, durability="none").close())

    def left_wrong() -> str | None:
        if not folder_lock_free(path):
            return "the folder's creation lock held"  # every open would wait on it
        if set(os.listdir("/proc/self/fd")) != before:
            return "descriptors left open"
        if lmdb_registry_state._REGISTRY:
            return "an environment left registered"
        return read_wrong(path, cid)

    return sweep_landings(interrupt, left_wrong, at_least=10)


def _compact_sweep(path: Path) -> list[str]:
    compact.FRAMES = compact.FRAMES | _LOCKING
    return compact._sweep(path)


def _in_child(sweep: str, path: Path) -> list[str]:
    """Run ``sweep`` in a child with a time limit: before the fix a landing hung it."""
    return sweep_in_child("test_review85_unlock_interrupted", sweep, path)


def test_an_open_interrupted_in_its_locking_leaves_the_folder_unlocked(tmp_path: Path) -> None:
    assert _in_child("_open_sweep", tmp_path / "s") == []


def test_a_compaction_interrupted_in_its_opens_locking_leaves_no_lock(tmp_path: Path) -> None:
    assert _in_child("_compact_sweep", tmp_path / "s") == []
