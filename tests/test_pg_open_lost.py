"""An open whose connection the server drops before the schema check (chaos67).

Found by the server-crash chaos variant (seed 67205): a worker's open, racing an
immediate server stop, raised ``ServerVersionError`` "PostgreSQL 0.0.0 is older than
cpstore supports". ``write_identity`` read the store id on the open's connection and
took any psycopg error for "no id yet", so a lost connection went unseen; the version
check that follows reads ``conn.info.server_version``, which libpq reports as 0 on a
broken connection. The open now says the connection was lost (StoreConnectionError),
as every other operation meeting a server restart does (docs/store.md, "Faults").

The server's own termination (``pg_terminate_backend`` of the open's session, from
another session) is real; only its moment is chosen, by wrapping the open's connect.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest
from pg_cluster import Cluster, fresh_url, pg_cluster  # noqa: F401 - fixtures

import cpstore
from cpstore.errors import ServerVersionError, StoreConnectionError
from cpstore.store import pg_backend, pg_pool
from cpstore.store.pg_open import parse_url, prepare_schema


def _dying_connect(cluster: Cluster) -> Any:
    """pg_backend.connect, whose connection the server has terminated when it returns."""
    real = pg_pool.connect  # what pg_backend imported as its connect

    def connect(conninfo: str, where: str) -> psycopg.Connection[Any]:
        conn = real(conninfo, where)
        pid = conn.info.backend_pid
        admin = f"host={cluster.socket_dir} user=postgres dbname=postgres"
        with psycopg.connect(admin, autocommit=True) as other:
            other.execute("SELECT pg_terminate_backend(%s)", (pid,))
            for _ in range(500):
                row = other.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,))
                if row.fetchone() is None:
                    break
                time.sleep(0.01)
        return conn

    return connect


@pytest.mark.parametrize("readonly", [False, True])
def test_an_open_whose_connection_is_terminated_is_a_connection_error(
    pg_cluster: Cluster, monkeypatch: pytest.MonkeyPatch, readonly: bool
) -> None:
    """The store exists (it has an id to read); the open's session is terminated before
    its first statement: StoreConnectionError, never a version refusal of "0.0.0"."""
    url = fresh_url()
    with cpstore.open(url) as st:
        st.recorder("r").checkpoint(0, {"a": 1})
    monkeypatch.setattr(pg_backend, "connect", _dying_connect(pg_cluster))
    with pytest.raises(StoreConnectionError) as caught:
        cpstore.open(url, readonly=readonly)
    assert not isinstance(caught.value, ServerVersionError)
    monkeypatch.undo()
    with cpstore.open(url, readonly=True) as st:  # the server and the store are fine
        assert st.ref("r") is not None


def test_the_schema_check_on_a_lost_connection_is_a_connection_error(
    pg_cluster: Cluster,
) -> None:
    """Whatever path reaches the schema check with a lost connection (libpq then reports
    server version 0), the open says the connection was lost, not "PostgreSQL 0.0.0"."""
    url = parse_url(fresh_url())
    conn = _dying_connect(pg_cluster)(url.conninfo, url.shown)
    with pytest.raises(psycopg.OperationalError):
        conn.execute("SELECT 1")  # meets the terminated session: psycopg marks it broken
    assert conn.broken and conn.info.server_version == 0  # what the version check read
    with pytest.raises(StoreConnectionError) as caught:
        prepare_schema(conn, url, readonly=False, create=True)
    assert not isinstance(caught.value, ServerVersionError)
    conn.close()
