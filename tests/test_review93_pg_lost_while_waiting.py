"""review93: a PostgreSQL read lost while another thread waits for its connection.

review90 made a lost read's connection come back at the next connection taken from the
pool (``_acquire`` ends the lost reads first). A thread already waiting for a connection
had looked before the read was lost: with the pool's connections held by reads that were
then handed over as lost (their holders' finalizers) and their owners idle, nothing ended
them, and the waiting thread failed after 30 s (StoreConnectionError) with a connection
free to take. The wait now looks for lost reads every ``pg_pool.LOST_SLICE`` seconds (since
review94: a thread the finalizer starts while threads wait, ``pg_pool.end_lost_for_waiters``).
"""

from __future__ import annotations

import threading
from collections.abc import Generator
from typing import Any

from pg_cluster import Cluster, fresh_url, pg_cluster  # noqa: F401 - fixture

import cpstore
from cpstore.store.pg_backend import PgBackend


def _waiting(backend: PgBackend, count: int) -> bool:
    pool: Any = backend._pool
    return bool(pool.asking >= count)


def test_threads_waiting_for_a_connection_a_lost_read_held_get_it(
    pg_cluster: Cluster,  # noqa: F811
) -> None:
    st = cpstore.open(fresh_url(pool_max="1"))
    backend = st._backend
    assert isinstance(backend, PgBackend)
    try:
        cid = str(st.recorder("r").checkpoint(0, {"a": 1}))

        def block() -> Generator[Any, None, None]:
            with st.read(cid) as cp:
                yield cp
                cp.state()

        gen = block()
        holder = next(gen)  # the pool's one connection, held by this read
        got: list[Any] = []
        errors: list[BaseException] = []

        def worker() -> None:
            try:
                with st.read(cid) as cp:
                    got.append(cp.state())
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=worker) for _ in range(3)]
        for thread in threads:
            thread.start()
        while not _waiting(backend, len(threads)):  # each looked for lost reads: none yet
            threading.Event().wait(0.01)
        holder.__del__()  # handed over as lost (the order a cycle's collection may pick)
        gen.close()  # its exit returns: the read is the store's to end
        del holder, gen
        for thread in threads:
            thread.join()
        assert errors == []  # before: StoreConnectionError after 30 s, each
        assert got == [{"a": 1}] * len(threads)
        stats = backend._pool.get_stats()
        assert stats["pool_size"] - stats.get("pool_available", 0) == 0  # none checked out
    finally:
        st.close()
