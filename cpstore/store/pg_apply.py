"""PostgreSQL: a batch of checkpoint writes applied in one txn, and a write txn's end made
whole when an interrupt cut it short (moved out of pg_backend, at the module limit)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from cpstore.store.commit import apply_write
from cpstore.store.model import CheckpointWrite, ref_key
from cpstore.store.pg_table import PgTable
from cpstore.store.pg_txn import PgTxn
from cpstore.store.refs import REFS_DIGEST_KEY

__all__ = ["abort_again", "apply_batch"]


def apply_batch(
    txn: PgTxn, tables: Mapping[str, PgTable], ops: list[CheckpointWrite], layout: int
) -> None:
    """Prefetch what every op reads (one round trip), then apply them in order."""
    t = tables
    cps = [op.cid for op in ops] + [op.parent for op in ops if op.parent is not None]
    txn.prefetch(
        {
            t["refs"]: [ref_key(op.run_id, op.branch) for op in ops],
            # the records a conditional commit expects (a LangGraph put continuing its
            # tip expects its parent's entry: lghunt102): no round trip of their own
            t["meta"]: [REFS_DIGEST_KEY, *(k for op in ops for k, _ in op.meta_expected)],
            t["checkpoints"]: cps,
            t["tombstones"]: cps,
            t["ledgers"]: [op.sealed_ledger for op in ops if op.sealed_ledger is not None],
            t["objects"]: [k for op in ops for k in op.objects],
        },
        exists={t["objects"]: [k for op in ops for k in op.must_exist]},
    )
    objects = tables["objects"]
    for op in ops:
        # Prefetched as existence: no value fetched.
        apply_write(txn, tables, op, layout=layout, exists=lambda key: txn.has(key, db=objects))


def abort_again(txn: PgTxn, release: Callable[[Any, bool], None]) -> None:
    """End ``txn`` after its ``abort()`` was interrupted (a second interrupt, entering it or
    in it): all of it again, and a connection it still holds (cut short after it marked
    itself done) closed, never pooled. Left held, its session kept the txn open and the
    store's advisory writer lock with it: every later writer of every process waited for
    ever (audit44)."""
    txn.abort()  # a no-op once it marked itself done
    conn, txn._conn = txn._conn, None
    if conn is not None:
        release(conn, True)
