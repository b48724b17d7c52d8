"""The PostgreSQL backend itself: opening by URL, the tables, damage, modes, the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pg_cluster import Cluster, fresh_url, pg_cluster, pg_url  # noqa: F401 - fixtures
from stored import raw_items

import cpstore
from cpstore.cli import main
from cpstore.errors import (
    AuditChainError,
    FormatVersionError,
    IntegrityError,
    InvalidInputError,
    NotFoundError,
    StoreConnectionError,
    StoreError,
    StoreReadOnlyError,
)
from cpstore.native.canonical import encode_value
from cpstore.store.facade import Store
from cpstore.store.lmdb_env import DB_NAMES
from cpstore.store.maintenance import copy_store
from cpstore.store.pg_backend import PgBackend
from cpstore.store.pg_open import parse_url
from cpstore.store.stats import store_stats

KEY = b"k" * 32


def _sql(url: str, statement: str, params: tuple[Any, ...] = ()) -> list[Any]:
    """Run one statement on the store's database (damage, inspection), autocommit."""
    with psycopg.connect(parse_url(url).conninfo, autocommit=True) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description is not None else []


def _schema(url: str) -> str:
    return parse_url(url).schema


def _record(store: Store, run: str = "run", steps: int = 5) -> list[str]:
    """A deterministic run touching every log; the checkpoint ids, oldest first."""
    rec = store.recorder(run)
    ids = []
    for i in range(steps):
        rec.observe(i, "cfg", b"payload %d" % i, pinned_at=1.0)
        rec.tokens([("rng", i), ("clock", i * 0.5)])
        rec.effect("sink", b"effect %d" % i)
        rec.transcript(b"said %d" % i)
        ids.append(rec.checkpoint(i, {"messages": ["m"] * i, "blob": bytes(range(256)) * 40}))
    return ids


def _table(url: str, name: str) -> dict[bytes, bytes]:
    rows = _sql(url, f'SELECT k, v FROM "{_schema(url)}"."{name}"')
    return {bytes(k): bytes(v) for k, v in rows}


class TestOpening:
    def test_a_postgresql_url_opens_the_postgres_backend_not_a_folder(
        self, pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """open("postgresql://...") makes schema and tables, and no folder of that name."""
        monkeypatch.chdir(tmp_path)
        with cpstore.open(pg_url) as store:
            assert isinstance(store.backend, PgBackend)
            assert store.ref("run") is None
        assert os.listdir(tmp_path) == []
        tables = {
            r[0]
            for r in _sql(
                pg_url, "SELECT tablename FROM pg_tables WHERE schemaname = %s", (_schema(pg_url),)
            )
        }
        assert tables == {*DB_NAMES, "counts"}  # counts: the kept refs count (pgcount72)

    def test_the_same_run_stores_the_same_bytes_under_the_same_keys_as_lmdb(
        self, pg_url: str, tmp_path: Path
    ) -> None:
        """Objects, refs, ledgers and manifests are byte-identical on both engines."""
        with cpstore.open(tmp_path / "s") as lm, cpstore.open(pg_url) as pg:
            assert _record(lm) == _record(pg)
            with lm.backend.read_txn() as txn:
                for name in ("objects", "refs", "ledgers", "checkpoints", "audit"):
                    # LMDB keeps objects and records in its heap (layout 5), PostgreSQL in
                    # the direct tables: the same bytes under the same keys either way.
                    mine = dict(raw_items(txn, lm.backend.dbs, name))
                    theirs = _table(pg_url, name)
                    if name == "checkpoints":  # the 16-byte header holds created_at
                        mine = {k: v[16:] for k, v in mine.items()}
                        theirs = {k: v[16:] for k, v in theirs.items()}
                    assert theirs == mine, name

    def test_a_missing_store_is_not_found_without_create_or_when_readonly(
        self, pg_url: str
    ) -> None:
        """create=False and readonly opens of an empty schema make nothing."""
        with pytest.raises(NotFoundError):
            cpstore.open(pg_url, create=False)
        with pytest.raises(NotFoundError):
            cpstore.open(pg_url, readonly=True)
        assert (
            _sql(pg_url, "SELECT 1 FROM pg_namespace WHERE nspname = %s", (_schema(pg_url),)) == []
        )

    def test_a_schema_with_store_tables_but_no_format_record_is_refused(self, pg_url: str) -> None:
        """A foreign schema that happens to hold an objects table is not taken over."""
        schema = _schema(pg_url)
        _sql(pg_url, f'CREATE SCHEMA "{schema}"')
        _sql(pg_url, f'CREATE TABLE "{schema}"."objects" (k bytea PRIMARY KEY, v bytea)')
        with pytest.raises(FormatVersionError):
            cpstore.open(pg_url)

    def test_bad_urls_are_clear_errors(self, pg_cluster: Cluster) -> None:
        """A bad schema name is InvalidInputError; an unreachable server StoreConnectionError."""
        with pytest.raises(InvalidInputError):
            cpstore.open(pg_cluster.url("Bad-Name"))
        with pytest.raises(InvalidInputError):
            cpstore.open(pg_cluster.url("ok", pool_max="zero"))
        with pytest.raises(StoreConnectionError):
            cpstore.open("postgresql://postgres@/postgres?host=/nonexistent-cpstore-dir")

    def test_a_password_never_shows_in_the_store_path(self, pg_cluster: Cluster) -> None:
        """store.path and messages show *** where the URL had a password."""
        url = fresh_url().replace("postgres@", "postgres:s3cret@")
        with cpstore.open(url) as store:
            assert "s3cret" not in store.path and "***" in store.path

    def test_without_the_extra_a_url_is_a_clear_error_not_a_folder(self, tmp_path: Path) -> None:
        """psycopg missing: StoreError naming cpstore[postgres]; no folder is made."""
        code = (
            "import sys; sys.modules['psycopg'] = None\n"
            "import cpstore\n"
            "try:\n"
            "    cpstore.open('postgresql://u@/db?host=/x')\n"
            "except cpstore.StoreError as e:\n"
            "    print(type(e).__name__, e)\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True
        )
        assert out.stdout.startswith("StoreError") and "cpstore[postgres]" in out.stdout
        assert os.listdir(tmp_path) == []


class TestDamage:
    def test_different_bytes_under_an_existing_digest_is_an_integrity_error(
        self, pg_url: str
    ) -> None:
        """Insert-if-absent: a second put of an object whose row was altered refuses."""
        with cpstore.open(pg_url) as store:
            key = store.put_object(b"hello")
            _sql(
                pg_url,
                f'UPDATE "{_schema(pg_url)}".objects SET v = %s WHERE k = %s',
                (b"HELLO", key),
            )
            with pytest.raises(IntegrityError):
                store.put_object(b"hello")
            with pytest.raises(IntegrityError):
                store.get_object(key)
            report = store.verify()
            assert not report.ok
            assert any(p.what == "object bytes do not match their digest" for p in report.problems)

    def test_a_deleted_object_is_a_dangling_reference(self, pg_url: str) -> None:
        """verify names a checkpoint's object removed from the table."""
        with cpstore.open(pg_url) as store:
            cid = _record(store, steps=1)[0]
            transcript = bytes.fromhex(store.manifest(cid).transcript_digest or "")
            _sql(pg_url, f'DELETE FROM "{_schema(pg_url)}".objects WHERE k = %s', (transcript,))
            assert not store.verify().ok
            assert store.verify_checkpoint(cid)

    def test_a_tampered_audit_record_breaks_the_chain(self, pg_url: str) -> None:
        """Rewriting audit/0 in SQL is found by verify and by get_audit."""
        with cpstore.open(pg_url) as store:
            a = store.append_audit("decision", {"verdict": "REJECT"})
            store.append_audit("decision", {"verdict": "ACCEPT"})
            forged = encode_value(
                {
                    "index": 0,
                    "prev": None,
                    "kind": "decision",
                    "body": {"verdict": "ACCEPT"},
                    "time": a.time,
                }
            )
            _sql(
                pg_url,
                f'UPDATE "{_schema(pg_url)}".audit SET v = %s WHERE k = %s',
                (forged, (0).to_bytes(8, "big")),
            )
            assert any(p.what == "audit chain broken" for p in store.verify().problems)
            with pytest.raises(AuditChainError):
                store.get_audit(a.digest)

    def test_keyed_macs_work_and_refuse_a_wrong_key_and_a_forgery(self, pg_url: str) -> None:
        """With an audit key the store is keyed, a wrong key is refused, a forged record fails."""
        with cpstore.open(pg_url, audit_key=KEY) as store:
            assert store.audit_keyed
            store.append_audit("decision", {"verdict": "REJECT"})
            store.check_audit_mac(0)
            assert store.verify().ok
        with pytest.raises(StoreError):
            cpstore.open(pg_url, audit_key=b"x" * 32)
        schema = _schema(pg_url)
        first = (0).to_bytes(8, "big")
        raw = _sql(pg_url, f'SELECT v FROM "{schema}".audit WHERE k = %s', (first,))
        body = bytes(raw[0][0]).replace(b"REJECT", b"ACCEPT")
        _sql(pg_url, f'UPDATE "{schema}".audit SET v = %s WHERE k = %s', (body, first))
        with cpstore.open(pg_url, audit_key=KEY) as store, pytest.raises(AuditChainError):
            store.check_audit_mac(0)


class TestModes:
    def test_a_readonly_handle_refuses_every_write(self, pg_url: str) -> None:
        """readonly=True reads the store and raises StoreReadOnlyError on writes."""
        with cpstore.open(pg_url) as store:
            cid = _record(store, steps=2)[-1]
        with cpstore.open(pg_url, readonly=True) as ro:
            assert ro.ref("run") == cid
            with pytest.raises(StoreReadOnlyError):
                ro.put_object(b"x")
            with pytest.raises(StoreReadOnlyError):
                ro.append_audit("note", {})

    def test_batched_checkpoints_are_queued_then_committed_together(self, pg_url: str) -> None:
        """batched: nothing is visible to another handle until flush, then all of it."""
        with (
            cpstore.open(pg_url, durability="batched", batch_size=100) as store,
            cpstore.open(pg_url) as other,
        ):
            rec = store.recorder("run")
            ids = [rec.checkpoint(i, {"i": i}) for i in range(5)]
            assert store.pending == 5 and other.ref("run") is None
            store.flush()
            assert other.ref("run") == ids[-1]
            assert [m.id for m in other.history("run")] == ids[::-1]

    def test_durability_none_commits_at_once(self, pg_url: str) -> None:
        """none: each checkpoint is committed (asynchronous commit) before it returns."""
        with cpstore.open(pg_url, durability="none") as store, cpstore.open(pg_url) as other:
            cid = store.recorder("run").checkpoint(1, {"a": 1})
            assert other.ref("run") == cid

    def test_stats_and_disk_bytes_count_the_tables(self, pg_url: str) -> None:
        """stats sees what was recorded; disk_bytes is pg_total_relation_size of the tables."""
        with cpstore.open(pg_url) as store:
            _record(store, steps=3)
            s = store_stats(store)
            assert (s.checkpoints, s.refs) == (3, 1)
            assert s.objects == len(_table(pg_url, "objects"))
            assert s.disk_bytes > s.object_bytes > 0

    def test_space_is_the_tables_bytes_and_copy_points_to_pull(
        self, pg_url: str, tmp_path: Path
    ) -> None:
        """space() reports the tables' bytes; copy into a folder is refused, naming pull."""
        with cpstore.open(pg_url) as store:
            _record(store, steps=2)
            space = store.space()
            assert space.file_bytes == space.used_bytes == store.disk_bytes() > 0
            assert space.reusable_bytes == 0
            with pytest.raises(InvalidInputError, match="cpstore pull"):  # exit 3 (audit61)
                copy_store(store, tmp_path / "copy")
            assert not any((tmp_path / "copy").glob("*.mdb"))


class TestCli:
    def test_a_url_in_cpstore_path_reaches_every_command(
        self, pg_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """$CPSTORE_PATH=postgresql://...: log, verify, stats and gc work on the server."""
        with cpstore.open(pg_url) as store:
            ids = _record(store, steps=4)
        monkeypatch.setenv("CPSTORE_PATH", pg_url)
        assert main(["log", "run"]) == 0
        assert ids[-1] in capsys.readouterr().out
        assert main(["verify"]) == 0
        assert "ok" in capsys.readouterr().out
        assert main(["gc", "--keep-last", "2", "--json"]) == 0
        assert '"checkpoints_removed": 2' in capsys.readouterr().out
        assert main(["stats", "--json"]) == 0
        assert '"checkpoints": 2' in capsys.readouterr().out

    def test_a_missing_store_url_exits_not_found(
        self, pg_url: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """No command makes a store: a URL naming an empty schema exits 4 and creates nothing."""
        assert main(["log", "run", "--store", pg_url]) == 4
        assert "no store" in capsys.readouterr().err
        assert (
            _sql(pg_url, "SELECT 1 FROM pg_namespace WHERE nspname = %s", (_schema(pg_url),)) == []
        )


def _walk_back(store: Store, start: bytes | None) -> list[bytes]:
    """Keys of ``objects`` walked with prev() from set_range(start) (or from the end)."""
    out: list[bytes] = []
    with store.backend.read_txn() as txn:
        cur = txn.cursor(db=store.backend.db("objects"))
        ok = cur.set_range(start) and cur.prev() if start is not None else cur.prev()
        while ok:
            out.append(bytes(cur.key()))
            ok = cur.prev()
    return out


def test_a_cursor_walks_backwards_as_lmdbs_does(pg_url: str, tmp_path: Path) -> None:
    """prev() from the end and from a set_range, across page boundaries, equals LMDB's walk."""
    keys = [bytes([i]) * 16 for i in range(0, 250, 7)]  # 36 keys: several pages backwards
    walks = []
    for where in (pg_url, str(tmp_path / "lmdb")):
        with cpstore.open(where) as store:
            store.backend.write_txn(
                lambda txn, s=store: [txn.put(k, b"v", db=s.backend.db("objects")) for k in keys]
            )
            walks.append([_walk_back(store, None), _walk_back(store, bytes([100]) * 16)])
    assert walks[0] == walks[1]
    assert walks[0][0] == sorted(keys, reverse=True)
    assert walks[0][1] == sorted((k for k in keys if k < bytes([100]) * 16), reverse=True)
