"""PostgreSQL: two threads closing one store handle at once — one closes, the other waits.

``PgBackend.close`` looked at ``_closed``, flushed (batched mode), then set it and closed
the pool, as LMDB's did before audit39 (tests/test_audit39_close_twice_at_once.py). A
second close while the first was committing the batch passed the same look, found the
queue empty (the batch already in flight) and closed the pool and returned: its caller
was told the store was closed, every checkpoint flushed, while the batch was not yet
committed (and might still fail). Now the first close does the work and the other waits
for it, then returns, as on LMDB.
"""

from __future__ import annotations

import threading
from typing import Any

from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures

import cpstore
from cpstore.store.pg_backend import PgBackend


def test_a_second_close_returns_only_once_the_first_closes_batch_is_committed(
    pg_url: str,
) -> None:
    st = cpstore.open(pg_url, durability="batched", batch_size=100)
    reader = cpstore.open(pg_url)
    backend = st._backend
    assert isinstance(backend, PgBackend)
    cid = str(st.recorder("a").checkpoint(0, {"a": 0}))  # queued only
    in_commit = threading.Event()
    second_returned = threading.Event()
    apply_all = backend._apply_all

    def apply_all_then_wait(txn: Any, ops: Any) -> None:
        # The batch is taken and its txn holds the writer lock: let the other close run.
        in_commit.set()
        # The fixed code: the other close waits for this one, so this wait runs out.
        second_returned.wait(3)
        apply_all(txn, ops)

    backend._apply_all = apply_all_then_wait  # type: ignore[method-assign]
    errors: list[BaseException] = []
    seen: list[str | None] = []

    def first() -> None:
        try:
            st.close()
        except BaseException as exc:  # reported below
            errors.append(exc)

    def second() -> None:
        try:
            st.close()
            seen.append(reader.ref("a"))  # what a close that returned promises
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            second_returned.set()

    one = threading.Thread(target=first)
    one.start()
    assert in_commit.wait(60), "the first close never reached its commit"
    two = threading.Thread(target=second)
    two.start()
    for th in (one, two):
        th.join(60)
        assert not th.is_alive()
    reader_ref = reader.ref("a")
    reader.close()
    assert not errors, errors
    assert seen == [cid], f"the second close returned before the batch committed: {seen}"
    assert reader_ref == cid
    assert backend.closed


def test_a_close_from_the_closing_thread_itself_returns(
    pg_url: str,
) -> None:
    # A close reached again on the closing thread (a finalizer run inside its flush)
    # never waits for itself.
    st = cpstore.open(pg_url, durability="batched", batch_size=100)
    backend = st._backend
    assert isinstance(backend, PgBackend)
    st.recorder("a").checkpoint(0, {"a": 0})
    flush = backend.flush
    inner: list[bool] = []

    def flush_and_close_again() -> None:
        flush()
        st.close()  # the same thread's close is under way: returns at once
        inner.append(backend.closed)

    backend.flush = flush_and_close_again  # type: ignore[method-assign]
    st.close()
    assert inner == [False]  # the outer close had not finished when the inner returned
    assert backend.closed
