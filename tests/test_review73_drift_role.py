"""review73: ``verify()`` on a writable handle of a role that may read the kept refs count
but not install its triggers again reports the count's drift too.

Such a handle counts the refs with ``count(*)`` for its creates (exact), and ``verify()``
compared that ``count(*)`` with the rows it walked: equal always, so the drift every
other handle's create check reads (its triggers disabled, the rows moved meanwhile, by
cpstore's own writes too, the digest kept right) went unreported there, while a
read-only open of the same role reported it. The handle now reads the kept count beside
its ``count(*)``, and ``verify()`` compares the kept one.
"""

from __future__ import annotations

from pg_cluster import cluster, pg_cluster, pg_url  # noqa: F401 - fixtures
from pg_counts import kept_and_rows, sql
from test_pgcount72_upgrade import _role_url

import cpstore


def _drift(st: cpstore.Store) -> list[str]:
    return [p.where for p in st.verify().problems]


def test_a_writer_that_may_not_reinstall_reports_the_drift(pg_url: str) -> None:
    with cpstore.open(pg_url) as st:
        rec = st.recorder("r")
        r0 = rec.checkpoint(0, {"a": 0})
        st.fork("r", "b", r0)
    writer = _role_url(
        pg_url,
        "cpstore_r73_drift",
        ["GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {s} TO {role}"],
    )
    sql(pg_url, "ALTER TABLE {s}.refs DISABLE TRIGGER cpstore_count_removed")
    with cpstore.open(writer) as st:  # may not enable it again: count(*) for its creates
        st.reset_ref("r", "b", None, expected_old=r0, operator="o", reason="drop")
        assert kept_and_rows(pg_url) == (2, 1)  # drifted, the digest right
        assert _drift(st) == ["counts/refs"]  # was []: count(*) against the rows
        st.fork("r", "c", r0)  # its own creates count(*): not refused
    with cpstore.open(writer, readonly=True) as ro:
        assert _drift(ro) == ["counts/refs"]
    with cpstore.open(pg_url) as st:  # the owner's open enables it and counts again
        assert kept_and_rows(pg_url) == (2, 2) and st.verify().ok
