"""PostgreSQL: an operation waiting for a pooled connection when another thread closes
the store is told the store was closed (StoreClosedError), not that the connection was
lost and "the next operation reconnects" (audit48's finding): the pool's PoolClosed was
taken for a lost connection."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from pg_cluster import fresh_url, pg_cluster  # noqa: F401 - the fixture

import cpstore
from cpstore.errors import StoreClosedError, StoreError
from cpstore.store.pg_backend import PgBackend


def test_an_operation_waiting_for_a_connection_is_told_the_store_closed(
    pg_cluster: object,
) -> None:
    st = cpstore.open(fresh_url(pool_max="1"))
    cid = st.recorder("r").checkpoint(0, {"a": 1})
    backend = st._backend
    assert isinstance(backend, PgBackend)
    told: list[BaseException] = []
    waiting = threading.Event()
    real_acquire = backend._acquire

    def acquire(wait: float = 30.0) -> Any:
        if threading.current_thread().name == "waiter":
            waiting.set()
        return real_acquire(wait)

    backend._acquire = acquire  # type: ignore[method-assign]

    def waiter() -> None:
        try:
            st.ref("r")
        except BaseException as exc:  # what it is told is the point
            told.append(exc)

    with st.read(cid):  # the pool's one connection, held
        thread = threading.Thread(target=waiter, name="waiter")
        thread.start()
        assert waiting.wait(30)
        closer = threading.Thread(target=st.close)
        closer.start()
        thread.join(30)
    closer.join(30)
    assert not thread.is_alive() and not closer.is_alive()
    assert len(told) == 1, told
    assert isinstance(told[0], StoreClosedError), repr(told[0])  # before: StoreConnectionError
    assert "reconnects" not in str(told[0])


def test_an_operation_on_a_closed_pool_is_store_closed(
    pg_cluster: object,
) -> None:
    """The pool closed under the handle (as close does, the handle's own check passed)."""
    st = cpstore.open(fresh_url())
    st.recorder("r").checkpoint(0, {"a": 1})
    backend = st._backend
    assert isinstance(backend, PgBackend)
    backend._pool.close()
    with pytest.raises(StoreError) as told:
        st.ref("r")
    assert isinstance(told.value, StoreClosedError), repr(told.value)
    backend._closed = True  # nothing left to close
