"""audit61: what README.md and docs/ say about PostgreSQL, run against a real server.

The test suite's own throwaway cluster (tests/pg_cluster.py), never a mock: the URL's
own parameters (``schema``, ``pool_max``) and what a password becomes in ``store.path``
and errors, the opening rules, durability ``none`` on the server, a statement timeout,
a role that may only read, and every CLI command that takes ``--store`` given a URL.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pg_cluster import Cluster, fresh_url, pg_cluster  # noqa: F401 - fixture

import cpstore
from cpstore import cli
from cpstore.errors import (
    ReentrantWriteError,
    StoreConnectionError,
    StoreReadOnlyError,
    StoreTimeoutError,
)
from cpstore.store.facade import Durability
from cpstore.store.lmdb_open import FORMAT_KEY
from cpstore.store.model import PG_STORE_VERSION
from cpstore.store.pg_backend import POOL_WAIT
from cpstore.store.pg_open import lock_key, parse_url
from cpstore.store.pg_pool import CONNECT_WAIT, RECONNECT_SPAN

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
STORE_MD = ROOT / "docs" / "store.md"


def _text(path: Path) -> str:
    return " ".join(path.read_text().split())


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _sql(cluster: Cluster, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(parse_url(cluster.url()).conninfo, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


def _schema_of(url: str) -> str:
    return parse_url(url).schema


def _schema_exists(cluster: Cluster, schema: str) -> bool:
    rows = _sql(cluster, "SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,))
    return bool(rows)


@pytest.fixture
def url(pg_cluster: Cluster) -> str:  # noqa: F811 - the imported fixture
    return fresh_url()


@pytest.fixture
def recorded(url: str) -> Iterator[tuple[str, str, str]]:
    """A store on the cluster with one run of two checkpoints: (url, first, head)."""
    with cpstore.open(url) as store:
        rec = store.recorder("r")
        rec.observe(1, "cfg", b"observed bytes", pinned_at=1.0)
        rec.effect("mail.send", b"effect payload")
        first = rec.checkpoint(1, {"a": 1})
        head = rec.checkpoint(2, {"a": 2})
    yield url, first, head


# -- the URL -------------------------------------------------------------------------------


def test_schema_defaults_to_cpstore_and_names_the_tables_store_md_lists(
    pg_cluster: Cluster,  # noqa: F811
) -> None:
    """docs/store.md: ``schema=NAME`` (default ``cpstore``), one table per named database."""
    text = _text(STORE_MD)
    assert "`schema=NAME` (default `cpstore`; a lower-case identifier)" in text
    base = pg_cluster.url()  # no schema= at all
    try:
        with cpstore.open(base) as store:
            store.recorder("r").checkpoint(1, {"a": 1})
        rows = _sql(pg_cluster, "SELECT tablename FROM pg_tables WHERE schemaname = 'cpstore'")
        listed = "meta, objects, checkpoints, refs, tombstones, ledgers, audit, audit_index, "
        assert {r[0] for r in rows} == set((listed + "audit_mac, counts").split(", "))
    finally:
        _sql(pg_cluster, "DROP SCHEMA IF EXISTS cpstore CASCADE")
    for bad in ("Upper", "1x", "a-b"):
        with pytest.raises(cpstore.InvalidInputError, match="lower-case"):
            cpstore.open(pg_cluster.url(bad))


def test_pool_max_is_connections_per_handle_default_8(pg_cluster: Cluster) -> None:  # noqa: F811
    """docs/store.md: ``pool_max=N`` (connections per handle, default 8), removed before
    the URL reaches libpq (which would refuse an unknown parameter)."""
    text = _text(STORE_MD)
    assert "`pool_max=N` (connections per handle, default 8; 1 to 1000, anything else" in text
    assert parse_url(pg_cluster.url("x")).pool_max == 8
    url = fresh_url(pool_max="1")
    assert parse_url(url).pool_max == 1 and "pool_max" not in parse_url(url).conninfo
    with cpstore.open(url) as store:
        store.recorder("r").checkpoint(1, {"a": 1})
        assert store.runs() == ["r"]
    assert parse_url(fresh_url(pool_max="1000")).pool_max == 1000
    for bad in ("0", "x", "-1", "1001"):
        with pytest.raises(cpstore.InvalidInputError, match="pool_max"):
            cpstore.open(fresh_url(pool_max=bad))


def test_libpq_parameters_pass_through_and_postgres_scheme_works(
    pg_cluster: Cluster,  # noqa: F811
) -> None:
    """ "Anything else is libpq's"; ``postgres://`` is libpq's other spelling."""
    url = fresh_url(application_name="audit61")
    with cpstore.open(url) as store:
        store.recorder("r").checkpoint(1, {"a": 1})
    with cpstore.open(url.replace("postgresql://", "postgres://", 1), readonly=True) as store:
        assert store.runs() == ["r"]


def test_a_password_never_appears_in_store_path_or_an_error(
    pg_cluster: Cluster,  # noqa: F811
) -> None:
    """docs/store.md: "A password never appears in ``store.path`` or an error (``***``)",
    whether the URL carries it before the host or as libpq's ``password=`` parameter."""
    text = _text(STORE_MD)
    assert (
        "A password, before the host or as `password=`, never appears in `store.path` "
        "or an error (`***`)" in text
    )
    secret = "hunter2secret"
    schema = _schema_of(fresh_url())
    in_netloc = pg_cluster.url(schema).replace("postgres@", f"postgres:{secret}@", 1)
    in_query = pg_cluster.url(schema, password=secret)
    for url in (in_netloc, in_query):
        with cpstore.open(url) as store:  # trust auth: the password is not checked
            assert secret not in str(store.path) and "***" in str(store.path), store.path
        with pytest.raises(cpstore.CpstoreError) as info:
            cpstore.open(url + "&pool_max=0")
        assert secret not in str(info.value) and secret not in repr(info.value.__dict__)
        with pytest.raises(cpstore.CpstoreError) as info:
            cpstore.open(url.replace(pg_cluster.socket_dir, "/nonexistent-audit61"))
        assert secret not in str(info.value) and secret not in repr(info.value.__dict__)


def test_a_url_libpq_cannot_parse_is_bad_input_without_the_password(
    pg_cluster: Cluster,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A password with a bad percent-escape: libpq's message quotes the token, and it
    reached the error's ``got`` whole (a StoreError "PostgreSQL failed", exit 7). A URL
    libpq cannot parse (that, or a parameter it does not know) is InvalidInputError,
    exit 3 (README: "a malformed ... argument"), the password never shown."""
    secret = "sec%zzret"
    url = fresh_url().replace("postgres@", f"postgres:{secret}@", 1)
    with pytest.raises(cpstore.InvalidInputError) as info:
        cpstore.open(url)
    shown = str(info.value) + repr(info.value.__dict__)
    assert "sec" not in shown and "zzret" not in shown and "percent" in shown, shown
    code, _, err = _run(["log", "--store", url], capsys)
    assert code == cli.EXIT_BAD_INPUT and "zzret" not in err, (code, err)
    with pytest.raises(cpstore.InvalidInputError, match="not a usable PostgreSQL URL") as info:
        cpstore.open(fresh_url(no_such_option="1"))
    assert "no_such_option" in str(info.value)
    assert (
        "cannot parse (a parameter it does not know, a bad `%` escape) is "
        "`InvalidInputError` (exit 3)" in _text(STORE_MD)
    )


# -- opening -------------------------------------------------------------------------------


def test_opening_follows_the_lmdb_rules(pg_cluster: Cluster, url: str) -> None:  # noqa: F811
    """A missing schema is made only when ``create=True`` and not ``readonly``
    (NotFoundError otherwise, nothing made); store tables without a format record are
    refused (FormatVersionError)."""
    schema = _schema_of(url)
    for kwargs in ({"create": False}, {"readonly": True}):
        with pytest.raises(cpstore.NotFoundError):
            cpstore.open(url, **kwargs)  # type: ignore[arg-type]
        assert not _schema_exists(pg_cluster, schema)
    _sql(pg_cluster, f'CREATE SCHEMA "{schema}"')
    _sql(pg_cluster, f'CREATE TABLE "{schema}"."refs" (k bytea PRIMARY KEY, v bytea NOT NULL)')
    for kwargs in ({}, {"readonly": True}):
        with pytest.raises(cpstore.FormatVersionError):
            cpstore.open(url, **kwargs)  # type: ignore[arg-type]


def test_without_the_extra_a_url_is_a_store_error_naming_it(url: str) -> None:
    """README/docs/store.md: without ``cpstore[postgres]`` a URL is a StoreError saying so,
    never a folder name."""
    code = (
        "import sys; sys.modules['psycopg'] = None\n"
        "import cpstore\n"
        "try:\n"
        f"    cpstore.open({url!r})\n"
        "except cpstore.StoreError as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert "pip install 'cpstore[postgres]'" in out.stdout, (out.stdout, out.stderr)
    assert not Path(url).exists() and not Path("postgresql:").exists()


# -- transactions, durability, faults --------------------------------------------------------


def test_durability_none_turns_synchronous_commit_off_for_checkpoints_only(
    pg_cluster: Cluster,  # noqa: F811
    url: str,
) -> None:
    """docs/store.md: ``"none"``: checkpoint commits set ``synchronous_commit = off``;
    ref moves, audit records and prune stay synchronous. Seen by a trigger on the server."""
    schema = _schema_of(url)
    with cpstore.open(url):
        pass
    _sql(pg_cluster, f'CREATE TABLE "{schema}".seen (tbl text, sc text)')
    _sql(
        pg_cluster,
        f'CREATE FUNCTION "{schema}".note() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN '
        f'INSERT INTO "{schema}".seen VALUES (TG_TABLE_NAME, '
        "current_setting('synchronous_commit')); RETURN NULL; END $$",
    )
    for table in ("checkpoints", "audit"):
        _sql(
            pg_cluster,
            f'CREATE TRIGGER t_{table} AFTER INSERT ON "{schema}"."{table}" '
            f'FOR EACH ROW EXECUTE FUNCTION "{schema}".note()',
        )
    with cpstore.open(url, durability="none") as store:
        store.recorder("r").checkpoint(1, {"a": 1})
        store.append_audit("note", {"by": "audit61"})
    seen = _sql(pg_cluster, f'SELECT tbl, sc FROM "{schema}".seen ORDER BY tbl')
    assert seen == [("audit", "on"), ("checkpoints", "off")]
    for table in ("refs", "tombstones"):
        _sql(
            pg_cluster,
            f'CREATE TRIGGER t_{table} AFTER INSERT OR UPDATE OR DELETE ON "{schema}"."{table}" '
            f'FOR EACH ROW EXECUTE FUNCTION "{schema}".note()',
        )
    with cpstore.open(url, durability="none") as store:
        rec = store.recorder("r")
        old, new = rec.checkpoint(2, {"a": 2}), rec.checkpoint(3, {"a": 3})
        _sql(pg_cluster, f'TRUNCATE "{schema}".seen')
        store.reset_ref("r", "main", old, expected_old=new, operator="o", reason="x")
        assert {r[1] for r in _sql(pg_cluster, f'SELECT * FROM "{schema}".seen')} == {"on"}
        other = store.recorder("p")
        other.checkpoint(1, {"p": 1})
        other.checkpoint(2, {"p": 2})
        _sql(pg_cluster, f'TRUNCATE "{schema}".seen')
        assert store.prune(keep_last=1, run_id="p") == 1
        seen = _sql(pg_cluster, f'SELECT tbl, sc FROM "{schema}".seen')
        assert ("tombstones", "on") in seen and {r[1] for r in seen} == {"on"}, seen
    _sql(pg_cluster, f'TRUNCATE "{schema}".seen')
    with cpstore.open(url, durability="sync") as store:
        store.recorder("r").checkpoint(4, {"a": 4})
    seen = _sql(pg_cluster, f'SELECT DISTINCT tbl, sc FROM "{schema}".seen ORDER BY tbl')
    assert seen == [("checkpoints", "on"), ("refs", "on")]


def test_a_statement_timeout_is_store_timeout_error_and_a_nested_write_is_refused(
    pg_cluster: Cluster,  # noqa: F811
) -> None:
    """docs/store.md: ``options=-c statement_timeout=...`` is libpq's; a statement it
    cancels is StoreTimeoutError (a TimeoutError), the txn rolled back; a write nested in
    a write of the same store on one thread is StoreError at once."""
    url = fresh_url(options="-c%20statement_timeout%3D300")
    with cpstore.open(url) as store:
        rec = store.recorder("r")
        rec.checkpoint(1, {"a": 1})
        with psycopg.connect(parse_url(url).conninfo, autocommit=True) as holder:
            holder.execute("SELECT pg_advisory_lock(%s)", (lock_key(_schema_of(url)),))
            with pytest.raises(StoreTimeoutError) as info:
                rec.checkpoint(2, {"a": 2})
            assert isinstance(info.value, TimeoutError)
        assert len(store.history("r")) == 1
        with pytest.raises(ReentrantWriteError, match="nested"):
            store.backend.write_txn(lambda _txn: cpstore.open(url))
        assert issubclass(ReentrantWriteError, cpstore.StoreError)
        text = _text(STORE_MD)
        assert "is refused at once with `ReentrantWriteError` (a `StoreError`, exit 7)" in text


def test_a_server_that_is_not_there_is_store_connection_error_exit_7(
    pg_cluster: Cluster,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    """docs/store.md: a lost connection is StoreConnectionError (a StoreError and a
    ConnectionError; exit 7)."""
    url = fresh_url().replace(pg_cluster.socket_dir, "/nonexistent-audit61")
    with pytest.raises(StoreConnectionError) as info:
        cpstore.open(url)
    assert isinstance(info.value, ConnectionError) and isinstance(info.value, cpstore.StoreError)
    # No handle was made: not "lost ...; the next operation reconnects" (audit61's report).
    assert "could not connect" in info.value.what and "reconnects" not in str(info.value)
    code, _, err = _run(["log", "--store", url], capsys)
    assert code == 7 == cli.EXIT_CODES[cpstore.StoreError], err
    assert "could not connect to the server; nothing was opened" in err


def test_disk_bytes_is_the_schemas_total_relation_size(
    pg_cluster: Cluster,  # noqa: F811
    recorded: tuple[str, str, str],
) -> None:
    """docs/store.md "Sizes": ``disk_bytes()`` is pg_total_relation_size over the tables."""
    url = recorded[0]
    schema = _schema_of(url)
    [(total,)] = _sql(
        pg_cluster,
        "SELECT sum(pg_total_relation_size("
        "quote_ident(schemaname) || '.' || quote_ident(tablename)))::bigint "
        "FROM pg_tables WHERE schemaname = %s",
        (schema,),
    )
    with cpstore.open(url, readonly=True) as store:
        assert store.disk_bytes() == total


# -- a role that may only read ---------------------------------------------------------------


def test_a_select_only_role_opens_readonly_and_runs_the_reading_commands(
    pg_cluster: Cluster,  # noqa: F811
    recorded: tuple[str, str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """docs/store.md "Limits": ``readonly=True`` takes no lock, so a role that may only
    SELECT the schema can open it; README: the commands that only read open read-only."""
    url, _, head = recorded
    schema = _schema_of(url)
    role = f"ro_{schema}"
    _sql(pg_cluster, f'CREATE ROLE "{role}" LOGIN')
    _sql(pg_cluster, f'GRANT USAGE ON SCHEMA "{schema}" TO "{role}"')
    _sql(pg_cluster, f'GRANT SELECT ON ALL TABLES IN SCHEMA "{schema}" TO "{role}"')
    ro_url = url.replace("postgres@", f"{role}@", 1)
    with cpstore.open(ro_url, readonly=True) as store:
        assert store.runs() == ["r"]
    looks = (
        ["log", "r"],
        ["inspect", head],
        ["stats"],
        ["audit"],
        ["retained"],
        ["cat", head, "effect", "0"],
        ["diff", head, head],
    )
    for argv in looks:
        code, _, err = _run([*argv, "--store", ro_url], capsys)
        assert code == 0, (argv, err)
    code, _, err = _run(["verify", "--store", ro_url], capsys)
    assert code == 0, err
    code, out, err = _run(["audit", "--check", "--store", ro_url], capsys)
    assert code == 0, (out, err)
    code, out, err = _run(["validate", head, head, "--store", ro_url], capsys)
    assert code == cli.EXIT_QUARANTINE and "QUARANTINE" in out, (code, out, err)


# -- the command line on a URL ------------------------------------------------------------


def test_every_store_command_takes_a_url(
    recorded: tuple[str, str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """README: "A URL works wherever a path does (``--store``, ``$CPSTORE_PATH``)"."""
    url, first, head = recorded
    ok = [
        ["log"],
        ["log", "r", "--branch", "main"],
        ["inspect", head],
        ["show", "r@main"],
        ["cat", head, "observation", "1", "cfg"],
        ["cat", head, "effect", "0"],
        ["diff", first, first],
        ["stats"],
        ["verify"],
        ["retained"],
    ]
    for argv in ok:
        code, out, err = _run([*argv, "--store", url], capsys)
        assert code == 0, (argv, out, err)
    assert _run(["cat", head, "effect", "0", "--store", url], capsys)[1] == "effect payload"
    # a releasable decision (QUARANTINE: a checkpoint declares no replay mode), signed off
    code, out, err = _run(["validate", head, head, "--record", "--store", url], capsys)
    assert code == cli.EXIT_QUARANTINE and "QUARANTINE" in out, (code, out, err)
    code, out, err = _run(["audit", "--json", "--store", url], capsys)
    assert code == 0, err
    with cpstore.open(url, readonly=True) as store:
        decision = [r for r in store.audit_records(kind="decision")][-1].body["decision_id"]
    argv = ["sign-off", str(decision), "--operator", "o", "--reason", "ok", "--store", url]
    code, out, err = _run(argv, capsys)
    assert code == 0, (out, err)
    code, out, err = _run(["audit", "--check", "--store", url], capsys)
    assert code == 0 and "audit chain verifies" in out, (out, err)
    # retention
    code, out, err = _run(["gc", "--keep-last", "1", "--dry-run", "--store", url], capsys)
    assert code == 0 and "dry run" in out, (out, err)
    with cpstore.open(url, readonly=True) as store:
        assert len(store.history("r")) == 2
    code, out, err = _run(["prune", "--keep-last", "1", "--store", url], capsys)
    assert code == 0, (out, err)
    assert "never shrinks the file" not in out and "vacuum" in out.lower(), out
    with cpstore.open(url, readonly=True) as store:
        assert len(store.history("r")) == 1
    # $CPSTORE_PATH
    os.environ["CPSTORE_PATH"] = url
    try:
        assert _run(["log", "r"], capsys)[0] == 0
    finally:
        del os.environ["CPSTORE_PATH"]


def test_compact_and_copy_refuse_a_url_exit_3_naming_push(
    recorded: tuple[str, str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """README/docs/store.md: ``compact`` of a URL and ``copy`` to a URL DEST are exit 3;
    copy's error names ``push``. ``copy`` of a PostgreSQL store (``--store`` a URL) was a
    StoreError, exit 7 "store unavailable", naming the DEST folder: exit 3 now, as
    compact's URL, naming the store and ``pull``."""
    url = recorded[0]
    code, out, err = _run(["compact", "--store", url], capsys)
    assert code == cli.EXIT_BAD_INPUT == 3, (code, out, err)
    local = tmp_path / "local"
    with cpstore.open(local) as store:
        store.recorder("r").checkpoint(1, {"a": 1})
    code, out, err = _run(["copy", fresh_url(), "--store", str(local)], capsys)
    assert code == 3 and "push" in err, (code, out, err)
    assert "(a `postgresql://` DEST, or `--store`, is exit 3: use `push` or `pull`)" in _text(
        README
    )
    code, out, err = _run(["copy", str(tmp_path / "c"), "--store", url], capsys)
    assert code == 3 and "cpstore pull" in err and url in err, (code, out, err)
    assert not (tmp_path / "c").exists()


def test_push_and_pull_between_lmdb_and_postgresql(
    recorded: tuple[str, str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """README: push/pull either side a folder or a URL; a second push copies nothing."""
    url, _, head = recorded
    local = tmp_path / "local"
    assert _run(["pull", url, "--run", "r", "--store", str(local)], capsys)[0] == 0
    other = fresh_url()
    code, out, err = _run(["push", other, "--json", "--store", str(local)], capsys)
    assert code == 0, err
    again = _run(["push", other, "--json", "--store", str(local)], capsys)
    assert again[0] == 0
    first, second = json.loads(out), json.loads(again[1])
    assert first["checkpoints"] == 2 and second["checkpoints"] == second["objects"] == 0
    with cpstore.open(other, readonly=True) as store:
        assert store.ref("r") == head
    code, _, err = _run(["push", url, "--store", url], capsys)
    assert code == 3, err  # the same store on both sides
    code, _, err = _run(["pull", fresh_url(), "--store", str(tmp_path / "x")], capsys)
    assert code == 4 and not (tmp_path / "x").exists(), err  # the sender is never made


def test_no_command_but_push_pull_copy_demo_makes_a_schema(
    pg_cluster: Cluster,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    """README: no command but push/pull (receiving side), copy and demo creates a store."""
    looks = (["log"], ["verify"], ["stats"], ["audit"], ["retained"])
    for argv in (*looks, ["gc", "--keep-last", "1"], ["prune", "--delete-run", "r"]):
        url = fresh_url()
        code, _, err = _run([*argv, "--store", url], capsys)
        assert code == cli.EXIT_NOT_FOUND, (argv, code, err)
        assert not _schema_exists(pg_cluster, _schema_of(url)), argv


# -- more of docs/store.md's PostgreSQL section ---------------------------------------------


def _count(cluster: Cluster, url: str, table: str) -> int:
    [(n,)] = _sql(cluster, f'SELECT count(*) FROM "{_schema_of(url)}"."{table}"')
    return int(n)


def test_batched_commits_batch_size_at_a_time_and_stays_at_layout_5(
    pg_cluster: Cluster,  # noqa: F811
    url: str,
) -> None:
    """docs/store.md: ``"batched"``: queued in the process, committed ``batch_size`` at a
    time, as on LMDB; README: PostgreSQL stores stay at layout 5."""
    with cpstore.open(url, durability="batched", batch_size=3) as store:
        assert store.backend.layout == PG_STORE_VERSION == 5
        rec = store.recorder("r")
        rec.checkpoint(1, {"a": 1})
        rec.checkpoint(2, {"a": 2})
        assert _count(pg_cluster, url, "checkpoints") == 0  # still queued in the process
        rec.checkpoint(3, {"a": 3})
        assert _count(pg_cluster, url, "checkpoints") == 3
        rec.checkpoint(4, {"a": 4})
    assert _count(pg_cluster, url, "checkpoints") == 4  # the close flushed the rest


def test_a_readonly_handle_and_a_read_only_role_have_their_writes_refused(
    pg_cluster: Cluster,  # noqa: F811
    recorded: tuple[str, str, str],
) -> None:
    """docs/store.md: ``readonly=True`` runs every txn READ ONLY; a role that may read the
    store but not write it still opens it writable, its writes StoreReadOnlyError."""
    url = recorded[0]
    with cpstore.open(url, readonly=True) as store, pytest.raises(StoreReadOnlyError):
        store.recorder("r").checkpoint(3, {"a": 3})
    schema = _schema_of(url)
    role = f"rw_{schema}"
    _sql(pg_cluster, f'CREATE ROLE "{role}" LOGIN')
    _sql(pg_cluster, f'GRANT USAGE ON SCHEMA "{schema}" TO "{role}"')
    _sql(pg_cluster, f'GRANT SELECT ON ALL TABLES IN SCHEMA "{schema}" TO "{role}"')
    with cpstore.open(url.replace("postgres@", f"{role}@", 1)) as store:
        assert store.runs() == ["r"]
        with pytest.raises(StoreReadOnlyError):
            store.recorder("r").checkpoint(3, {"a": 3})
    with cpstore.open(url, readonly=True) as store:
        assert len(store.history("r")) == 2


def test_dead_pooled_connections_and_a_restart_are_met_without_an_error(
    pg_cluster: Cluster,  # noqa: F811
    recorded: tuple[str, str, str],
) -> None:
    """docs/store.md/scale.md: a dead connection met on a txn's first round trip is
    replaced silently; after the server's return the next operation reconnects."""
    url, _, head = recorded
    with cpstore.open(url) as store:
        assert store.runs() == ["r"]  # a pooled connection now idle
        killed = _sql(
            pg_cluster,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()",
        )
        assert killed
        assert store.ref("r") == head
        store.recorder("r").checkpoint(3, {"a": 3})
        pg_cluster.restart("fast")
        assert len(store.history("r")) == 3
        store.recorder("r").checkpoint(4, {"a": 4})


def test_the_waits_store_md_and_scale_md_name(pg_cluster: Cluster) -> None:  # noqa: F811
    """POOL_WAIT 30 s (store.md's known limit), connect_timeout 15 s unless the URL sets
    one, reconnect series of 5 s (scale.md)."""
    assert "after `POOL_WAIT` (30 s)" in _text(STORE_MD)
    assert "`connect_timeout` is 15 s unless the URL sets it" in _text(STORE_MD)
    scale = _text(ROOT / "docs" / "scale.md")
    assert "Each attempt gives up after 15 s (`connect_timeout`, unless the URL sets one)" in scale
    assert "lets a series of reconnect attempts run 5 s" in scale
    assert (POOL_WAIT, CONNECT_WAIT, RECONNECT_SPAN) == (30.0, 15, 5.0)


def test_retained_release_and_audit_kind_take_a_url(
    url: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """README: ``retained --release`` (audited ``retained_release``) on a URL store."""
    with cpstore.open(url) as store:
        rec = store.recorder("r")
        first, head = rec.checkpoint(1, {"a": 1}), rec.checkpoint(2, {"a": 2})
        store.reset_ref("r", "main", first, expected_old=head, operator="o", reason="x")
    code, out, err = _run(["retained", "--json", "--store", url], capsys)
    assert code == 0 and json.loads(out)[0]["checkpoint_id"] == head, err
    argv = ["retained", "--release", head, "--operator", "o", "--reason", "y", "--store", url]
    assert _run(argv, capsys)[0] == 0
    code, out, err = _run(["audit", "--kind", "retained_release", "--store", url], capsys)
    assert code == 0 and "retained_release" in out, (out, err)
    code, out, err = _run(["retained", "--json", "--store", url], capsys)
    assert code == 0 and json.loads(out) == [], (out, err)


@pytest.mark.parametrize("durability", ["sync", "none"])
def test_sync_and_none_commit_each_checkpoint_in_its_own_txn_even_from_many_threads(
    pg_cluster: Cluster,  # noqa: F811
    url: str,
    durability: Durability,
) -> None:
    """docs/durability.md: on PostgreSQL (``sync``, ``none``) one checkpoint per txn, no
    group commit: seen by the server's txid of each checkpoint row."""
    schema = _schema_of(url)
    with cpstore.open(url):
        pass
    _sql(pg_cluster, f'CREATE TABLE "{schema}".txids (x bigint)')
    _sql(
        pg_cluster,
        f'CREATE FUNCTION "{schema}".note() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN '
        f'INSERT INTO "{schema}".txids VALUES (txid_current()); RETURN NULL; END $$',
    )
    _sql(
        pg_cluster,
        f'CREATE TRIGGER t AFTER INSERT ON "{schema}"."checkpoints" '
        f'FOR EACH ROW EXECUTE FUNCTION "{schema}".note()',
    )
    with cpstore.open(url, durability=durability) as store:

        def work(i: int) -> None:
            rec = store.recorder(f"r{i}")
            for step in range(4):
                rec.checkpoint(step, {"i": i, "s": step})

        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    rows = [r[0] for r in _sql(pg_cluster, f'SELECT x FROM "{schema}".txids')]
    assert len(rows) == 16 and len(set(rows)) == 16


def test_push_into_a_keyed_postgresql_store_without_its_key_is_exit_7_before_copying(
    pg_cluster: Cluster,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """docs/store.md "Decisions carried": a keyed destination opened without its key
    cannot take a carried decision: StoreError "the receiving store's audit log is keyed
    and was opened without its key ...", exit 7, before any object is copied; a --run the
    source lacks is exit 4 and makes no receiving schema."""
    src = tmp_path / "src"
    with cpstore.open(src) as store:
        head = store.recorder("r").checkpoint(1, {"a": 1})
        assert cpstore.validate(head, head, store=store).verdict is cpstore.Verdict.QUARANTINE
    dest = fresh_url()
    with cpstore.open(dest, audit_key=b"k" * 32) as store:
        store.append_audit("note", {"by": "audit61"})  # keys the log
    code, _, err = _run(["push", dest, "--store", str(src)], capsys)
    assert code == 7 and "keyed and was opened without its key" in err, (code, err)
    assert _count(pg_cluster, dest, "objects") == 0
    missing = fresh_url()
    code, _, err = _run(["push", missing, "--run", "nope", "--store", str(src)], capsys)
    assert code == 4 and not _schema_exists(pg_cluster, _schema_of(missing)), err


def _create_and_record(url: str, i: int, go: Any, out: Any) -> None:
    """Wait for the start, then open (making the store if missing) and record a run."""
    try:
        if not go.wait(120):
            out.put((i, "never told to go"))
            return
        with cpstore.open(url) as store:
            store.recorder(f"r{i}").checkpoint(1, {"i": i})
        out.put((i, "ok"))
    except BaseException as exc:
        out.put((i, repr(exc)))


def test_concurrent_creators_in_processes_make_the_schema_once(
    pg_cluster: Cluster,  # noqa: F811
    url: str,
) -> None:
    """docs/store.md "Schema": the tables and the format record are made in one txn under
    the writer lock, so concurrent creators (processes here) make the store once."""
    ctx = multiprocessing.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    children = [ctx.Process(target=_create_and_record, args=(url, i, go, out)) for i in range(3)]
    for child in children:
        child.start()
    go.set()
    results = sorted(out.get(timeout=120) for _ in children)
    for child in children:
        child.join(60)
    assert results == [(0, "ok"), (1, "ok"), (2, "ok")]
    with cpstore.open(url, readonly=True) as store:
        assert sorted(store.runs()) == ["r0", "r1", "r2"]
    assert _count(pg_cluster, url, "meta") >= 1
    [(n,)] = _sql(
        pg_cluster,
        f'SELECT count(*) FROM "{_schema_of(url)}".meta WHERE k = %s',
        (FORMAT_KEY,),
    )
    assert n == 1


def test_a_batched_queue_is_unseen_until_committed_and_a_failed_batch_is_dropped_whole(
    pg_cluster: Cluster,  # noqa: F811
    url: str,
) -> None:
    """docs/durability.md "batched": queued checkpoints are not visible to reads until
    committed, not even in the same process; a batch whose commit fails (a ref
    ConflictError) is rolled back and dropped whole, and flush() raises."""
    with cpstore.open(url) as plain:
        root = plain.recorder("r").checkpoint(0, {"a": 0})
    with cpstore.open(url, durability="batched", batch_size=10) as store:
        rec = store.recorder("r")
        queued = rec.checkpoint(1, {"a": 1})
        rec.checkpoint(2, {"a": 2})
        assert store.ref("r") == root
        with pytest.raises(cpstore.NotFoundError), store.read(queued):
            pass
        with cpstore.open(url) as other:
            other.recorder("r").checkpoint(9, {"other": 1})  # moves the ref under the queue
        with pytest.raises(cpstore.ConflictError):
            store.flush()
        assert _count(pg_cluster, url, "checkpoints") == 2  # root and the other's
        store.flush()  # dropped: nothing left to commit
    assert _count(pg_cluster, url, "checkpoints") == 2


def test_a_handle_never_holds_more_connections_than_pool_max(
    pg_cluster: Cluster,  # noqa: F811
) -> None:
    """docs/store.md: ``pool_max=N`` is the connections per handle: six threads reading
    at once through a ``pool_max=2`` handle leave at most two sessions on the server."""
    name = f"a61_{os.getpid()}_{threading.get_ident() % 10000}"
    url = fresh_url(pool_max="2", application_name=name)
    with cpstore.open(url) as store:
        store.recorder("r").checkpoint(1, {"a": 1})

        def reads() -> None:
            for _ in range(30):
                assert store.runs() == ["r"]

        threads = [threading.Thread(target=reads) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        rows = _sql(
            pg_cluster, "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,)
        )
        assert 1 <= rows[0][0] <= 2, rows


def test_the_urls_connect_timeout_holds_for_the_opens_own_connection(
    pg_cluster: Cluster,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """docs/store.md/scale.md: ``connect_timeout`` is 15 s unless the URL sets it. The
    pool kept the URL's; the open's own connection (the one that checks the schema) was
    made with ``connect_timeout=15`` whatever the URL said, so ``connect_timeout=2``
    against a hung server still waited 15 s at open (and 60 gave up after 15). Seen on
    the real connections the open makes (their libpq parameters), to the test cluster."""
    made: list[str | None] = []
    real = psycopg.connect

    def spy(*args: Any, **kwargs: Any) -> Any:
        conn = real(*args, **kwargs)
        made.append(conn.info.get_parameters().get("connect_timeout"))
        return conn

    monkeypatch.setattr(psycopg, "connect", spy)
    with cpstore.open(fresh_url(connect_timeout="7")) as store:
        store.recorder("r").checkpoint(1, {"a": 1})
    with cpstore.open(fresh_url()) as store:
        store.recorder("r").checkpoint(1, {"a": 1})
    assert made and made[0] == "7" and made[-1] == str(CONNECT_WAIT) == "15", made


def test_a_write_a_read_only_role_is_refused_is_one_line_on_stderr(
    pg_cluster: Cluster,  # noqa: F811
    recorded: tuple[str, str, str],
) -> None:
    """README: "A user mistake prints one line on stderr, never a traceback". A write
    the server refused inside a pipelined commit (a role that may only read) printed
    psycopg's own logged warning ("error ignored terminating <psycopg.Pipeline ...>:
    pipeline aborted") before cpstore's line; the real ``cpstore`` process, not
    cli.main, since pytest's logging capture would hide the warning."""
    url, _, head = recorded
    schema = _schema_of(url)
    role = f"ro2_{schema}"
    _sql(pg_cluster, f'CREATE ROLE "{role}" LOGIN')
    _sql(pg_cluster, f'GRANT USAGE ON SCHEMA "{schema}" TO "{role}"')
    _sql(pg_cluster, f'GRANT SELECT ON ALL TABLES IN SCHEMA "{schema}" TO "{role}"')
    ro_url = url.replace("postgres@", f"{role}@", 1)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for argv in (["validate", head, head, "--record"], ["gc", "--keep-last", "1"]):
        done = subprocess.run(
            [sys.executable, "-m", "cpstore.cli", *argv, "--store", ro_url],
            check=False,
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        lines = done.stderr.splitlines()
        assert done.returncode == 7 and len(lines) == 1, (argv, done.stderr)
        assert lines[0].startswith(f"cpstore {argv[0]}: the store cannot be written"), lines


def test_psycopgs_ignored_pipeline_error_about_a_cpstore_connection_is_not_logged(
    pg_cluster: Cluster,  # noqa: F811
    recorded: tuple[str, str, str],
) -> None:
    """The same in-process, many times (the warning came when the server's refusal reached
    psycopg before the pipeline's end: about one refused write in ten): cpstore raises
    the refusal itself (StoreReadOnlyError), so psycopg's second word on it, the
    "error ignored terminating" warning, is noise on stderr (logging's last resort)."""
    url = recorded[0]
    schema = _schema_of(url)
    role = f"ro3_{schema}"
    _sql(pg_cluster, f'CREATE ROLE "{role}" LOGIN')
    _sql(pg_cluster, f'GRANT USAGE ON SCHEMA "{schema}" TO "{role}"')
    _sql(pg_cluster, f'GRANT SELECT ON ALL TABLES IN SCHEMA "{schema}" TO "{role}"')
    seen: list[str] = []

    class Seen(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    handler = Seen()
    logging.getLogger("psycopg").addHandler(handler)
    try:
        with cpstore.open(url.replace("postgres@", f"{role}@", 1)) as store:
            for i in range(150):
                with pytest.raises(StoreReadOnlyError):
                    store.append_audit("note", {"i": i})
    finally:
        logging.getLogger("psycopg").removeHandler(handler)
    assert not [m for m in seen if "error ignored terminating" in m], seen[:3]
