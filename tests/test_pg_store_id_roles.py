"""PostgreSQL: the store id (meta/store_id, the nested-write check's identity) never stands
in the way of an open that worked before it: a role that may read the store but not write
it opens it writable as before (its writes then refused StoreReadOnlyError), with or without
an id already made; a store made by a release before store ids gets its id at the next
writable open by a role that may write."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from pg_cluster import cluster, pg_cluster  # noqa: F401 - fixtures

import cpstore
from cpstore.errors import StoreReadOnlyError
from cpstore.store.pg_backend import PgBackend
from cpstore.store.pg_open import STORE_ID_KEY


def _reader_url(schema: str) -> str:
    """A URL of ``schema``'s store as a role that may only read it."""
    role = "cpstore_reader"
    admin = cluster().url().split("?", 1)
    conninfo = admin[0] + "?" + admin[1]
    with psycopg.connect(conninfo, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone() is None:
            conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO {role}')
        conn.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA "{schema}" TO {role}')
    return cluster().url(schema).replace("postgresql://postgres@", f"postgresql://{role}@")


@pytest.mark.parametrize("with_id", [True, False], ids=["id", "no-id"])
def test_a_read_only_role_opens_writable_as_before(
    pg_cluster: object,
    with_id: bool,
) -> None:
    schema = f"t_roles_{uuid.uuid4().hex[:12]}"
    with cpstore.open(cluster().url(schema)) as st:
        cid = st.recorder("r").checkpoint(0, {"a": 1})
    if not with_id:  # as a release before store ids left it
        with psycopg.connect(cluster().url(), autocommit=True) as conn:
            conn.execute(f'DELETE FROM "{schema}"."meta" WHERE k = %s', (STORE_ID_KEY,))
    with cpstore.open(_reader_url(schema)) as ro:  # before the id: opened; must still
        assert ro.ref("r") == cid
        with pytest.raises(StoreReadOnlyError):
            ro.recorder("r").checkpoint(1, {"a": 2})


def test_a_store_without_an_id_gets_one_at_the_next_writable_open(
    pg_cluster: object,
) -> None:
    schema = f"t_roles_{uuid.uuid4().hex[:12]}"
    with cpstore.open(cluster().url(schema)) as st:
        st.recorder("r").checkpoint(0, {"a": 1})
    with psycopg.connect(cluster().url(), autocommit=True) as conn:
        conn.execute(f'DELETE FROM "{schema}"."meta" WHERE k = %s', (STORE_ID_KEY,))
    with cpstore.open(cluster().url(schema)) as again:
        backend = again._backend
        assert isinstance(backend, PgBackend)
        assert backend._ident.startswith("store ")
