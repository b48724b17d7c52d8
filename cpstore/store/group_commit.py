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
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from cpstore.errors import StoreError

__all__ = ["GroupCommit"]

W = TypeVar("W")


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
        #: Txns committed and writes they carried (what the tests and benchmarks read).
        self.groups = 0
        self.writes = 0

    def commit(self, write: W) -> None:
        """Commit ``write`` durably, grouped with the writes of other threads; raise its error."""
        slot = _Slot(write)
        with self._cond:
            self._queue.append(slot)
            while self._leading and not slot.done:
                self._cond.wait()
            if slot.done:
                return _outcome(slot)
            self._leading = True
            group, self._queue = self._queue, []
        try:
            self._run(group)
        finally:
            with self._cond:
                self._leading = False
                self._cond.notify_all()
        return _outcome(slot)

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
