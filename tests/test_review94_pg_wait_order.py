"""review94: threads waiting for a PostgreSQL pool connection are served in the order they asked.

review93 made the wait (``pg_pool.take``) a series of getconn calls of 0.5 s each, lost
reads ended between them. psycopg_pool serves its waiters first come first served, and
each new call queued the waiter again at the tail: one that asked first was served after
one that asked later, and under load a waiter was starved (pool_max=1, 16 threads each
holding the connection 60 ms for 12 s: one thread served once, waiting 12.7 s, beside
threads served 23 times; one request per wait: each served 13 or 14 times, no wait over
0.95 s). A wait is one request again; a read lost while threads wait is ended by a thread
its finalizer starts (``pg_pool.end_lost_for_waiters``;
tests/test_review93_pg_lost_while_waiting.py covers that).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from pg_cluster import Cluster, fresh_url, pg_cluster  # noqa: F401 - fixture

import cpstore
from cpstore.store.pg_backend import PgBackend


def _until(check: Any, bound: float) -> bool:
    end = time.monotonic() + bound
    while not check():
        if time.monotonic() >= end:
            return False
        time.sleep(0.001)
    return True


def test_the_thread_that_asked_first_is_served_first(
    pg_cluster: Cluster,  # noqa: F811
) -> None:
    st = cpstore.open(fresh_url(pool_max="1"))
    backend = st._backend
    assert isinstance(backend, PgBackend)
    pool: Any = backend._pool
    asked: list[str] = []
    real = pool.getconn

    def recorded(*args: Any, **kwargs: Any) -> Any:
        asked.append(threading.current_thread().name)
        return real(*args, **kwargs)

    pool.getconn = recorded
    try:
        cid = str(st.recorder("r").checkpoint(0, {"a": 1}))
        served: list[str] = []
        errors: list[BaseException] = []

        def worker() -> None:
            try:
                with st.read(cid) as cp:
                    served.append(threading.current_thread().name)
                    cp.state()
            except BaseException as exc:
                errors.append(exc)

        first = threading.Thread(target=worker, name="first")
        second = threading.Thread(target=worker, name="second")
        with st.read(cid):  # the pool's one connection, held until both wait
            asked.clear()
            first.start()
            assert _until(lambda: "first" in asked and pool.asking >= 1, 10.0)
            time.sleep(0.2)  # the second asks well after the first
            second.start()
            assert _until(lambda: "second" in asked and pool.asking >= 2, 10.0)
            # Before: the first asked again at the tail, behind the second, within 0.5 s
            # of its first request; let go of the connection as soon as it has. One
            # request per wait: it never asks again (bounded look).
            _until(lambda: asked.count("first") >= 2, 1.5)
        first.join()
        second.join()
        assert errors == []
        assert served == ["first", "second"], asked
    finally:
        pool.getconn = real
        st.close()
