"""A PostgreSQL store's table handle and the txn states pg_txn.py tests: :class:`PgTable`
(one table ``schema.name`` and its statements), the :data:`EXISTS` marker of a key
prefetched without its value, and :func:`settled` (a ROLLBACK would run at once).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import pq

from cpstore.store.pg_count import count_sql

__all__ = ["EXISTS", "Exists", "PgTable", "settled"]


def settled(conn: psycopg.Connection[Any]) -> bool:
    """No command in flight and the pipeline off: a ROLLBACK would run at once."""
    return (
        conn.pgconn.pipeline_status == pq.PipelineStatus.OFF
        and conn.info.transaction_status in _SETTLED
    )


class Exists:
    """A key known to be stored whose value was not fetched (an existence prefetch)."""


#: The marker :meth:`PgTxn.prefetch` leaves for a key fetched without its value.
EXISTS = Exists()
#: Transaction states in which a ROLLBACK runs at once (no command in flight).
_SETTLED = frozenset(
    {pq.TransactionStatus.IDLE, pq.TransactionStatus.INTRANS, pq.TransactionStatus.INERROR}
)


@dataclass(frozen=True, eq=False)
class PgTable:
    """The handle a txn's ``db=`` takes: one table ``schema.name`` and its statements."""

    name: str
    qualified: str
    sql: dict[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, schema: str, name: str, *, counted: bool = False, kept: bool = False) -> PgTable:
        """The handle of table ``name`` in ``schema`` (both checked identifiers); with
        ``counted``, its count is the one the server keeps (:mod:`pg_count`), not a
        ``count(*)``; with ``kept`` (not counted), a ``count(*)`` and the kept count beside
        it, which ``verify()`` compares (review73)."""
        q = f'"{schema}"."{name}"'
        count = count_sql(schema, name) if counted else f"SELECT count(*) FROM {q}"
        if kept and not counted:
            count = f"SELECT ({count}), ({count_sql(schema, name)})"
        return cls(
            name,
            q,
            {
                "get": f"SELECT v FROM {q} WHERE k = %b",
                "many": f"SELECT k, v FROM {q} WHERE k = ANY(%b)",
                "exists": f"SELECT k FROM {q} WHERE k = ANY(%b)",
                "from": f"SELECT k, v FROM {q} WHERE k >= %b ORDER BY k LIMIT %b",
                "after": f"SELECT k, v FROM {q} WHERE k > %b ORDER BY k LIMIT %b",
                "last": f"SELECT k, v FROM {q} ORDER BY k DESC LIMIT 1",
                "before": f"SELECT k, v FROM {q} WHERE k < %b ORDER BY k DESC LIMIT %b",
                # The row before a key range, up to %b rows in it, the row after it.
                "near": f"(SELECT k, v FROM {q} WHERE k < %b ORDER BY k DESC LIMIT 1) UNION ALL "
                f"(SELECT k, v FROM {q} WHERE k >= %b AND k < %b ORDER BY k LIMIT %b) UNION ALL "
                f"(SELECT k, v FROM {q} WHERE k >= %b ORDER BY k LIMIT 1)",
                "scan": f"SELECT k, v FROM {q} ORDER BY k",
                "count": count,
                "upsert": f"INSERT INTO {q} (k, v) SELECT * FROM unnest(%b::bytea[], "
                "%b::bytea[]) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v",
                "delete": f"DELETE FROM {q} WHERE k = ANY(%b)",
            },
        )
