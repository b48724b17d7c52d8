"""An LMDB checkpoint commit (``sync``, ``none``, a sync group) that a signal handler's
exception interrupted: read back, raised, never swallowed.

A handler's exception (a SIGTERM handler's ``sys.exit()``, a watchdog's TimeoutError,
KeyboardInterrupt: :func:`~cpstore.store.batch_fates.foreign`) landing just after the
commit was settled as a commit that reported an error is (lmdb_settle.commit_failed): the
store read back showed it committed and the call returned, the exception lost. It is now
raised, and the store is read back only to tell whether the checkpoints are stored: those
that are are marked committed, so a recorder whose call raised follows its stored
checkpoint (model.commit_stored), as batched mode's flush does (audit42).
"""

from __future__ import annotations

from collections.abc import Sequence

from cpstore.store.batch_fates import foreign, interrupted
from cpstore.store.lmdb_settle import LmdbBackend, batch_landed, commit_failed, growth_failed
from cpstore.store.model import CheckpointWrite

__all__ = ["GroupFates", "commit_raised"]


def commit_raised(
    backend: LmdbBackend,
    ops: Sequence[CheckpointWrite],
    exc: BaseException,
    applied: bool,
    full: type[BaseException],
) -> bool:
    """After the write txn of ``ops`` raised ``exc`` (``applied``: its function had applied
    them all; ``full``: lmdb.MapFullError): True when ``exc`` is the commit's own error and
    the store shows the txn committed (the caller returns: stored); False when the caller
    re-raises ``exc``; the error of lmdb_settle.commit_failed when it reads otherwise.

    A :func:`foreign` ``exc`` is always re-raised, after the store is read back when the
    txn was applied: ``ops`` are marked committed when it shows them stored."""
    if foreign(exc) or not isinstance(exc, Exception):
        interrupted(exc, applied, lambda: batch_landed(backend, ops), ops)  # marks them
        return False
    if not applied or growth_failed(exc, full):
        return False  # refused, or failed before its commit: rolled back, nothing stored
    try:
        commit_failed(backend, ops, exc)
    except BaseException as late:
        if foreign(late) or not isinstance(late, Exception):
            # A handler's exception in the read-back (commit.settle_by_reading): read
            # again, only to mark what is stored (its recorder follows), and raise it.
            interrupted(late, applied, lambda: batch_landed(backend, ops), ops)
        raise
    return True


class GroupFates:
    """What group commit asks of an LMDB backend after a handler's exception in a group's
    commit (group_commit.Readback): whether writes are stored, and marking a stored one
    whose caller gets an exception all the same."""

    __slots__ = ("_backend",)

    def __init__(self, backend: LmdbBackend) -> None:
        self._backend = backend

    def foreign(self, exc: BaseException) -> bool:
        """A signal handler's exception or an interrupt (batch_fates.foreign)."""
        return foreign(exc)

    def landed(self, writes: Sequence[CheckpointWrite]) -> bool | None:
        """Whether the store shows the txn of ``writes`` committed (None: cannot tell)."""
        return batch_landed(self._backend, writes)

    def stored(self, write: CheckpointWrite) -> None:
        """``write`` is stored, and its caller gets an exception: its recorder follows it."""
        write.committed = True
