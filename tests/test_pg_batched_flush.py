"""Batched mode on PostgreSQL: two threads' flushes commit their batches in queue order.

The queue is taken only once the flushing thread holds the store's advisory
writer lock (PgTxn.begin_now), as on LMDB (the same scenario,
``check_flushes_commit_in_queue_order``, runs on LMDB in tests/test_heap_audit.py):
taken before, a later batch could commit first, and the checkpoint in it that
follows one still queued in the earlier batch failed its ref compare-and-set,
dropping that whole batch on a conflict no other writer caused.
"""

from __future__ import annotations

import pytest
from pg_cluster import Cluster, fresh_url, pg_cluster, pg_url  # noqa: F401 - fixtures
from test_heap_audit import check_flushes_commit_in_queue_order

import cpstore


def test_two_threads_flushing_batched_queues_commit_them_in_queue_order(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A flush starts; another thread queues the next checkpoint and flushes before the
    first flush's txn begins. Both land, in order, and nothing is left queued."""
    with cpstore.open(pg_url, durability="batched", batch_size=100) as st:
        check_flushes_commit_in_queue_order(st, monkeypatch)
