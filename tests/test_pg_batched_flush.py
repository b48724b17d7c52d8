"""Batched mode on PostgreSQL: two threads' flushes commit their batches in queue order.

The queue is taken only once the flushing thread holds the store's advisory
writer lock (PgTxn.begin_now), as on LMDB (tests/test_heap_audit.py has the
LMDB twin): taken before, a later batch could commit first, and the checkpoint
in it that follows one still queued in the earlier batch failed its ref
compare-and-set, dropping that whole batch on a conflict no other writer caused.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from pg_cluster import Cluster, fresh_url, pg_cluster, pg_url  # noqa: F401 - fixtures

import cpstore


def test_two_threads_flushing_batched_queues_commit_them_in_queue_order(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A flush starts; another thread queues the next checkpoint and flushes before the
    first flush's txn begins. Both land, in order, and nothing is left queued."""
    with cpstore.open(pg_url, durability="batched", batch_size=100) as st:
        backend = st.backend
        rec = st.recorder("r")
        first = rec.checkpoint(0, {"a": 0})
        real = type(backend).write_txn
        second: list[str] = []
        errors: list[BaseException] = []

        def late_write_txn(self: Any, fn: Any) -> Any:
            if not second:  # the other thread queues and flushes in between

                def queue_and_flush() -> None:
                    try:
                        second.append(rec.checkpoint(1, {"a": 1}))
                        st.flush()
                    except BaseException as exc:  # reported below
                        errors.append(exc)

                worker = threading.Thread(target=queue_and_flush)
                worker.start()
                worker.join(timeout=60)
            return real(self, fn)

        monkeypatch.setattr(type(backend), "write_txn", late_write_txn)
        st.flush()
        monkeypatch.undo()
        assert errors == []
        assert st.pending == 0
        assert st.ref("r") == second[0]
        assert [m.id for m in st.history("r")] == [second[0], first]
