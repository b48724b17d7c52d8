"""push / pull / transfer() between two spellings of ONE store: refused, nothing written.

Before this, two spellings of one PostgreSQL store's URL (the parameters in another
order, an added ``application_name``) passed the command line's string compare, and
``transfer()`` itself never looked: it copied nothing and said exit 0. The stores are
now told apart by what they are (the LMDB data file; the PostgreSQL server, database
and schema), not by how they are spelled: ``SameStoreError`` (bad input, exit 3),
before anything is written. Stores that only look alike (a PostgreSQL store's clone,
same schema name and store id, in another database) still transfer.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pg_cluster import Cluster, fresh_url, pg_cluster  # noqa: F401 - fixtures

import cpstore
from cpstore.errors import InvalidInputError, SameStoreError
from cpstore.store.pg_open import STORE_ID_KEY
from cpstore.store.transfer import transfer

ROOT = str(Path(__file__).resolve().parent.parent)


def _record(store: Any, run: str = "r", steps: int = 3) -> str:
    rec = store.recorder(run)
    cid = ""
    for i in range(steps):
        rec.observe(i, "cfg", b"payload %d" % i, pinned_at=1.0)
        cid = rec.checkpoint(i, {"step": i})
    return cid


def _state(at: str) -> tuple[dict[str, dict[str, str]], int]:
    """Every run's branches and the audit log's length: what a transfer would change."""
    with cpstore.open(at, readonly=True, create=False) as store:
        refs = {run: store.branches(run) for run in store.runs()}
        return refs, len(list(store.audit_records()))


def _respelled(url: str) -> str:
    """The same store's URL written another way: parameters reversed, one added."""
    head, _, query = url.partition("?")
    params = query.split("&")
    return head + "?" + "&".join([*reversed(params), "application_name=other_spelling"])


def _diverge(at: str) -> None:
    """A second run in the store (what a real transfer would copy if it ran)."""
    with cpstore.open(at) as store:
        _record(store, run="more", steps=1)


@pytest.mark.parametrize("source_readonly", [True, False])
def test_transfer_between_two_spellings_of_one_pg_store_is_refused(
    pg_cluster: Cluster,
    source_readonly: bool,
) -> None:
    url = fresh_url()
    other = _respelled(url)
    with cpstore.open(url) as store:
        _record(store)
    before = _state(url)
    with (
        cpstore.open(url, readonly=source_readonly) as src,
        cpstore.open(other) as dst,
        pytest.raises(SameStoreError) as caught,
    ):
        transfer(src.backend, dst.backend)
    err = caught.value
    assert isinstance(err, InvalidInputError)
    assert err.source == src.path and err.dest == dst.path
    assert "same store" in str(err) and "other_spelling" in str(err)
    assert _state(url) == before


def test_transfer_of_a_backend_onto_itself_is_refused(
    pg_cluster: Cluster,
    tmp_path: Path,
) -> None:
    for at in (fresh_url(), str(tmp_path / "s")):
        with cpstore.open(at) as store:
            _record(store)
        before = _state(at)
        with cpstore.open(at) as store, pytest.raises(SameStoreError):
            transfer(store.backend, store.backend)
        assert _state(at) == before


def test_transfer_between_two_lmdb_paths_of_one_folder_is_refused(tmp_path: Path) -> None:
    """A trailing slash, a relative path, a symlink: one data file, one store."""
    at = tmp_path / "s"
    with cpstore.open(at) as store:
        _record(store)
    os.symlink(at, tmp_path / "link")
    before = _state(str(at))
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        for other in (f"{at}/", "s", "./s/", str(tmp_path / "link")):
            with (
                cpstore.open(at) as src,
                cpstore.open(other) as dst,
                pytest.raises(SameStoreError),
            ):
                transfer(src.backend, dst.backend)
    finally:
        os.chdir(here)
    assert _state(str(at)) == before


def test_a_clone_in_another_database_is_another_store_and_transfers(
    pg_cluster: Cluster,
) -> None:
    """Same schema name, same store id (as pg_dump and a restore leave them), another
    database: two stores, and the transfer copies."""
    db = f"d_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(
        f"host={pg_cluster.socket_dir} user=postgres dbname=postgres", autocommit=True
    ) as conn:
        conn.execute(f'CREATE DATABASE "{db}"')
    url = fresh_url()
    clone = url.replace("/postgres?", f"/{db}?", 1)
    assert clone != url
    with cpstore.open(url) as store:
        head = _record(store)
    with cpstore.open(clone):
        pass
    schema = url.rpartition("schema=")[2].split("&")[0]
    with psycopg.connect(
        f"host={pg_cluster.socket_dir} user=postgres dbname=postgres", autocommit=True
    ) as conn:
        row = conn.execute(
            f'SELECT v FROM "{schema}".meta WHERE k = %s', (STORE_ID_KEY,)
        ).fetchone()
    assert row is not None
    with psycopg.connect(
        f"host={pg_cluster.socket_dir} user=postgres dbname={db}", autocommit=True
    ) as conn:
        conn.execute(f'UPDATE "{schema}".meta SET v = %s WHERE k = %s', (row[0], STORE_ID_KEY))
    with cpstore.open(url, readonly=True) as src, cpstore.open(clone) as dst:
        report = transfer(src.backend, dst.backend)
        assert report.refs_created == 1
        assert dst.ref("r") == head


def _cli(*argv: str, cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": ROOT}
    env.pop("CPSTORE_PATH", None)
    return subprocess.run(
        [sys.executable, "-m", "cpstore.cli", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
        cwd=cwd,
    )


def test_push_and_pull_between_two_spellings_of_one_pg_store_exit_3_writing_nothing(
    pg_cluster: Cluster,
) -> None:
    url = fresh_url()
    other = _respelled(url)
    with cpstore.open(url) as store:
        _record(store)
    _diverge(url)
    before = _state(url)
    for argv in (["push", other, "--store", url], ["pull", other, "--store", url]):
        done = _cli(*argv)
        assert done.returncode == 3, (argv, done.returncode, done.stderr)
        assert "same store" in done.stderr, done.stderr
    assert _state(url) == before


def test_push_and_pull_between_two_paths_of_one_lmdb_folder_exit_3(tmp_path: Path) -> None:
    at = tmp_path / "s"
    with cpstore.open(at) as store:
        _record(store)
    os.symlink(at, tmp_path / "link")
    before = _state(str(at))
    for other in ("s/", "./s", str(tmp_path / "link") + "/"):
        for argv in (["push", other, "--store", "s"], ["pull", other, "--store", str(at)]):
            done = _cli(*argv, cwd=str(tmp_path))
            assert done.returncode == 3, (argv, done.returncode, done.stderr)
            assert "same store" in done.stderr, done.stderr
    assert _state(str(at)) == before


def _schema(url: str) -> str:
    return url.rpartition("schema=")[2].split("&")[0]


def _store_id_row(cluster: Cluster, url: str, *, delete: bool = False) -> bytes | None:
    """The store's ``meta/store_id`` (deleted first with ``delete``: a store made before
    store ids)."""
    with psycopg.connect(
        f"host={cluster.socket_dir} user=postgres dbname=postgres", autocommit=True
    ) as conn:
        meta = f'"{_schema(url)}".meta'
        if delete:
            conn.execute(f"DELETE FROM {meta} WHERE k = %s", (STORE_ID_KEY,))
        row = conn.execute(f"SELECT v FROM {meta} WHERE k = %s", (STORE_ID_KEY,)).fetchone()
        return None if row is None else bytes(row[0])


def test_one_pg_store_without_a_store_id_is_still_one_store(
    pg_cluster: Cluster,
) -> None:
    """A store made before store ids: the servers are asked, the ids cannot answer."""
    url = fresh_url()
    with cpstore.open(url) as store:
        _record(store)
    assert _store_id_row(pg_cluster, url, delete=True) is None
    before = _state(url)
    with (
        cpstore.open(url, readonly=True) as src,
        cpstore.open(_respelled(url), readonly=True) as dst,
        pytest.raises(SameStoreError),
    ):
        transfer(src.backend, dst.backend)
    assert _state(url) == before and _store_id_row(pg_cluster, url) is None


def test_push_onto_its_own_pg_store_is_refused_before_the_receivers_writable_open(
    pg_cluster: Cluster,
) -> None:
    """The receiver's writable open writes a store id into a store made before them: the
    refusal comes before it, so not even that is written."""
    url = fresh_url()
    with cpstore.open(url) as store:
        _record(store)
    assert _store_id_row(pg_cluster, url, delete=True) is None
    before = _state(url)
    done = _cli("push", _respelled(url), "--store", url)
    assert done.returncode == 3 and "same store" in done.stderr, done.stderr
    assert _state(url) == before and _store_id_row(pg_cluster, url) is None


@pytest.fixture
def bind_alias(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(real folder, the same folder bind-mounted elsewhere); skipped where mount fails."""
    real, alias = tmp_path / "real", tmp_path / "alias"
    real.mkdir()
    alias.mkdir()
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("needs root and mount")
    done = subprocess.run(
        ["mount", "--bind", str(real), str(alias)], capture_output=True, check=False
    )
    if done.returncode != 0:
        pytest.skip(f"mount --bind refused: {done.stderr!r}")
    try:
        yield real, alias
    finally:
        subprocess.run(["umount", str(alias)], capture_output=True, check=False)


def test_push_onto_its_own_folder_through_a_bind_mount_is_bad_input(
    bind_alias: tuple[Path, Path],
) -> None:
    """Another real path to the one data file: exit 3 "same store" (it was exit 7, the
    registry's "already open in this process with another mode", naming no mistake)."""
    real, alias = bind_alias
    with cpstore.open(real / "s") as store:
        _record(store)
    before = _state(str(real / "s"))
    for argv in (
        ["push", str(alias / "s"), "--store", str(real / "s")],
        ["pull", str(alias / "s"), "--store", str(real / "s")],
    ):
        done = _cli(*argv)
        assert done.returncode == 3 and "same store" in done.stderr, (argv, done.stderr)
    assert _state(str(real / "s")) == before


def test_push_and_pull_help_say_one_store_is_refused() -> None:
    for command in ("push", "pull"):
        done = _cli(command, "--help")
        text = " ".join(done.stdout.split())
        assert done.returncode == 0 and "both one store, however spelled" in text, text
        assert "is refused (exit 3) before anything is written" in text, text
