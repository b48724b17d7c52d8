"""pgcount72: a store a release before the kept refs count made (no counts table, no count
triggers) gets them at its next writable open, under the writer lock the schema's creation
takes, with its count taken once; processes opening such a store at once install them once
and none fails; a read-only open installs nothing and counts with ``count(*)``."""

from __future__ import annotations

import multiprocessing
import uuid
from typing import Any

import psycopg
import pytest
from pg_cluster import cluster, pg_cluster, pg_url  # noqa: F401 - fixtures
from pg_counts import kept, kept_and_rows, sql, strip_counts, triggers

import cpstore
from cpstore.errors import IntegrityError
from cpstore.store.pg_count import COUNTS_VERSION, TRIGGERS


def _old_store(url: str, runs: int) -> list[str]:
    """A store with ``runs`` runs, put back as a release before pgcount72 left it."""
    with cpstore.open(url) as st:
        ids = [st.recorder(f"r{i}").checkpoint(0, {"i": i}) for i in range(runs)]
    strip_counts(url)
    assert triggers(url) == {}
    assert sql(url, "SELECT to_regclass(%s)", (url.split("schema=")[1] + ".counts",)) == [(None,)]
    return ids


def test_an_old_store_gets_its_count_at_the_next_writable_open(pg_url: str) -> None:
    ids = _old_store(pg_url, 5)
    with cpstore.open(pg_url, readonly=True) as ro:  # installs nothing, reads count(*)
        assert ro.verify().ok and ro.verify().counts["refs"] == 5
    assert triggers(pg_url) == {}
    sql(pg_url, "DELETE FROM {s}.refs WHERE k = %s", (b"r0\0main",))  # before the upgrade
    with cpstore.open(pg_url) as st:
        assert triggers(pg_url) == dict.fromkeys(TRIGGERS, "O")
        assert kept_and_rows(pg_url) == (4, 4)
        with pytest.raises(IntegrityError):  # the vanished ref is still seen
            st.fork("r1", "b", ids[1])
        st.repair_ref("r0", "main", ids[0], operator="o", reason="put back")
        st.fork("r1", "b", ids[1])
        assert kept_and_rows(pg_url) == (6, 6)


def test_a_deleted_count_row_is_counted_again_at_the_next_writable_open(pg_url: str) -> None:
    """A missing row reads as the table's ``count(*)`` (exact) until an open counts again."""
    _old_store(pg_url, 0)
    with cpstore.open(pg_url) as st:
        st.recorder("r").checkpoint(0, {"a": 0})
        sql(pg_url, "DELETE FROM {s}.counts")
        st.recorder("s").checkpoint(0, {"a": 0})  # the triggers update no row
        assert kept(pg_url) is None
        sql(pg_url, "DELETE FROM {s}.refs WHERE k = %s", (b"s\0main",))
        with pytest.raises(IntegrityError):  # count(*) in its place
            st.recorder("t").checkpoint(0, {"a": 0})
    with cpstore.open(pg_url):
        assert kept_and_rows(pg_url) == (1, 1)


def _open_and_create(url: str, i: int, go: Any, out: Any) -> None:
    try:
        go.wait(60)
        with cpstore.open(url) as st:
            st.recorder(f"n{i}").checkpoint(0, {"i": i})
        out.put((i, "ok"))
    except BaseException as exc:  # reported to the parent, which asserts
        out.put((i, repr(exc)))


def _open_at_once(url: str) -> list[tuple[int, str]]:
    """4 spawned processes open ``url`` together, each starting a run; what each said."""
    ctx = multiprocessing.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    children = [ctx.Process(target=_open_and_create, args=(url, i, go, out)) for i in range(4)]
    for child in children:
        child.start()
    go.set()
    results = sorted(out.get(timeout=180) for _ in children)
    for child in children:
        child.join(60)
    return results


def test_processes_opening_an_old_store_at_once_install_once(pg_url: str) -> None:
    _old_store(pg_url, 20)
    assert _open_at_once(pg_url) == [(i, "ok") for i in range(4)]
    assert triggers(pg_url) == dict.fromkeys(TRIGGERS, "O")
    assert sql(pg_url, "SELECT count(*) FROM {s}.counts") == [(1,)]
    assert kept_and_rows(pg_url) == (24, 24)
    with cpstore.open(pg_url) as st:
        assert st.verify().ok


def test_processes_creating_a_new_store_at_once_install_once(pg_cluster: object) -> None:
    url = cluster().url(f"t_c72_{uuid.uuid4().hex[:12]}")
    assert _open_at_once(url) == [(i, "ok") for i in range(4)]
    assert triggers(url) == dict.fromkeys(TRIGGERS, "O")
    assert kept_and_rows(url) == (4, 4)


def _role_url(url: str, role: str, grants: list[str]) -> str:
    schema = url.split("schema=")[1]
    admin = cluster().url()
    with psycopg.connect(
        admin.split("?", 1)[0] + "?" + admin.split("?", 1)[1], autocommit=True
    ) as conn:
        if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone() is None:
            conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO {role}')
        for grant in grants:
            conn.execute(grant.replace("{s}", f'"{schema}"').replace("{role}", role))
    return url.replace("postgresql://postgres@", f"postgresql://{role}@")


def test_a_writer_role_granted_nothing_on_counts_moves_the_count(pg_url: str) -> None:
    """The trigger functions run with their owner's rights (SECURITY DEFINER)."""
    with cpstore.open(pg_url) as st:
        st.recorder("r").checkpoint(0, {"a": 0})
    writer = _role_url(
        pg_url,
        "cpstore_c72_writer",
        [
            "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {s} TO {role}",
            "REVOKE ALL ON {s}.counts FROM {role}",
            "GRANT SELECT ON {s}.counts TO {role}",
        ],
    )
    with cpstore.open(writer) as st:
        st.recorder("s").checkpoint(0, {"a": 0})
        st.delete_run("r")
    assert kept_and_rows(pg_url) == (1, 1)


def test_a_role_that_may_not_install_opens_an_old_store_as_before(pg_url: str) -> None:
    _old_store(pg_url, 2)
    writer = _role_url(
        pg_url,
        "cpstore_c72_plain",
        ["GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {s} TO {role}"],
    )
    with cpstore.open(writer) as st:  # no CREATE on the schema: count(*), as before
        st.recorder("s").checkpoint(0, {"a": 0})
        sql(pg_url, "DELETE FROM {s}.refs WHERE k = %s", (b"s\0main",))
        with pytest.raises(IntegrityError):
            st.recorder("t").checkpoint(0, {"a": 0})
    assert triggers(pg_url) == {}


def _mark(url: str) -> str | None:
    [(comment,)] = sql(url, "SELECT obj_description(to_regclass(%s), 'pg_class')", (_counts(url),))
    return None if comment is None else str(comment)


def _counts(url: str) -> str:
    return f'"{url.split("schema=")[1]}"."counts"'


def test_the_counts_version_is_marked_and_an_older_one_installed_again(pg_url: str) -> None:
    """docs/format.md: the counts table's comment says its version; an open finding none
    (or an older one) installs the counts again and counts anew, a newer one is left."""
    with cpstore.open(pg_url) as st:
        st.recorder("r").checkpoint(0, {"a": 0})
    assert _mark(pg_url) == f"cpstore counts {COUNTS_VERSION}"
    sql(pg_url, "COMMENT ON TABLE {s}.counts IS NULL")
    sql(pg_url, "UPDATE {s}.counts SET n = 7")
    with cpstore.open(pg_url):
        assert kept_and_rows(pg_url) == (1, 1)
        assert _mark(pg_url) == f"cpstore counts {COUNTS_VERSION}"
    sql(pg_url, f"COMMENT ON TABLE {{s}}.counts IS 'cpstore counts {COUNTS_VERSION + 1}'")
    sql(pg_url, "UPDATE {s}.counts SET n = 7")
    with cpstore.open(pg_url):
        assert kept_and_rows(pg_url) == (7, 1)


def test_roles_granted_the_tables_before_the_upgrade_open_and_write_as_before(
    pg_url: str,
) -> None:
    """``GRANT ... ON ALL TABLES`` covers the tables of its day: roles granted before the
    counts table was made may not read it, and count with ``count(*)`` as before (reading
    the kept count, every stat was "permission denied"); their writes still move it."""
    ids = _old_store(pg_url, 2)
    reader = _role_url(
        pg_url, "cpstore_c72_reader", ["GRANT SELECT ON ALL TABLES IN SCHEMA {s} TO {role}"]
    )
    writer = _role_url(
        pg_url,
        "cpstore_c72_early",
        ["GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {s} TO {role}"],
    )
    with cpstore.open(pg_url):  # the owner's open installs the count
        assert kept_and_rows(pg_url) == (2, 2)
    with cpstore.open(reader, readonly=True) as ro:
        assert ro.verify().ok
    with cpstore.open(writer) as st:
        st.fork("r0", "b", ids[0])
        sql(pg_url, "DELETE FROM {s}.refs WHERE k = %s", (b"r1\0main",))
        with pytest.raises(IntegrityError):
            st.fork("r0", "c", ids[0])
        assert st.verify().problems  # the vanished ref, not a count drift
        assert not [p for p in st.verify().problems if p.where == "counts/refs"]
    assert kept_and_rows(pg_url) == (2, 2)
