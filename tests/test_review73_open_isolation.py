"""review73: the open's transaction (schema check, store id, the kept refs count's install)
runs READ COMMITTED whatever the server's ``default_transaction_isolation``.

The open's transaction began with the server's default isolation. Where a DBA sets it to
``repeatable read`` (or ``serializable``) for the database or role, the snapshot is taken
by the first statement, the advisory writer lock's, before it waits: a writer holding the
lock (another process of an older release, without the count triggers) commits, and the
install's ``count(*)`` then counted the table as it stood before that write. Here the
writer deletes a ref (audited, digest moved): the kept count ended one above the rows,
so a ref deleted later behind cpstore's back no longer refused a create (refs70): a new
recorder on its run started a new root, ``verify()`` reporting only a count drift.
The ``read committed`` case is the guard (it passed before).
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from typing import Any

import psycopg
import pytest
from pg_cluster import cluster, pg_cluster, pg_url  # noqa: F401 - fixtures
from pg_counts import kept_and_rows, sql, strip_counts, triggers

import cpstore
from cpstore.errors import IntegrityError
from cpstore.store import pg_open
from cpstore.store.pg_count import TRIGGERS
from cpstore.store.refs import delete_ref

ROLE = "cpstore_r73_rr"


def _rr_url(url: str) -> str:
    """``url`` as a superuser role whose sessions default to REPEATABLE READ."""
    with psycopg.connect(
        cluster().url().split("?", 1)[0] + "?" + cluster().url().split("?", 1)[1], autocommit=True
    ) as conn:
        if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (ROLE,)).fetchone() is None:
            conn.execute(f"CREATE ROLE {ROLE} LOGIN SUPERUSER")
        conn.execute(f"ALTER ROLE {ROLE} SET default_transaction_isolation = 'repeatable read'")
    return url.replace("postgresql://postgres@", f"postgresql://{ROLE}@")


def _old_writer(url: str, holding: Any, go: Any) -> None:
    """A writer of a release before pgcount72 (it installs nothing): deletes ref b/main in
    a write txn (the digest moved), held open under the writer lock until told."""
    pg_open.install_counts = lambda conn, schema: False  # type: ignore[attr-defined]
    with cpstore.open(url) as st:

        def delete(txn: Any) -> None:
            delete_ref(txn, st.backend.dbs, b"b\0main")
            holding.set()
            go.wait(120)

        st.backend.write_txn(delete)


def _waiting_on_lock(url: str) -> bool:
    return bool(
        sql(
            url,
            "SELECT 1 FROM pg_stat_activity WHERE usename = %s AND wait_event_type = 'Lock' "
            "AND wait_event = 'advisory'",
            (ROLE,),
        )
    )


@pytest.mark.parametrize("level", ["read committed", "repeatable read", "serializable"])
def test_an_install_waiting_on_an_older_writer_counts_what_it_committed(
    pg_url: str, level: str
) -> None:
    with cpstore.open(pg_url) as st:
        for run in "abc":
            st.recorder(run).checkpoint(0, {run: 0})
        c0 = st.ref("c")
    strip_counts(pg_url)
    rr = _rr_url(pg_url)
    sql(pg_url, f"ALTER ROLE {ROLE} SET default_transaction_isolation = '{level}'")
    ctx = multiprocessing.get_context("spawn")
    holding, go = ctx.Event(), ctx.Event()
    writer = ctx.Process(target=_old_writer, args=(pg_url, holding, go))
    writer.start()
    opened: list[Any] = []
    try:
        assert holding.wait(120)
        opener = threading.Thread(target=lambda: opened.append(cpstore.open(rr)))
        opener.start()
        for _ in range(1200):  # its snapshot is taken, its lock is waited for
            if _waiting_on_lock(pg_url):
                break
            time.sleep(0.05)
        assert _waiting_on_lock(pg_url)
        go.set()
        opener.join(120)
    finally:
        go.set()
        writer.join(120)
    assert writer.exitcode == 0
    [st] = opened
    try:
        assert triggers(pg_url) == dict.fromkeys(TRIGGERS, "O")
        assert kept_and_rows(pg_url) == (2, 2)  # was (3, 2): counted before the delete
        sql(pg_url, "DELETE FROM {s}.refs WHERE k = %s", (b"c\0main",))  # behind its back
        with pytest.raises(IntegrityError, match="fewer refs"):
            st.recorder("c").checkpoint(1, {"new": "root"})
        assert st.verify().counts["refs"] == 1
        assert not [p for p in st.verify().problems if p.where == "counts/refs"]
        st.repair_ref("c", "main", c0, operator="o", reason="put back")
    finally:
        st.close()
        sql(pg_url, f"ALTER ROLE {ROLE} RESET default_transaction_isolation")
