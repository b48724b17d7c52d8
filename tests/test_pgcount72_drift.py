"""pgcount72: what evades the kept refs count, and how it is seen. Rows deleted while the
count triggers are disabled (``ALTER TABLE ... DISABLE TRIGGER``) or bypassed (a session
with ``session_replication_role = replica``) leave the count above the rows, so refs70's
create check no longer sees them: ``verify()`` compares the count with the rows and reports
the drift (``counts/refs``). A writable open finds disabled triggers and installs them again
with the count taken anew (the check then refuses as refs70); a bypass with the triggers
enabled is mended by deleting the count's row and opening writable."""

from __future__ import annotations

import psycopg
import pytest
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures
from pg_counts import kept_and_rows, sql, triggers

import cpstore
from cpstore.errors import IntegrityError
from cpstore.store.model import VerifyReport
from cpstore.store.pg_count import TRIGGERS
from cpstore.store.pg_open import parse_url


def _drift(report: VerifyReport, walked: int, kept: int) -> None:
    found = [p for p in report.problems if p.where == "counts/refs"]
    assert len(found) == 1, report.problems
    assert "kept row count is not its rows" in found[0].what
    assert (found[0].expected, found[0].got) == (f"{walked} refs", f"{kept} refs")


def _replica_delete(url: str, key: bytes) -> None:
    schema = parse_url(url).schema
    with psycopg.connect(parse_url(url).conninfo, autocommit=True) as conn:
        conn.execute("SET session_replication_role = replica")
        conn.execute(f'DELETE FROM "{schema}"."refs" WHERE k = %s', (key,))


def test_disabled_triggers_and_a_raw_delete_are_reported_by_verify(pg_url: str) -> None:
    with cpstore.open(pg_url) as st:
        rec = st.recorder("r")
        for i in range(2):
            rec.checkpoint(i, {"i": i})
        sid = st.recorder("s").checkpoint(0, {"s": 0})
        assert st.verify().ok
        sql(pg_url, "ALTER TABLE {s}.refs DISABLE TRIGGER USER")
        sql(pg_url, "DELETE FROM {s}.refs WHERE k = %s", (b"r\0main",))
        assert kept_and_rows(pg_url) == (2, 1)
        _drift(st.verify(), 1, 2)
        with cpstore.open(pg_url, readonly=True) as ro:  # what writers read, reported
            _drift(ro.verify(), 1, 2)
        st.fork("s", "b", sid)  # the documented evasion: the count hid the vanished ref
        with cpstore.open(pg_url) as again:  # finds them disabled: installed, counted anew
            assert triggers(pg_url) == dict.fromkeys(TRIGGERS, "O")
            assert kept_and_rows(pg_url) == (2, 2)
            assert not [p for p in again.verify().problems if p.where == "counts/refs"]
            with pytest.raises(IntegrityError):  # 2 refs where the digest counts 3
                again.fork("s", "c", sid)


def test_a_replica_session_delete_is_reported_and_mended_by_a_recount(pg_url: str) -> None:
    with cpstore.open(pg_url) as st:
        rec = st.recorder("r")
        ids = [rec.checkpoint(i, {"i": i}) for i in range(2)]
        sid = st.recorder("s").checkpoint(0, {"s": 0})
        _replica_delete(pg_url, b"r\0main")
        assert kept_and_rows(pg_url) == (2, 1)
        report = st.verify()
        _drift(report, 1, 2)
        assert any(p.where == "meta/refs_digest" for p in report.problems)
    with cpstore.open(pg_url) as st:  # triggers enabled, row there: nothing to install
        assert kept_and_rows(pg_url) == (2, 1)
        sql(pg_url, "DELETE FROM {s}.counts WHERE name = 'refs'")
    with cpstore.open(pg_url) as st:
        assert kept_and_rows(pg_url) == (1, 1)
        with pytest.raises(IntegrityError):
            st.fork("s", "b", sid)
        st.repair_ref("r", "main", ids[1], operator="o", reason="put back")
        assert st.verify().ok


def test_a_count_below_the_rows_refuses_every_create_and_is_reported(pg_url: str) -> None:
    """Rows inserted with the triggers bypassed: the count is short of a whole table."""
    with cpstore.open(pg_url) as st:
        cid = st.recorder("r").checkpoint(0, {"a": 0})
        st.recorder("s").checkpoint(0, {"s": 0})
        sql(pg_url, "UPDATE {s}.counts SET n = n - 1 WHERE name = 'refs'")
        with pytest.raises(IntegrityError):
            st.fork("r", "b", cid)
        _drift(st.verify(), 2, 1)
