"""Settling an LMDB commit that reported an error: read the store to tell whether it landed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from cpstore.errors import OutcomeUnknownError
from cpstore.store.backend import Txn
from cpstore.store.commit import landed, settle_by_reading
from cpstore.store.fast_read import contents
from cpstore.store.model import CheckpointWrite

__all__ = ["batch_landed", "commit_failed", "growth_failed"]


class LmdbBackend(Protocol):
    """What of :class:`~cpstore.store.lmdb_backend.LmdbBackend` the settling reads."""

    @property
    def path(self) -> str: ...

    @property
    def dbs(self) -> Mapping[str, Any]: ...

    def read_txn(self) -> AbstractContextManager[Txn[memoryview]]: ...

    def head(self, txn: Txn[memoryview], key: bytes) -> bytes | None: ...

    @property
    def engine_error(self) -> type[Exception]: ...


def batch_landed(backend: LmdbBackend, ops: Sequence[CheckpointWrite]) -> bool | None:
    """Whether the store shows the txn of ``ops`` committed (commit.landed)."""
    with backend.read_txn() as txn:
        dbs = backend.dbs
        records = contents(dbs)[1]
        tombs = dbs["tombstones"]
        return landed(
            ops,
            lambda key: backend.head(txn, key),
            lambda cid: records.stored(txn, cid),
            lambda cid: txn.get(cid, db=tombs) is not None,
        )


def commit_failed(backend: LmdbBackend, ops: Sequence[CheckpointWrite], exc: Exception) -> None:
    """After the txn of ``ops`` was applied and its commit (or what follows it) raised
    ``exc``: return when the store shows the txn committed (LMDB can report an error
    after the txn is in fact committed, and committing it again would make each write
    conflict with its own result), raise ``exc`` saying "not stored" when it shows it
    did not, and OutcomeUnknownError when it cannot tell (commit.landed)."""
    if isinstance(exc, OutcomeUnknownError) and isinstance(exc.__cause__, Exception):
        exc = exc.__cause__  # write_txn's "may or may not": the store is read instead
    engine = (backend.engine_error,)  # LMDB's raw errors: unreadable, not a handler's
    if settle_by_reading(exc, lambda: batch_landed(backend, ops), engine):  # unreadable: unknown
        return
    raise OutcomeUnknownError(
        "the commit reported an error and may have written all the same; "
        f"{'this checkpoint' if len(ops) == 1 else f'these {len(ops)} checkpoints'} "
        "may or may not be stored (read the branch head)",
        where=backend.path,
        got=str(exc),
    ) from exc


def growth_failed(exc: BaseException, full: type[BaseException]) -> bool:
    """Whether ``exc`` is an error of the map's growth after LMDB refused a txn's commit
    for a full map, ``full`` (lmdb.MapFullError: only the backend imports lmdb; Env.write
    grows the map in its ``except lmdb.MapFullError`` handler, so
    what goes wrong there has that error in its context chain, directly or through the
    LMDB error Env translated): that txn was aborted, nothing of it is stored (not "may or
    may not"), whatever its function had applied."""
    seen = exc.__context__
    for _ in range(3):
        if seen is None or isinstance(seen, full):
            return seen is not None
        seen = seen.__context__
    return False
