"""pgcount72's trigger functions run with their owner's rights (SECURITY DEFINER): no
other role may attach them to a table of its own.

A trigger function finds the counts table through the schema of the table it fired on.
Functions are executable by PUBLIC unless revoked, and ``CREATE TRIGGER`` needs only
``EXECUTE`` on the function and a table of one's own: a role granted no more than
``USAGE`` on the store's schema (a read-only dashboard role) could attach one to a temp
table of its own beside a ``counts`` table carrying its own trigger, and an insert then ran
that trigger with the store owner's rights (a superuser's, often). Now ``EXECUTE`` is
revoked from PUBLIC: the triggers on the store's refs table still fire for every writer
(the privilege is checked when a trigger is made, not when it fires).
"""

from __future__ import annotations

import psycopg
import pytest
from pg_cluster import cluster, pg_cluster, pg_url  # noqa: F401 - fixtures
from pg_counts import kept_and_rows
from test_pgcount72_upgrade import _role_url

import cpstore
from cpstore.store.pg_count import TRIGGERS


def test_a_read_only_role_cannot_attach_the_count_functions_to_its_own_table(
    pg_url: str,
) -> None:
    with cpstore.open(pg_url) as st:
        st.recorder("r").checkpoint(0, {"a": 0})
    schema = pg_url.split("schema=")[1]
    reader = _role_url(
        pg_url, "cpstore_c72_reader", ["GRANT SELECT ON ALL TABLES IN SCHEMA {s} TO {role}"]
    )
    conninfo = cpstore.store.pg_open.parse_url(reader).conninfo
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute("CREATE TEMP TABLE refs (k bytea)")
        conn.execute("CREATE TEMP TABLE counts (name text, n bigint)")
        for name in TRIGGERS:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(
                    f'CREATE TRIGGER "{name}" AFTER INSERT ON refs REFERENCING NEW TABLE AS '
                    f'changed FOR EACH STATEMENT EXECUTE FUNCTION "{schema}"."{name}"()'
                )
    # the store's own triggers still count for a writer granted nothing on the functions
    writer = _role_url(
        pg_url,
        "cpstore_c72_plainwriter",
        ["GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {s} TO {role}"],
    )
    with cpstore.open(writer) as st:
        st.recorder("s").checkpoint(0, {"a": 0})
    assert kept_and_rows(pg_url) == (2, 2)
