"""review91: a PostgreSQL checkpoint view collected in a cycle, its finalizer and its
block's exit run in either order (PEP 442 leaves it undefined).

97175c7 made ``CheckpointView.__del__`` forget its txn as it hands the read over
(``lost_read``), so an exit run after it returns and only the next connection taken
from the pool (``PgBackend._end_lost``) ends the read. Either order must end the read
exactly once: its pooled connection back, none checked out, the store usable after more
such reads than the pool holds."""

from __future__ import annotations

import gc
from collections.abc import Generator
from typing import Any

import pytest
from pg_cluster import Cluster, fresh_url, pg_cluster  # noqa: F401 - fixture

import cpstore
from cpstore.store.pg_backend import PgBackend


def _suspended(st: Any, cid: str) -> tuple[Generator[Any, None, None], Any]:
    def block() -> Generator[Any, None, None]:
        with st.read(cid) as cp:
            yield cp
            cp.state()

    gen = block()
    return gen, next(gen)


@pytest.mark.parametrize("finalizer_first", [True, False])
def test_either_order_ends_the_read_once(
    pg_cluster: Cluster,  # noqa: F811
    finalizer_first: bool,
) -> None:
    st = cpstore.open(fresh_url(pool_max="2"))
    try:
        backend = st._backend
        assert isinstance(backend, PgBackend)
        cid = str(st.recorder("r").checkpoint(0, {"a": 1}))
        for _ in range(4):  # twice pool_max: a connection kept out would exhaust it
            gen, view = _suspended(st, cid)
            if finalizer_first:
                view.__del__()  # the view's tp_finalize: its txn handed over
                gen.close()  # the generator's: the block's exit, which returns
            else:
                gen.close()  # the exit ends the read
                view.__del__()  # nothing left to hand over
            del gen, view
            gc.collect()
            with st.read(cid) as cp:  # takes a connection: lost reads end first
                assert cp.state() == {"a": 1}
        assert list(backend._lost) == []
        stats = backend._pool.get_stats()
        assert stats["pool_size"] - stats.get("pool_available", 0) == 0  # none checked out
    finally:
        st.close()
