"""Audit 35: a write txn nested on one thread, on PostgreSQL, is refused at once as on LMDB.

The outer write txn holds the store's advisory writer lock on one pooled connection; a
write txn opened inside it on the same thread (a ``prepare`` callback that appends,
a recorder checkpoint inside ``write_txn``, a second handle on the same store) asks for
the same lock on another connection and waits for the first, which waits for it: a
deadlock PostgreSQL cannot see (the cycle closes in the client). It waited for ever
(or until ``statement_timeout``, a ``StoreTimeoutError`` that named no cause); LMDB
refuses it at once. Now it is a ``StoreError`` at once, nothing of either txn written.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from pg_cluster import cluster, pg_cluster  # noqa: F401 - fixtures

import cpstore
from cpstore.errors import StoreError, StoreTimeoutError
from cpstore.store import Store


@pytest.fixture
def url(request: pytest.FixtureRequest) -> str:
    """A new store whose statements time out after 3 s (a deadlock ends in a timeout)."""
    request.getfixturevalue("pg_cluster")
    return cluster().url(
        f"t_a35_nested_{uuid.uuid4().hex[:12]}",
        options="-c%20statement_timeout%3D3000",
    )


def _inner_append(st: Store) -> None:
    st.append_audit("inner", {"i": 1})


def _inner_checkpoint(st: Store) -> None:
    st.recorder("run").checkpoint(1, {"i": 2})


def _other_handle(st: Store) -> None:
    with cpstore.open(st.path) as other:
        other.append_audit("inner", {"i": 3})


@pytest.mark.parametrize("inner", [_inner_append, _inner_checkpoint, _other_handle])
def test_a_write_nested_inside_a_write_on_one_thread_is_refused_not_deadlocked(
    url: str, inner: Callable[[Store], None]
) -> None:
    with cpstore.open(url) as st:
        head = st.recorder("run").checkpoint(0, {"i": 0})

        def prepare(view: Any) -> dict[str, Any]:
            view.latest_decision(head)  # a read: the outer txn now holds the writer lock
            inner(st)
            return {"outer": True}

        with pytest.raises(StoreError) as err:
            st.append_audit_checked("outer", prepare)
        assert not isinstance(err.value, StoreTimeoutError), err.value  # not a deadlock
        assert "nested" in err.value.what
        assert st.ref("run") == head  # nothing of the inner write landed
        assert list(st.audit_records()) == []  # nor of the outer one
        st.append_audit("after", {"ok": True})  # the store takes writes again
        assert [r.kind for r in st.audit_records()] == ["after"]


def test_writes_one_after_another_and_on_other_threads_still_run(url: str) -> None:
    """The refusal is only for nesting: a write after a write, and one on another thread
    while a write is open here (it waits for the lock, then lands), both work."""
    with cpstore.open(url) as st:
        st.append_audit("a", {})
        st.append_audit("b", {})
        done: list[str] = []

        def prepare(view: Any) -> dict[str, Any]:
            view.latest_decision("00" * 16)  # holds the lock
            t = threading.Thread(target=lambda: done.append(st.append_audit("c", {}).kind))
            t.start()
            t.join(0.3)  # waits on the lock: not refused
            assert done == []
            threads.append(t)
            return {}

        threads: list[threading.Thread] = []
        st.append_audit_checked("outer", prepare)
        threads[0].join(30)
        assert done == ["c"]
        assert [r.kind for r in st.audit_records()] == ["a", "b", "outer", "c"]
