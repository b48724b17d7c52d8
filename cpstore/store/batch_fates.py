"""A batch write's fates: what a failed or interrupted flush tells the threads whose writes
it held (batch_owners.py): an error of another thread's dropped commit, whether an
exception is the batch's own failure (:func:`foreign`), and where an interrupted batch goes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from cpstore.errors import (
    CommitLostError,
    CpstoreError,
    OutcomeUnknownError,
    ReentrantWriteError,
    StoreConnectionError,
    StoreError,
)

__all__ = ["commit_queue_first", "dropped_error", "foreign", "interrupted", "not_stored"]


def dropped_error(exc: BaseException, count: int, where: str) -> CpstoreError:
    """The error a thread gets for ``count`` of its queued writes another thread's commit lost."""
    what = (
        f"{count} checkpoint(s) this thread queued were in another thread's batch commit, "
        "which failed"
    )
    if isinstance(exc, OutcomeUnknownError) or foreign(exc):
        # An interrupt (KeyboardInterrupt) may have landed after the commit: never "not
        # stored" for what may be stored (audit20; group commit says the same). So may a
        # handler's Exception (a watchdog's TimeoutError): a batch it reaches here with was
        # not settled by reading back (not applied, it is requeued instead); it was told
        # "not stored" for a stored batch (audit47).
        return OutcomeUnknownError(
            f"{what}; they may or may not be stored (read the branch heads)",
            where=where,
            got=str(exc)[:300] or type(exc).__name__,
        )
    if isinstance(exc, CommitLostError) and exc.stored is False:
        # Lost while committing, then read back and found absent (commit.settle_by_reading):
        # every owner is told "not stored", as the committing thread is.
        return CommitLostError(
            f"{what} when the connection was lost: not stored",
            where=where,
            got=str(exc)[:300],
            stored=False,
        )
    if isinstance(exc, CommitLostError):
        # Lost with its COMMIT on the wire and not settled by reading back: the batch
        # committed whole or not at all (docs/store.md, "Faults"); the committing thread is
        # told so, and so is every other owner (tests/test_chaos_batched_relay.py).
        return CommitLostError(
            f"{what} when the connection was lost while committing; they may or may not "
            "be stored (read the branch heads)",
            where=where,
            got=str(exc)[:300],
        )
    if isinstance(exc, StoreConnectionError):
        # Lost before its COMMIT was sent (a lost COMMIT is CommitLostError): nothing was
        # committed, as the committing thread and the exit warning say; it said "may or may
        # not be stored" here (tests/test_pg_batch_lost_before_commit.py).
        return StoreConnectionError(
            f"{what} when the connection was lost before its COMMIT was sent: not stored",
            where=where,
            got=str(exc)[:300],
        )
    cls = type(exc) if isinstance(exc, CpstoreError) else StoreError
    return cls(f"{what}: not stored", where=where, got=str(exc)[:300])


def not_stored(exc: BaseException) -> bool:
    """Whether a batch that failed with ``exc`` is told to its owners as not stored (every
    :func:`dropped_error` but "may or may not be stored")."""
    told = dropped_error(exc, 1, "")
    if isinstance(told, OutcomeUnknownError):
        return False
    return not isinstance(told, CommitLostError) or told.stored is False


class _Committable(Protocol):
    committed: bool


def foreign(exc: BaseException) -> bool:
    """Whether ``exc``, raised in a flush, is not the batch's own failure: an interrupt, an
    exception a signal handler raised inside it, or ReentrantWriteError (a handler's refused
    write). Never settled by reading as a failed commit is: a handler's exception landing
    after the commit was swallowed so, and its program went on (audit42)."""
    return not isinstance(exc, CpstoreError) or isinstance(exc, ReentrantWriteError)


def interrupted(
    exc: BaseException,
    applied: bool,
    landed: Callable[[], bool | None],
    batch: Sequence[_Committable],
) -> bool | None:
    """What a flush that raised ``exc`` with its batch taken does with it when ``exc`` is
    :func:`foreign`: True, its txn wrote nothing (interrupted while applying it; applied,
    the store read back, ``landed``, says not), it goes back on the queue; False, the store
    shows it committed: each op is marked committed and the batch settles as stored for
    every owner (they were told "not stored" or "may or may not"), ``exc`` raised all the
    same. None otherwise (the batch's own failure, or cannot tell: dropped)."""
    if not foreign(exc):
        return None
    if not applied:
        return True
    # Read at most twice: a handler's exception again in the read (a watchdog firing twice,
    # a second Ctrl-C; ``exc`` is the one raised) reads once more. A watchdog's was taken
    # for an unreadable store (audit49), a KeyboardInterrupt or SystemExit left it unread
    # (audit50): a stored batch not marked. Anything else: unreadable, may have landed,
    # never queued twice.
    for _ in range(2):
        try:
            found = landed()
            break
        except BaseException as err:
            if not foreign(err):
                return None
    else:
        return None
    if found:
        for op in batch:
            op.committed = True
    return None if found is None else not found


class _Queue(Protocol):
    """A handle's batched queue: what :func:`commit_queue_first` needs of a backend."""

    @property
    def pending(self) -> int: ...

    def flush(self) -> None: ...


def commit_queue_first(backend: _Queue, whose: str, before: str, nothing: str) -> None:
    """Commit a batched handle's queued checkpoints before an operation of that handle
    that is blind to them (a sweep, a copy, a transfer into it: retention96, review99).
    A commit that fails is raised as the flush raised it (``str()`` unchanged: callers
    and the chaos checker match it) with a note naming ``before`` ("the prune") and that
    it did not run (``nothing``: "nothing was swept"): the queued checkpoint's own error
    ("the branch moved since this recorder read it") read as the operation's. ``whose``:
    "this handle's"."""
    queued = backend.pending
    if not queued:
        return
    try:
        backend.flush()
    except Exception as exc:
        exc.add_note(
            f"raised committing {whose} queued checkpoints ({queued} queued) before "
            f"{before}, which did not run: {nothing}"
        )
        raise
