"""pgcount72: on PostgreSQL the refs table's row count is kept by the server (a counts table
moved by statement triggers on the refs table), so refs70's create check reads one row
instead of a ``count(*)`` linear in the refs. It must stay exact after every kind of
write cpstore makes, and move with the rows a raw ``DELETE`` or ``TRUNCATE`` removes
behind cpstore's back, so the next create is still refused (IntegrityError, as refs70)."""

from __future__ import annotations

from pathlib import Path

import pytest
from lg_puts import put_value
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures
from pg_counts import kept, kept_and_rows, rows, sql, triggers

import cpstore
from cpstore.errors import IntegrityError
from cpstore.langgraph import CpstoreSaver
from cpstore.native.canonical import encode_value
from cpstore.store.lmdb_open import FORMAT, FORMAT_KEY
from cpstore.store.pg_count import TRIGGERS
from cpstore.store.refs import REFS_DIGEST_KEY
from cpstore.store.transfer import transfer


def _exact(url: str, want: int | None = None) -> int:
    n, real = kept_and_rows(url)
    assert n == real, f"kept {n}, rows {real}"
    if want is not None:
        assert real == want
    return real


def test_a_new_store_has_the_count_and_its_triggers_and_reads_it(pg_url: str) -> None:
    with cpstore.open(pg_url) as st:
        assert triggers(pg_url) == dict.fromkeys(TRIGGERS, "O")
        assert kept(pg_url) == 0
        st.recorder("r").checkpoint(0, {"a": 0})
        _exact(pg_url, 1)
        # The create check reads the kept count, not a count(*): a count set one short
        # (as if a ref had vanished) refuses the next create.
        sql(pg_url, "UPDATE {s}.counts SET n = 0 WHERE name = 'refs'")
        with pytest.raises(IntegrityError) as info:
            st.recorder("s").checkpoint(0, {"s": 0})
        assert (info.value.expected, info.value.got) == ("1 refs", "0 refs")


def test_the_count_is_exact_after_every_kind_of_write(pg_url: str, tmp_path: Path) -> None:
    with cpstore.open(pg_url) as st:
        rec = st.recorder("r")
        ids = [rec.checkpoint(i, {"i": i}) for i in range(4)]
        _exact(pg_url, 1)
        for r in range(3):
            st.recorder(f"p{r}").checkpoint(0, {"p": r})
        _exact(pg_url, 4)
        st.fork("r", "b", ids[1])
        st.set_ref("r", "c", ids[0], expected_old=None)
        _exact(pg_url, 6)
        st.set_ref("r", "c", ids[2], expected_old=ids[0])  # a move: no new row
        st.reset_ref("r", "b", ids[0], expected_old=ids[1], operator="o", reason="x")
        _exact(pg_url, 6)
        st.recorder("r", branch="b").checkpoint(9, {"b": 9})
        st.prune(keep_last=1)
        _exact(pg_url, 6)
        assert st.delete_run("p0") == 1
        _exact(pg_url, 5)
        st.gc(delete_run="p1")
        st.gc(keep_last=1)
        _exact(pg_url, 4)
        # repair_ref putting back a ref deleted behind cpstore's back
        sql(pg_url, "DELETE FROM {s}.refs WHERE k = %s", (b"r\0main",))
        _exact(pg_url, 3)
        st.repair_ref("r", "main", ids[3], operator="o", reason="put back")
        _exact(pg_url, 4)
        # LangGraph: a thread's first put creates its ref; delete_thread and keep_latest
        saver = CpstoreSaver(st)
        parent = None
        for v in ("a", "b", "c"):
            parent = put_value(saver, "t", parent, v)
        put_value(saver, "u", None, "u1")
        _exact(pg_url)
        saver.prune(["t"], strategy="keep_latest")
        _exact(pg_url)
        before = rows(pg_url)
        saver.delete_thread("u")
        assert _exact(pg_url) < before
        assert st.verify().ok
    # push and pull: LMDB -> PostgreSQL -> PostgreSQL -> LMDB, whole and one run
    with cpstore.open(tmp_path / "src") as src, cpstore.open(pg_url) as dst:
        src.recorder("x").checkpoint(0, {"x": 0})
        src.recorder("y").checkpoint(0, {"y": 0})
        transfer(src.backend, dst.backend, run_id="x")
        transfer(src.backend, dst.backend)
        _exact(pg_url)
        assert dst.verify().ok
    other = pg_url.replace("schema=", "schema=o")
    with cpstore.open(pg_url) as src, cpstore.open(other) as dst:
        transfer(src.backend, dst.backend)
        assert _exact(other) == _exact(pg_url)
        assert dst.verify().ok


def test_a_raw_delete_or_truncate_behind_cpstores_back_refuses_the_next_create(
    pg_url: str,
) -> None:
    with cpstore.open(pg_url) as st:
        rec = st.recorder("r")
        ids = [rec.checkpoint(i, {"i": i}) for i in range(2)]
        st.recorder("s").checkpoint(0, {"s": 0})
        sql(pg_url, "DELETE FROM {s}.refs WHERE k = %s", (b"r\0main",))
        _exact(pg_url, 1)
        with pytest.raises(IntegrityError) as info:
            st.fork("r", "b", ids[0])
        assert (info.value.where, info.value.expected, info.value.got) == (
            "meta/refs_digest",
            "2 refs",
            "1 refs",
        )
        st.repair_ref("r", "main", ids[1], operator="o", reason="put back")
        st.fork("r", "b", ids[0])
        _exact(pg_url, 3)
        sql(pg_url, "TRUNCATE {s}.refs")
        _exact(pg_url, 0)
        with pytest.raises(IntegrityError) as info:
            st.recorder("t").checkpoint(0, {"t": 0})
        assert (info.value.expected, info.value.got) == ("3 refs", "0 refs")
        # a raw insert moves it too (COPY and MERGE run the same statement triggers)
        sql(pg_url, "INSERT INTO {s}.refs SELECT k || 'x'::bytea, v FROM {s}.refs")
        sql(pg_url, "INSERT INTO {s}.refs VALUES ('zz'::bytea, 'v'::bytea)")
        _exact(pg_url, 1)


def test_a_layout_1_store_upgrades_with_its_count_exact(pg_url: str) -> None:
    """The layout-1 upgrade rewrites every ref in place (an upsert that inserts nothing)."""
    with cpstore.open(pg_url) as st:
        ids = [st.recorder(f"r{i}").checkpoint(0, {"i": i}) for i in range(3)]
    for i, cid in enumerate(ids):  # as layout 1 stored them: bare ids, no digest
        sql(
            pg_url,
            "UPDATE {s}.refs SET v = %s WHERE k = %s",
            (bytes.fromhex(cid), f"r{i}\0main".encode()),
        )
    sql(pg_url, "DELETE FROM {s}.meta WHERE k = %s", (REFS_DIGEST_KEY,))
    sql(
        pg_url,
        "UPDATE {s}.meta SET v = %s WHERE k = %s",
        (encode_value({**FORMAT, "version": 1}), FORMAT_KEY),
    )
    with cpstore.open(pg_url) as st:
        assert st.backend.layout == 5
        _exact(pg_url, 3)
        st.recorder("new").checkpoint(0, {"n": 0})
        _exact(pg_url, 4)
        assert st.verify().ok


def test_a_renamed_store_keeps_its_own_count(pg_url: str) -> None:
    """The trigger functions find the counts table by the schema of the refs table they
    fired on: with the schema written into their bodies, a renamed store's every ref write
    failed ("relation does not exist"), and a store restored beside its original moved the
    original's count."""
    with cpstore.open(pg_url) as st:
        ids = [st.recorder(f"r{i}").checkpoint(0, {"i": i}) for i in range(2)]
    old = pg_url.split("schema=")[1]
    new = f"{old}_moved"
    sql(pg_url, f'ALTER SCHEMA "{old}" RENAME TO "{new}"')
    moved = pg_url.replace(f"schema={old}", f"schema={new}")
    sql(pg_url, f'CREATE SCHEMA "{old}"')  # a store of the old name beside it
    with cpstore.open(pg_url) as other:
        other.recorder("x").checkpoint(0, {"x": 0})
    with cpstore.open(moved) as st:
        st.fork("r0", "b", ids[0])
        assert _exact(moved) == 3
        sql(moved, "DELETE FROM {s}.refs WHERE k = %s", (b"r1\0main",))
        with pytest.raises(IntegrityError):
            st.fork("r0", "c", ids[0])
    assert kept_and_rows(moved) == (2, 2)
    assert kept_and_rows(pg_url) == (1, 1)
