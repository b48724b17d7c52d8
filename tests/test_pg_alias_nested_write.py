"""A write nested on one thread through another spelling of the same store's URL (here an
added ``application_name``; as well another host name for the server, or the parameters in
another order) is refused at once, as through the same URL (audit35). The nested-write
check knew a store by its URL's conninfo: the alias asked for the writer lock its own
thread held on another connection and waited for ever (here until the URL's 3 s
statement timeout, StoreTimeoutError). Now a store is known by its id (``meta/store_id``,
made by the first writable open) and database."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from pg_cluster import cluster, pg_cluster  # noqa: F401 - fixtures

import cpstore
from cpstore.errors import ReentrantWriteError
from cpstore.store import Store
from cpstore.store.pg_backend import PgBackend


@pytest.fixture
def url(request: pytest.FixtureRequest) -> str:
    """A new store whose statements time out after 3 s (a deadlock ends in a timeout)."""
    request.getfixturevalue("pg_cluster")
    return cluster().url(
        f"t_alias_{uuid.uuid4().hex[:12]}", options="-c%20statement_timeout%3D3000"
    )


def _alias(url: str) -> str:
    return url + "&application_name=alias"


def _nested(st: Store, inner: Any) -> BaseException:
    """Run ``inner`` inside a write txn of ``st`` (holding its writer lock); what it raised."""
    head = st.recorder("run").checkpoint(0, {"i": 0})
    raised: list[BaseException] = []

    def prepare(view: Any) -> dict[str, Any]:
        view.latest_decision(head)  # a read: the outer txn now holds the writer lock
        try:
            inner()
        except BaseException as exc:  # what the nested write met is the point
            raised.append(exc)
        return {"outer": True}

    st.append_audit_checked("outer", prepare)
    assert len(raised) == 1
    return raised[0]


def test_an_alias_opened_inside_a_write_is_refused_not_deadlocked(url: str) -> None:
    with cpstore.open(url) as st:

        def inner() -> None:
            with cpstore.open(_alias(url)) as other:
                other.append_audit("inner", {"i": 1})

        raised = _nested(st, inner)
        assert isinstance(raised, ReentrantWriteError), repr(raised)  # before: StoreTimeout
        assert [r.kind for r in st.audit_records()] == ["outer"]


def test_a_write_through_an_open_alias_inside_a_write_is_refused(url: str) -> None:
    with cpstore.open(url) as st, cpstore.open(_alias(url)) as other:
        raised = _nested(st, lambda: other.append_audit("inner", {"i": 1}))
        assert isinstance(raised, ReentrantWriteError), repr(raised)  # before: StoreTimeout
        other.append_audit("after", {})  # outside the outer write: it lands
        assert [r.kind for r in st.audit_records()] == ["outer", "after"]


def test_another_store_of_the_server_is_not_taken_for_the_same(url: str) -> None:
    """Stores of other schemas have their own ids (and locks): a write of one inside a
    write of another runs."""
    other_url = cluster().url(f"t_alias_other_{uuid.uuid4().hex[:12]}")
    with cpstore.open(url) as st, cpstore.open(other_url) as other:

        def inner() -> None:
            other.append_audit("inner", {"i": 1})

        head = st.recorder("run").checkpoint(0, {"i": 0})

        def prepare(view: Any) -> dict[str, Any]:
            view.latest_decision(head)
            inner()
            return {}

        st.append_audit_checked("outer", prepare)
        assert [r.kind for r in other.audit_records()] == ["inner"]
        a, b = st._backend, other._backend
        assert isinstance(a, PgBackend) and isinstance(b, PgBackend)
        assert a._ident != b._ident and a._ident.startswith("store ")


def test_the_id_is_made_once_and_kept(url: str) -> None:
    with cpstore.open(url) as st:
        backend = st._backend
        assert isinstance(backend, PgBackend)
        first = backend._ident
    with cpstore.open(_alias(url)) as again:
        backend = again._backend
        assert isinstance(backend, PgBackend)
        assert backend._ident == first
