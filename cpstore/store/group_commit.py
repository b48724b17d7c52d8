"""Group commit: the checkpoint writes of several threads in one durable txn.

In ``durability="sync"`` every checkpoint is fsynced before its call returns,
and the fsync, not the CPU, bounds how many a store takes per second. When
several threads of one process commit at once, the first becomes the *leader*:
it takes every write queued so far and commits them in one txn (one fsync);
the others wait, and whoever is waiting when the leader finishes leads the
next group with what queued meanwhile. Every caller still returns only after
its own write is committed and fsynced, so nothing is acknowledged earlier
than without grouping.

A write that fails inside a group (a ref conflict, a pruned parent) must fail
alone: when the group txn raises, it is rolled back whole and each of its
writes is committed again in a txn of its own, in queue order, so each caller
gets exactly the result it would have had committing alone (the second of two
writes racing for one branch gets its ``ConflictError``; the first is stored).

It knows nothing of LMDB: ``commit_many`` is any function that applies a list
of writes in one durable txn (all or nothing). Processes are not grouped:
LMDB has one writer at a time across processes, and each process's group
commits under it in turn (docs/durability.md, "Group commit").
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from cpstore.errors import StoreError

__all__ = ["GroupCommit"]

W = TypeVar("W")

#: The longest a leader waits for the writers of its last group to queue again.
MAX_GATHER_SECONDS = 0.002


class _Slot(Generic[W]):
    """One caller's write and, once its group ran, its outcome."""

    __slots__ = ("done", "error", "write")

    def __init__(self, write: W) -> None:
        self.write = write
        self.done = False
        self.error: BaseException | None = None


class GroupCommit(Generic[W]):
    """Leader/follower queue in front of a one-txn ``commit_many``."""

    def __init__(self, commit_many: Callable[[Sequence[W]], None]) -> None:
        self._commit_many = commit_many
        self._cond = threading.Condition(threading.Lock())
        self._queue: list[_Slot[W]] = []
        self._leading = False
        # How many writes the last group carried and how long it took: a new
        # leader waits (at most that long) for as many, see commit().
        self._last_size = 1
        self._last_seconds = 0.0
        #: Txns committed and writes they carried (what the tests and benchmarks read).
        self.groups = 0
        self.writes = 0

    def commit(self, write: W) -> None:
        """Commit ``write`` durably, grouped with the writes of other threads; raise its error."""
        slot = _Slot(write)
        with self._cond:
            self._queue.append(slot)
            if self._leading:
                self._cond.notify_all()  # a gathering leader counts arrivals
            leading = False
            try:
                while self._leading and not slot.done:
                    self._cond.wait()
                if slot.done:
                    return _outcome(slot)
                self._leading = leading = True
                self._gather()
            except BaseException:
                # Interrupted (KeyboardInterrupt) before any group took this
                # write: withdraw it, so it is not stored behind its caller's
                # back; a leader hands the lead on, or every later writer
                # would wait for a leader that is gone.
                if slot in self._queue:
                    self._queue.remove(slot)
                if leading:
                    self._leading = False
                    self._cond.notify_all()
                raise
            group, self._queue = self._queue, []
        try:
            started = time.monotonic()
            self._run(group)
            self._last_size, self._last_seconds = len(group), time.monotonic() - started
        finally:
            with self._cond:
                self._leading = False
                self._cond.notify_all()
        return _outcome(slot)

    def _gather(self) -> None:
        """Wait (lock held, released while waiting) for as many writes as the last group.

        Without it groups alternate 1, n-1, 1, ...: the writers of a group all
        return at once, and the first to come back leads alone while the rest
        are still building their checkpoints. Waiting at most one group's
        commit time for them at most doubles a write's latency and lets every
        busy writer share each fsync. A lone writer (last group of 1) never waits.
        """
        want = self._last_size
        if want <= 1:
            return
        deadline = time.monotonic() + min(self._last_seconds, MAX_GATHER_SECONDS)
        while len(self._queue) < want:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._cond.wait(left)

    def _run(self, group: list[_Slot[W]]) -> None:
        """Commit ``group``: in one txn, or one txn per write when that fails."""
        try:
            try:
                self._commit_many([s.write for s in group])
            except Exception as exc:
                if len(group) == 1:
                    _settle(group[0], exc)
                    return
                # Rolled back whole: each write again alone, for its own outcome.
                for s in group:
                    try:
                        self._commit_many([s.write])
                    except Exception as alone:
                        _settle(s, alone)
                    else:
                        self._count(1, 1)
                        _settle(s, None)
            else:
                self._count(1, len(group))
                for s in group:
                    _settle(s, None)
        except BaseException:
            # The leader was interrupted (KeyboardInterrupt) with writes whose
            # outcome nobody knows: say so to their callers instead of hanging them.
            for s in group:
                if not s.done:
                    _settle(
                        s,
                        StoreError(
                            "interrupted while committing this checkpoint's group; "
                            "it may or may not be stored (read the branch head)",
                            where="group commit",
                        ),
                    )
            raise

    def _count(self, groups: int, writes: int) -> None:
        self.groups += groups
        self.writes += writes


def _settle(slot: _Slot[W], error: BaseException | None) -> None:
    slot.error = error
    slot.done = True  # after the error: a woken follower reads a final outcome


def _outcome(slot: _Slot[W]) -> None:
    if slot.error is not None:
        raise slot.error
