"""PostgreSQL: a checkpoint committed alone (``sync``, ``none``) whose commit a signal
handler's exception interrupted: read back, raised, never swallowed.

A handler's exception (a SIGTERM handler's ``sys.exit()``, a watchdog's TimeoutError,
KeyboardInterrupt: :func:`~cpstore.store.batch_fates.foreign`) landing once the
checkpoint was applied (in the COMMIT's round trip, or after it) was raised, but the
checkpoint was never marked stored: a recorder whose call raised kept its old head and
its next checkpoint failed ConflictError, its own stored checkpoint having moved the
branch. Now the store is read back (PgBackend._landed: it waits for the store's writer
lock, shared, so a COMMIT still on its way is settled first) and a stored checkpoint is
marked committed, so the recorder follows it (model.commit_stored), as on LMDB
(lmdb_interrupted.py) and in a batched flush. Landing before the apply ended, nothing
was written: raised, not read back, not marked.
"""

from __future__ import annotations

from collections.abc import Callable

from cpstore.errors import CommitLostError
from cpstore.store.backend import Txn
from cpstore.store.batch_fates import interrupted
from cpstore.store.commit import settle_by_reading
from cpstore.store.model import CheckpointWrite
from cpstore.store.pg_errors import ENGINE_ERRORS

__all__ = ["commit_alone"]


def commit_alone(
    op: CheckpointWrite,
    write: Callable[[Callable[[Txn[memoryview]], None]], None],
    apply: Callable[[Txn[memoryview], list[CheckpointWrite]], None],
    landed: Callable[[list[CheckpointWrite]], bool | None],
) -> None:
    """Commit ``op`` in one write txn (``write(fn)``: ``fn`` run in it, then COMMIT), its
    writes made by ``apply``; ``landed`` reads back whether a txn of ops committed.

    A lost COMMIT (CommitLostError) is settled by reading back: stored, it returns. Any
    :func:`~cpstore.store.batch_fates.foreign` exception is raised unchanged, after the
    store is read back when ``op`` had been applied: ``op`` is marked committed when it
    shows it stored (unreadable: not marked, as "may or may not be stored")."""
    ops = [op]
    applied = False

    def apply_it(txn: Txn[memoryview]) -> None:
        nonlocal applied
        apply(txn, ops)
        applied = True  # from here the COMMIT may store it, whatever interrupts it

    try:
        try:
            write(apply_it)
        except CommitLostError as exc:
            # Lost with COMMIT on the wire: read the store back (a new connection) to
            # tell committed from not; only when it cannot be read is it unknown.
            if not settle_by_reading(exc, lambda: landed(ops), ENGINE_ERRORS):
                raise
    except BaseException as exc:
        interrupted(exc, applied, lambda: landed(ops), ops)  # marks op when stored
        raise
