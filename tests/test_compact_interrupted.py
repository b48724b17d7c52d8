"""``compact_store`` interrupted anywhere in this process's share of its locking (session
34): the sweep of tests/test_begin_interrupted.py lands a KeyboardInterrupt at each point
where CPython runs a pending signal handler (a frame's start, a C call's return) in the
compaction's frames, and after each the process must be as before: the registry lock
free, nothing reserved for a compaction, no descriptor left open, the store opening and
reading here.

Before: a landing on the reservation's update (or its lock's release) left the store
reserved for good (every later open of it in this process refused, "this process is
compacting the store"); a landing on the timed registry-lock take's return lost the answer
with the lock held, and the reservation's end then waited on its own thread's lock for good
(as every open of the process would); a landing on the liveness lock file's open leaked its
descriptor."""

from __future__ import annotations

import gc
import os
from pathlib import Path

from test_begin_interrupted import interrupted_at, sweep_in_child

import cpstore
from cpstore.store import lmdb_registry_state
from cpstore.store.maintenance import CompactReport, compact_store

FRAMES = {
    "compact_in_place",
    "reserved_for_compact",
    "_compact_in_place",
    "pinned_for_compact",
    "_pin_for_compact",
    "_exclusive",
    "open_into",
}


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _sweep(path: Path) -> list[str]:
    """Interrupt ``compact_store(path)`` at each landing in turn until it runs through;
    what each landing left wrong (mended here, so the sweep goes on)."""
    st = cpstore.open(path, durability="none")
    cid = st.recorder("r").checkpoint(0, {"a": 1})
    st.close()
    gc.collect()
    before = _fds()
    wrong: list[str] = []
    reports: list[CompactReport] = []

    def compact() -> None:
        reports.append(compact_store(path))

    k = 0
    while True:
        k += 1
        reports.clear()
        landed = interrupted_at(k, FRAMES, compact)
        gc.collect()
        if not landed:
            if not reports or not reports[0].bytes_before >= reports[0].bytes_after > 0:
                wrong.append(f"ran through: {reports}")
            break
        if lmdb_registry_state._REGISTRY_LOCK.locked():
            wrong.append(f"{landed[0]}: registry lock held")
            lmdb_registry_state._REGISTRY_LOCK.release()
        if lmdb_registry_state._COMPACTING:
            wrong.append(
                f"{landed[0]}: reserved {sorted(map(str, lmdb_registry_state._COMPACTING))}"
            )
            lmdb_registry_state._COMPACTING.clear()
        if _fds() != before:
            wrong.append(f"{landed[0]}: descriptors {sorted(_fds() - before)} left open")
        with cpstore.open(path, durability="none") as again, again.read(cid) as cp:
            if cp.state() != {"a": 1}:
                wrong.append(f"{landed[0]}: read {cp.state()!r}")
        gc.collect()
    if k <= 8:
        wrong.append(f"only {k - 1} landings")
    with cpstore.open(path, readonly=True) as done:
        if not done.verify().ok:
            wrong.append("verify after the sweep")
    return wrong


def test_compact_interrupted_anywhere_leaves_the_process_as_before(tmp_path: Path) -> None:
    """In a child process with a time limit: before the fix one landing made the
    compaction wait on its own thread's lock for good."""
    assert sweep_in_child("test_compact_interrupted", "_sweep", tmp_path / "s") == []
