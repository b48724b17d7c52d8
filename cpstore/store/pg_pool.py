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
  ``RECONNECT_SPAN / 2`` of the server's return;
- if none is, nothing is retried until the next txn asks, whose request grows the
  pool with an immediate attempt (psycopg_pool does that for a pool below its size).
"""

from __future__ import annotations

import contextlib
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

__all__ = ["RECONNECT_SPAN", "make_pool"]

#: Seconds one reconnect attempt series runs before it starts over (see the module doc).
RECONNECT_SPAN = 5.0


def _again(pool: ConnectionPool[Any]) -> None:
    """psycopg_pool's ``reconnect_failed``: start over at once if a txn is waiting."""
    if pool.get_stats().get("requests_waiting", 0) > 0:
        # check() grows a pool below its size with an immediate attempt (and tests the
        # idle connections, of which a pool with waiting clients has none).
        with contextlib.suppress(Exception):  # closed meanwhile: nothing to do
            pool.check()


def make_pool(
    conninfo: str, *, max_size: int, name: str, wait: float
) -> ConnectionPool[psycopg.Connection[Any]]:
    """An autocommit pool of 1 to ``max_size`` connections, not yet opened."""
    return ConnectionPool(
        conninfo,
        min_size=1,
        max_size=max_size,
        kwargs={"autocommit": True},
        open=False,
        name=name,
        timeout=wait,
        reconnect_timeout=RECONNECT_SPAN,
        reconnect_failed=_again,
    )
