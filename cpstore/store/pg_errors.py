"""PostgreSQL failures as cpstore errors: connection lost, timeout, read-only, full, other.

The server's own message (its SQLSTATE and text) is kept in ``got``; the
class says what the caller can do: :class:`StoreConnectionError` (the next
operation reconnects), :class:`StoreTimeoutError` (the statement was
cancelled, the transaction rolled back), :class:`StoreReadOnlyError`,
:class:`StoreFullError`, else :class:`StoreError`.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import errors as pg

from cpstore.errors import (
    CommitLostError,
    CpstoreError,
    StoreConnectionError,
    StoreError,
    StoreFullError,
    StoreReadOnlyError,
    StoreTimeoutError,
)

__all__ = ["ENGINE_ERRORS", "interrupt_in", "is_broken", "translate"]

#: psycopg's raw errors: a read-back failing with one could not read the store
#: (commit.settle_by_reading), not a signal handler's exception.
ENGINE_ERRORS: tuple[type[Exception], ...] = (psycopg.Error,)


def _text(exc: BaseException) -> str:
    state = getattr(exc, "sqlstate", None)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"{state}: {text}" if state else text


def is_broken(exc: BaseException, conn: psycopg.Connection[Any] | None) -> bool:
    """True when ``exc`` means the connection itself is gone (not a refused statement)."""
    if conn is not None and (conn.broken or conn.closed):
        return True
    return isinstance(exc, (pg.AdminShutdown, pg.CrashShutdown, pg.CannotConnectNow)) or (
        isinstance(exc, psycopg.OperationalError)
        and getattr(exc, "sqlstate", None) is None
        and not isinstance(exc, pg.QueryCanceled)
    )


def translate(
    exc: BaseException,
    where: str,
    conn: psycopg.Connection[Any] | None = None,
    *,
    committing: bool = False,
) -> CpstoreError:
    """The cpstore exception for a psycopg failure ``exc`` met at ``where``."""
    text = _text(exc)
    if isinstance(exc, pg.QueryCanceled):
        return StoreTimeoutError(
            "the server cancelled a statement (statement timeout); the transaction was rolled back",
            where=where,
            got=text,
        )
    if is_broken(exc, conn):
        if committing:
            return CommitLostError(
                "the connection to the server was lost while committing: the transaction "
                "either committed whole or not at all; read the ref again before retrying",
                where=where,
                got=text,
            )
        return StoreConnectionError(
            "the connection to the server was lost or refused; nothing of this transaction "
            "was committed, and the next operation reconnects",
            where=where,
            got=text,
        )
    if isinstance(exc, (pg.ReadOnlySqlTransaction, pg.InsufficientPrivilege)):
        return StoreReadOnlyError("the store cannot be written", where=where, got=text)
    if isinstance(exc, (pg.DiskFull, pg.OutOfMemory, pg.ProgramLimitExceeded)):
        return StoreFullError("the server is out of room", where=where, got=text)
    if isinstance(exc, (pg.ConnectionTimeout, psycopg.OperationalError)):
        return StoreConnectionError("the server could not be reached", where=where, got=text)
    return StoreError("PostgreSQL failed", where=where, got=text)


def failed(what: str, where: str, exc: BaseException) -> StoreError:
    """A StoreError for a failure outside a statement (pool, connect)."""
    return StoreConnectionError(what, where=where, got=_text(exc))


def interrupt_in(exc: BaseException, outer: BaseException | None) -> BaseException | None:
    """The interrupt (KeyboardInterrupt, a signal handler's exception: neither psycopg's nor
    cpstore's) that psycopg error ``exc`` replaced, if any. psycopg's pipeline, ended while
    an interrupt propagates out of its wait for a reply, raises its own "cannot exit
    pipeline mode while busy" in the interrupt's place (pgfollow): that is an interrupt,
    raised as itself (its commit then settled by reading back), not a lost COMMIT that
    reads back stored and returns with the interrupt swallowed.

    ``outer`` is the exception the caller was handling when the commit began (a checkpoint
    saved in an ``except`` block), where the context chain of every error raised inside
    the commit ends: never taken for an interrupt. It was: a COMMIT lost with the
    connection raised the caller's own handled exception instead of CommitLostError, and a
    batched flush took it for an interrupt and requeued its batch (audit48)."""
    seen: set[int] = set()
    cause = exc.__context__
    while cause is not None and cause is not outer and id(cause) not in seen:
        if not isinstance(cause, (psycopg.Error, CpstoreError)):
            return cause
        seen.add(id(cause))
        cause = cause.__context__
    return None
