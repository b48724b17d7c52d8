"""The connection pool of a PostgreSQL store, and how it comes back after an outage.

psycopg_pool retries a lost connection with exponential backoff (1, 2, 4, … s) for
``reconnect_timeout`` (5 minutes by default). After an outage of half a minute the next
attempt can lie more than half a minute ahead, long after the server is back: a txn
waiting :data:`~cpstore.store.pg_backend.POOL_WAIT` for a connection then failed with
StoreConnectionError against a running server. Here a reconnect attempt gives up after
:data:`RECONNECT_SPAN` seconds (so the longest gap between attempts stays near half of
it); the pool then drops that connection from its count, and

- if a client is waiting, a fresh attempt starts at once (:func:`_again`), its
  backoff from 1 s again, so a waiting txn gets a connection within about
  ``RECONNECT_SPAN / 2`` of the server's return. Waiting is counted here
  (:class:`_Pool`), not by psycopg_pool's ``requests_waiting``: that keeps a client
  whose wait timed out in its queue until a connection comes, and counted it as
  waiting for as long as the server stayed down (a new series every few seconds, each
  attempt a logged warning, with nobody waiting: audit48);
- if none is, nothing is retried until the next txn asks, whose request grows the
  pool with an immediate attempt (psycopg_pool does that for a pool below its size).
"""

from __future__ import annotations

import _thread
import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool

from cpstore.store.pg_errors import failed

__all__ = [
    "CONNECT_WAIT",
    "RECONNECT_SPAN",
    "connect",
    "end_lost_for_waiters",
    "make_pool",
    "take",
]

#: Seconds one reconnect attempt series runs before it starts over (see the module doc).
RECONNECT_SPAN = 5.0
#: Seconds one connection attempt waits (libpq's ``connect_timeout``, as the store's open),
#: unless the URL sets its own: without it an attempt against a server that accepts and
#: never answers waited for ever, its pool worker never ended, even after the close
#: (psycopg_pool stops waiting for it after 5 s), and RECONNECT_SPAN bounded nothing
#: (tests/test_pg_audit48_hung_server.py).
CONNECT_WAIT = 15


class _Pool(ConnectionPool[psycopg.Connection[Any]]):
    """A ConnectionPool that knows how many getconn() calls are under way (module doc)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.asking = 0
        self._asking_lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def getconn(
        self, timeout: float | None = None, between: Callable[[], object] | None = None
    ) -> psycopg.Connection[Any]:
        """psycopg_pool's, counted in :attr:`asking` from before ``between()`` (:func:`take`)."""
        counted = False  # an interrupt landing anywhere never leaves the count up
        try:
            with self._asking_lock:
                self.asking += 1
                counted = True
            if between is not None:
                between()
            return super().getconn(timeout)
        finally:
            if counted:
                with self._asking_lock:
                    self.asking -= 1


def take(
    pool: ConnectionPool[psycopg.Connection[Any]], wait: float, between: Callable[[], object]
) -> psycopg.Connection[Any]:
    """``pool.getconn(timeout=wait)`` with ``between()`` (the store's ``_end_lost``) run first,
    the caller counted as asking from before it: a read handed over as lost (its holder's
    finalizer, on any thread: PgBackend.lost_read) goes back only when someone ends it,
    and a read lost once this wait began is ended by a thread :func:`end_lost_for_waiters`
    starts (review93's waiting thread failed after 30 s with the connection free to take).
    One request for the whole wait: psycopg_pool serves its waiters in order, and
    review93's 0.5 s slices, each queued again at the tail, starved a waiter (served once in
    12 s beside 15 threads served 13 times each; FIFO: none waited over 0.95 s; review94).
    PoolTimeout once ``wait`` ran out; PoolClosed as getconn raises it."""
    if isinstance(pool, _Pool):
        return pool.getconn(wait, between)
    between()
    return pool.getconn(wait)


def end_lost_for_waiters(
    pool: ConnectionPool[psycopg.Connection[Any]], end_lost: Callable[[], object]
) -> None:
    """From PgBackend.lost_read (a finalizer, any thread, the lost read already listed):
    while a thread waits for a connection (``asking``, counted before its own look at the
    lost reads: one of the two sees the read), a new thread runs ``end_lost``, whose
    ROLLBACK gives the connection to the pool's first waiter. Never here: a finalizer runs
    at any allocation, maybe inside the pool's own lock. ``_thread``'s start, not
    ``threading``'s: that takes a lock the finalizer's thread may hold (a thread's start)."""
    if getattr(pool, "asking", 0) > 0:
        with contextlib.suppress(RuntimeError):  # no thread at the interpreter's shutdown
            _thread.start_new_thread(_quietly, (end_lost,))


def _quietly(end_lost: Callable[[], object]) -> None:
    with contextlib.suppress(Exception):  # the abort's own errors close the connection
        end_lost()


def _ours_ignored(record: logging.LogRecord) -> bool:
    """False (drop it) for psycopg's "error ignored terminating <Pipeline>" warning about a
    pipeline on a connection a cpstore pool lent: the statement's own error, which the
    pipeline's end met again ("pipeline aborted"), is raised by cpstore (a StoreReadOnlyError,
    say). It printed as a second stderr line beside the CLI's one about one refused write
    in ten (audit61). Reads psycopg's private ``_conn``/``_pool``: if they change, the
    warning just shows again."""
    if record.msg != "error ignored terminating %r: %s" or not record.args:
        return True
    conn = getattr(record.args[0], "_conn", None)  # type: ignore[index]
    return not isinstance(getattr(conn, "_pool", None), _Pool)


logging.getLogger("psycopg").addFilter(_ours_ignored)


def _again(pool: ConnectionPool[Any]) -> None:
    """psycopg_pool's ``reconnect_failed``: start over at once if a txn is waiting."""
    if isinstance(pool, _Pool) and pool.asking > 0:
        # check() grows a pool below its size with an immediate attempt (and tests the
        # idle connections, of which a pool with waiting clients has none).
        with contextlib.suppress(Exception):  # closed meanwhile: nothing to do
            pool.check()


def connect(conninfo: str, where: str) -> psycopg.Connection[Any]:
    """One autocommit connection (the open's), waiting the URL's ``connect_timeout``, else
    :data:`CONNECT_WAIT`: the open passed ``connect_timeout=CONNECT_WAIT`` always, which
    overrode the URL's (its 2 s waited 15 against a hung server; audit61).

    StoreConnectionError when none is made: it said "the connection ... was lost ...; the
    next operation reconnects", with no handle to reconnect (audit61's report)."""
    try:
        return psycopg.connect(conninfo, **_connect_kwargs(conninfo))
    except psycopg.OperationalError as exc:
        raise failed("could not connect to the server; nothing was opened", where, exc) from None


def _connect_kwargs(conninfo: str) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"autocommit": True}
    if "connect_timeout" not in conninfo_to_dict(conninfo):
        kwargs["connect_timeout"] = CONNECT_WAIT
    return kwargs


def make_pool(
    conninfo: str, *, max_size: int, name: str, wait: float
) -> ConnectionPool[psycopg.Connection[Any]]:
    """An autocommit pool of 1 to ``max_size`` connections, not yet opened."""
    return _Pool(
        conninfo,
        min_size=1,
        max_size=max_size,
        kwargs=_connect_kwargs(conninfo),
        open=False,
        name=name,
        timeout=wait,
        reconnect_timeout=RECONNECT_SPAN,
        reconnect_failed=_again,
    )
