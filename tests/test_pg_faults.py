"""Faults on the PostgreSQL backend: a server crash mid-commit, a dropped connection, a timeout.

Each gives a clear cpstore error (StoreConnectionError, StoreTimeoutError),
leaves nothing partial (PostgreSQL commits whole or not at all), and the next
operation reconnects on its own. The server is this process's test cluster,
stopped with ``pg_ctl stop -m immediate`` (no shutdown checkpoint: WAL replay
on start, as after a crash) and started again.
"""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import psycopg
import pytest
from pg_cluster import Cluster, pg_cluster, pg_url  # noqa: F401 - fixtures

import cpstore
from cpstore.errors import StoreConnectionError, StoreTimeoutError
from cpstore.store.pg_open import lock_key, parse_url
from cpstore.store.pg_txn import PgTxn


def _terminate_all(url: str) -> int:
    """pg_terminate_backend every other session of the database; how many."""
    with psycopg.connect(parse_url(url).conninfo, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND backend_type = 'client backend'"
        ).fetchall()
    return len(rows)


class TestServerCrash:
    def test_a_crash_in_the_middle_of_a_commit_is_a_clear_error_and_nothing_partial(
        self, pg_url: str, pg_cluster: Cluster, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Immediate shutdown after the writes are sent, before COMMIT: error, then no trace."""
        with cpstore.open(pg_url) as store:
            rec = store.recorder("run")
            before = rec.checkpoint(0, {"i": 0})
            real = PgTxn.commit

            def crash_first(txn: PgTxn) -> None:
                if txn.write:
                    monkeypatch.setattr(PgTxn, "commit", real)
                    txn.stat(store.backend.db("objects"))  # the writes reach the server
                    pg_cluster.stop("immediate")
                real(txn)

            monkeypatch.setattr(PgTxn, "commit", crash_first)
            try:
                with pytest.raises(StoreConnectionError) as err:
                    rec.checkpoint(1, {"i": 1, "big": "x" * 10_000})
            finally:
                pg_cluster.start()
            assert "committed whole or not at all" in str(err.value)
            # The next operation reconnects; the crashed commit left nothing.
            assert store.ref("run") == before
            assert [m.step for m in store.history("run")] == [0]
            report = store.verify()
            assert report.ok and report.counts["checkpoints"] == 1
            after = store.recorder("run").checkpoint(1, {"i": 1})
            assert store.ref("run") == after

    def test_a_writer_process_through_a_crash_loses_no_acknowledged_checkpoint(
        self, pg_url: str, pg_cluster: Cluster
    ) -> None:
        """A child records in a loop; the server crashes and restarts; every acked id is stored."""
        child = subprocess.Popen(
            [sys.executable, "-c", _CRASH_WRITER, pg_url],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        acked: list[str] = []
        errors = 0
        while len(acked) < 20:
            line = child.stdout.readline()
            assert line, "the writer ended early"
            if line.startswith("ack "):
                acked.append(line.split()[1])
        pg_cluster.restart("immediate")
        deadline = time.monotonic() + 20
        after_restart = 0
        while after_restart < 20 and time.monotonic() < deadline:
            line = child.stdout.readline()
            if line.startswith("ack "):
                acked.append(line.split()[1])
                after_restart += 1
            elif line.startswith("error "):
                errors += 1
                lost = ("StoreConnectionError", "CommitLostError", "ConflictError")
                assert line.split()[1] in lost, line
        child.kill()
        child.wait(timeout=10)
        assert after_restart == 20  # the writer reconnected on its own
        with cpstore.open(pg_url) as store:
            stored = {m.id for m in store.history("run")}
            assert set(acked) <= stored
            assert store.verify().ok


_CRASH_WRITER = """
import sys, time
import cpstore
from cpstore.errors import StoreError
with cpstore.open(sys.argv[1]) as st:
    i = 0
    while True:
        try:
            cid = st.recorder("run").checkpoint(i, {"i": i})
            print("ack", cid, flush=True)
            i += 1
        except StoreError as e:
            print("error", type(e).__name__, flush=True)
            time.sleep(0.05)
"""


class TestDroppedConnection:
    def test_a_connection_dropped_inside_a_write_is_a_clear_error_and_nothing_lands(
        self, pg_url: str
    ) -> None:
        """pg_terminate_backend mid-transaction: StoreConnectionError, no partial write."""
        with cpstore.open(pg_url) as store:
            store.put_object(b"kept")

            def write(txn: Any) -> None:
                txn.get(b"k" * 16, db=store.backend.db("objects"))  # begun: lock held
                txn.put(b"k" * 16, b"lost", db=store.backend.db("objects"))
                _terminate_all(pg_url)
                txn.stat(store.backend.db("objects"))

            with pytest.raises(StoreConnectionError):
                store.backend.write_txn(write)
            assert not store.has_object(b"k" * 16)  # the next operation reconnects
            assert store.verify().ok

    def test_idle_pooled_connections_killed_between_operations_are_replaced(
        self, pg_url: str
    ) -> None:
        """Every pooled connection terminated while idle: the next read and write just work."""
        with cpstore.open(pg_url) as store:
            cid = store.recorder("run").checkpoint(0, {"a": 1})
            assert _terminate_all(pg_url) >= 1
            assert store.ref("run") == cid
            _terminate_all(pg_url)
            assert store.recorder("run").checkpoint(1, {"a": 2})


class TestStatementTimeout:
    def test_a_statement_timeout_is_a_clear_error_and_the_next_write_succeeds(
        self, pg_cluster: Cluster
    ) -> None:
        """The writer lock held past statement_timeout: StoreTimeoutError each time, no leak."""
        url = pg_cluster.url(
            f"t_timeout_{int(time.time() * 1000) % 10**9}",
            options="-c%20statement_timeout%3D300",
            pool_max="2",
        )
        with cpstore.open(url) as store:
            rec = store.recorder("run")
            first = rec.checkpoint(0, {"i": 0})
            schema = parse_url(url).schema
            with psycopg.connect(parse_url(url).conninfo, autocommit=True) as holder:
                holder.execute("SELECT pg_advisory_lock(%s)", (lock_key(schema),))
                for _ in range(3):  # more failures than the pool has connections
                    with pytest.raises(StoreTimeoutError):
                        rec.checkpoint(1, {"i": 1})
                holder.execute("SELECT pg_advisory_unlock(%s)", (lock_key(schema),))
            assert store.ref("run") == first
            second = store.recorder("run").checkpoint(1, {"i": 1})
            assert [m.id for m in store.history("run")] == [second, first]
