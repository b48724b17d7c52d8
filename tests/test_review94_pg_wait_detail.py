"""review94: what a PostgreSQL store says when no connection came within its wait.

review93 made the wait for a pool connection (``pg_pool.take``) a series of getconn calls
of at most ``LOST_SLICE`` (0.5 s) each, ending lost reads between them. The error a wait
that ran out raised kept the last slice's PoolTimeout as its detail: "no connection to
the server within 30 s", got "couldn't get a connection after 0.37 sec", an operator
told two waits, the second false. The detail now names the whole wait (since review94's
tests/test_review94_pg_wait_order.py a wait is one request again: psycopg's own timeout).
"""

from __future__ import annotations

import re

import pytest
from pg_cluster import Cluster, fresh_url, pg_cluster  # noqa: F401 - fixture

import cpstore
from cpstore.errors import StoreConnectionError
from cpstore.store.pg_backend import PgBackend


@pytest.mark.parametrize("wait", [0.3, 1.2])
def test_a_wait_that_ran_out_names_the_whole_wait(
    pg_cluster: Cluster,  # noqa: F811
    wait: float,
) -> None:
    st = cpstore.open(fresh_url(pool_max="1"))
    backend = st._backend
    assert isinstance(backend, PgBackend)
    try:
        cid = str(st.recorder("r").checkpoint(0, {"a": 1}))
        # the pool's one connection, held by this read
        with st.read(cid), pytest.raises(StoreConnectionError) as caught:
            backend._acquire(wait)
        seconds = [float(s) for s in re.findall(r"after ([0-9.]+) sec", str(caught.value.got))]
        assert seconds, caught.value.got
        # before: the last slice's (at most 0.5 s) for the 1.2 s wait
        assert seconds == [pytest.approx(wait, abs=0.01)], caught.value.got
    finally:
        st.close()
