"""A role that may only read a PostgreSQL store still opens it with the default mode.

The writable open's store id (pg_open.STORE_ID_KEY, 8bbce9d) was an ``INSERT ... ON
CONFLICT DO NOTHING`` into ``meta`` on every writable open: PostgreSQL checks the INSERT
right before it finds the conflict, so a role granted SELECT only (a dashboard, an
auditor's tool calling ``cpstore.open(url)`` to read) was refused "permission denied for
table meta" at the open, where it opened and read before. Now the id is inserted only
when the store has none, and a role that may not insert it leaves the store without one
(its writes are known by the URL, as before store ids).
"""

from __future__ import annotations

import uuid

import psycopg
import pytest
from pg_cluster import Cluster, pg_cluster  # noqa: F401 - fixtures

import cpstore


def _reader(cluster: Cluster, schema: str) -> str:
    role = f"reader_{uuid.uuid4().hex[:8]}"
    admin = f"host={cluster.socket_dir} user=postgres dbname=postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO {role}')
        conn.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA "{schema}" TO {role}')
    return cluster.url(schema).replace("postgresql://postgres@", f"postgresql://{role}@")


@pytest.mark.parametrize("old", [False, True], ids=["with id", "made before store ids"])
def test_a_select_only_role_opens_the_store_and_reads_it(
    pg_cluster: Cluster,  # noqa: F811 - the fixture
    old: bool,
) -> None:
    schema = f"s_{uuid.uuid4().hex[:10]}"
    with cpstore.open(pg_cluster.url(schema)) as st:
        cid = st.recorder("r").checkpoint(0, {"x": 1})
    if old:  # as a store made before store ids
        admin = f"host={pg_cluster.socket_dir} user=postgres dbname=postgres"
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DELETE FROM "{schema}"."meta" WHERE k = %s', (b"store_id",))
    with cpstore.open(_reader(pg_cluster, schema)) as st:  # before: permission denied
        assert st.ref("r") == cid
        assert [m.id for m in st.history("r")] == [cid]
        with pytest.raises(cpstore.CpstoreError):
            st.recorder("r").checkpoint(1, {"x": 2})  # the server refuses the write
