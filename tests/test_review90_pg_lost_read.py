"""review90: a PostgreSQL read handed over as lost gives its pooled connection back.

A ``store.read()`` block whose ``CheckpointView.__exit__`` an interrupt (a signal
handler's exception) cut short at its start never ends its read txn; the view, freed
with the exception, hands it over (intr89's ``__del__`` -> ``lost_read``), which did
nothing on PostgreSQL. The txn's pooled connection stayed checked out for good: after
``pool_max`` such reads every later use of the store waited 30 s for a connection and
failed (StoreConnectionError). Now the next connection taken from the pool first aborts
the lost reads, which gives their connections back."""

from __future__ import annotations

import gc
from typing import Any

from pg_cluster import Cluster, fresh_url, pg_cluster  # noqa: F401 - fixture
from test_begin_interrupted import landing_at_start

import cpstore
from cpstore.store.pg_backend import PgBackend


def test_reads_lost_at_their_exit_leave_the_pool_usable(pg_cluster: Cluster) -> None:  # noqa: F811
    st = cpstore.open(fresh_url(pool_max="2"))
    try:
        cid = str(st.recorder("r").checkpoint(0, {"a": 1}))

        def block() -> Any:
            with st.read(cid) as cp:
                return cp.state()

        for _ in range(4):  # twice pool_max: before, the third waited 30 s and failed
            assert landing_at_start("CheckpointView.__exit__", block)
            gc.collect()
        assert block() == {"a": 1}
        backend = st._backend
        assert isinstance(backend, PgBackend)
        stats = backend._pool.get_stats()
        assert stats["pool_size"] - stats.get("pool_available", 0) == 0  # none checked out
    finally:
        st.close()


def test_a_close_ends_the_reads_lost_since_the_last_connection_taken(
    pg_cluster: Cluster,  # noqa: F811
) -> None:
    """With no use of the store after it, a lost read's session ends with the close (its
    REPEATABLE READ snapshot held on the server, idle in transaction, until then)."""
    st = cpstore.open(fresh_url())
    backend = st._backend
    assert isinstance(backend, PgBackend)
    cid = str(st.recorder("r").checkpoint(0, {"a": 1}))

    def block() -> Any:
        with st.read(cid) as cp:
            return cp.state()

    assert landing_at_start("CheckpointView.__exit__", block)
    gc.collect()
    conns = [txn._conn for txn in backend._lost]  # type: ignore[attr-defined]
    assert len(conns) == 1 and conns[0] is not None and not conns[0].closed
    st.close()
    assert list(backend._lost) == []  # before: kept, its session open
    assert conns[0].closed
