"""audit32: operator commands that only look (and ``gc --dry-run``) change nothing, and
bad input ends in one line with its exit code, never a traceback, on LMDB and PostgreSQL."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import psycopg
import pytest
from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures
from stored import to_layout_5
from test_cli_operator import _DOC

import cpstore
from cpstore import cli
from cpstore.native.canonical import decode_value, encode_value
from cpstore.store.lmdb_open import FORMAT, FORMAT_KEY
from cpstore.store.pg_open import parse_url


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _record(url: str) -> tuple[str, str]:
    """Two runs of two checkpoints each; returns (run-a's first, run-a's head)."""
    with cpstore.open(url) as store:
        heads = []
        for run in ("run-a", "run-b"):
            rec = store.recorder(run)
            rec.observe(1, "read_config", b"cfg-v1", pinned_at=1.0)
            rec.token("rng", 7)
            first = rec.checkpoint(1, {"memory": "hello", "plan": [1, 2]}, seal_ledger=False)
            rec.effect("crm.update", b"ticket")
            rec.transcript(b"the answer")
            heads.append((first, rec.checkpoint(2, {"memory": "hello", "plan": [1, 2, 3]})))
    return heads[0]


def _pg_format(url: str, version: int | None = None) -> int:
    """The format record's version in a PostgreSQL store (first set to ``version``)."""
    schema = parse_url(url).schema
    with psycopg.connect(parse_url(url).conninfo, autocommit=True) as conn:
        if version is not None:
            conn.execute(
                f'UPDATE "{schema}"."meta" SET v = %s WHERE k = %s',
                (encode_value({**FORMAT, "version": version}), FORMAT_KEY),
            )
        row = conn.execute(
            f'SELECT v FROM "{schema}"."meta" WHERE k = %s', (FORMAT_KEY,)
        ).fetchone()
    assert row is not None
    return int(decode_value(bytes(row[0]))["version"])


def _older_layout(url: str) -> int:
    """Rewrite the closed store as an older release left it; returns that layout."""
    if url.startswith("postgresql://"):
        return _pg_format(url, 4)
    assert to_layout_5(url) > 0
    return 5


def _layout(url: str) -> int:
    if url.startswith("postgresql://"):
        return _pg_format(url)
    with cpstore.open(url, readonly=True) as store:
        return int(store.backend.layout)


def _data_bytes(url: str) -> str:
    with open(os.path.join(url, "data.mdb"), "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


# -- gc --dry-run on a store an older release wrote ----------------------------------------


def test_gc_dry_run_does_not_upgrade_an_older_layout(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A writable open upgrades an older layout (one way: the older release then refuses
    the store); the dry run, which says "nothing changed", must not be that open. It is
    refused in one line, the format record and (LMDB) every byte of the data file as they
    were; a real gc still upgrades and sweeps."""
    first, _ = _record(url)
    old = _older_layout(url)
    before = None if url.startswith("postgresql://") else _data_bytes(url)
    code, out, err = _run(["gc", "--keep-last", "1", "--dry-run", "--store", url], capsys)
    assert _layout(url) == old, "the dry run upgraded the store's layout"
    if before is not None:
        assert _data_bytes(url) == before
    assert code == cli.EXIT_UNAVAILABLE, (code, out, err)
    assert "Traceback" not in err and "dry run" in err and f"layout {old}" in err
    assert "nothing changed" not in out
    code, out, _ = _run(["gc", "--keep-last", "1", "--store", url, "--json"], capsys)
    assert code == 0 and first in json.loads(out)["checkpoint_ids"]
    assert _layout(url) > old


def _pg_rows(url: str) -> str:
    """A digest of every row of every table of a PostgreSQL store's schema."""
    schema = parse_url(url).schema
    h = hashlib.sha256()
    with psycopg.connect(parse_url(url).conninfo, autocommit=True) as conn:
        tables = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
            "ORDER BY table_name",
            (schema,),
        ).fetchall()
        for (table,) in tables:
            h.update(table.encode() + b"\0")
            # every column: the k/v tables and pgcount72's counts (name text, n bigint)
            for row in conn.execute(f'SELECT * FROM "{schema}"."{table}" ORDER BY 1'):
                for cell in row:
                    got = bytes(cell) if isinstance(cell, memoryview | bytes) else repr(cell)
                    raw = got if isinstance(got, bytes) else got.encode()
                    h.update(len(raw).to_bytes(4, "big") + raw)
    return h.hexdigest()


def _store_bytes(url: str) -> str:
    return _pg_rows(url) if url.startswith("postgresql://") else _data_bytes(url)


def test_gc_dry_run_on_a_current_store_changes_no_byte_and_keeps_everything(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The pin beside the refusal: at the current layout the dry run reports and the
    store is byte for byte what it was (LMDB: the data file; PostgreSQL: every row of
    every table), every looking command too."""
    first, head = _record(url)
    before = _store_bytes(url)
    looks = [
        ["gc", "--keep-last", "1", "--dry-run", "--json"],
        ["gc", "--delete-run", "run-a", "--dry-run"],
        ["verify"],
        ["inspect", head, "--tokens", "5"],
        ["cat", head, "tokens"],
        ["cat", head, "transcript"],
        ["diff", first, head],
        ["log"],
        ["log", "run-a"],
        ["stats"],
        ["audit", "--check"],
        ["validate", first, head],
        ["lg-diff", "t-none", "t-none"],
    ]
    for argv in looks:
        code, _, err = _run([*argv, "--store", url], capsys)
        assert code in (0, cli.EXIT_DIFFERENT, cli.EXIT_REJECT, cli.EXIT_NOT_FOUND), (argv, err)
        assert _store_bytes(url) == before, argv
    with cpstore.open(url, readonly=True) as store:
        assert store.manifest(first).id == first
    code, _, _ = _run(["gc", "--keep-last", "1", "--store", url], capsys)
    assert code == 0 and _store_bytes(url) != before  # the comparison sees a real sweep


# -- OS errors about a path: one line and its exit code ------------------------------------


def test_a_destination_below_a_regular_file_is_bad_input_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`copy`/`convert` to ``FILE/x`` (NotADirectoryError) exit 3 in one line; the store
    and the file are untouched, and nothing is left behind."""
    url = str(tmp_path / "s")
    _record(url)
    before = _data_bytes(url)
    plain = tmp_path / "plain"
    plain.write_bytes(b"not a folder")
    doc = tmp_path / "doc.json"
    doc.write_text(json.dumps(_DOC))
    for argv in (
        ["copy", str(plain / "backup"), "--store", url],
        ["convert", str(doc), str(plain / "out.json")],
    ):
        code, _, err = _run(argv, capsys)
        assert code == cli.EXIT_BAD_INPUT, (argv, code, err)
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        assert err.startswith(f"cpstore {argv[0]}: ") and str(plain) in err
    assert plain.read_bytes() == b"not a folder"
    assert _data_bytes(url) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["doc.json", "plain", "s"]


def test_a_full_disk_while_writing_is_exit_7_and_leaves_no_partial_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An OS error no path explains (ENOSPC at the fsync) is "unavailable", one line."""
    import errno  # noqa: PLC0415

    doc = tmp_path / "doc.json"
    doc.write_text(json.dumps(_DOC))

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    code, _, err = _run(["convert", str(doc), str(tmp_path / "out.cprun")], capsys)
    assert code == cli.EXIT_UNAVAILABLE, (code, err)
    assert "Traceback" not in err and "No space left on device" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["doc.json"]


# -- push/pull of a run the source lacks -------------------------------------------------


def _exists(url: str) -> bool:
    """Whether a store is at ``url`` (a folder with a data file, or a schema)."""
    if not url.startswith("postgresql://"):
        return os.path.exists(url)
    schema = parse_url(url).schema
    with psycopg.connect(parse_url(url).conninfo, autocommit=True) as conn:
        row = conn.execute(
            "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", (schema,)
        ).fetchone()
    return row is not None


def test_a_mistyped_run_leaves_no_new_store_at_the_receiver(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`push DEST --run typo` / `pull SRC --run typo` is exit 4 and makes no store at a
    receiving path that had none (before: an empty store was made, then the run looked
    up); a real push then makes it."""
    src = str(tmp_path / "src")
    _record(src)
    for argv in (
        ["push", url, "--run", "run-typo", "--store", src],
        ["pull", src, "--run", "run-typo", "--store", url],
    ):
        code, _, err = _run(argv, capsys)
        assert code == cli.EXIT_NOT_FOUND and "no such run" in err, (argv, code, err)
        assert not _exists(url), argv
    code, _, err = _run(["push", url, "--run", "run-a", "--store", src], capsys)
    assert code == 0, err
    with cpstore.open(url, readonly=True) as store:
        assert set(store.branches("run-a")) == {"main"} and not store.branches("run-b")


# -- audit --check: which problems are the audit log's -------------------------------------


@pytest.mark.parametrize("run_id", ["audit-bot", "run-a"])
def test_audit_check_blames_the_chain_only_for_the_chain(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], run_id: str
) -> None:
    """A store damaged outside the audit log (a ref whose checkpoint is gone) is exit 5
    "STORE DAMAGED" with the chain verifying, whatever the run is called: a run named
    "audit-bot" made the word "audit" in the problem's place read as a broken chain."""
    from stored import edit_raw  # noqa: PLC0415

    url = str(tmp_path / "s")
    with cpstore.open(url) as store:
        head = store.recorder(run_id).checkpoint(1, {"a": 1})
    edit_raw(url, "checkpoints", bytes.fromhex(head), lambda old: None)
    code, out, _ = _run(["audit", "--check", "--store", url], capsys)
    assert code == cli.EXIT_INTEGRITY
    assert "audit chain verifies" in out and "AUDIT CHAIN BROKEN" not in out, out
    assert f"refs/{run_id}/main" in out
    code, out, _ = _run(["audit", "--check", "--json", "--store", url], capsys)
    data = json.loads(out)
    assert code == cli.EXIT_INTEGRITY and data["store_ok"] is False
    assert data["chain_ok"] is True, data["problems"]


def test_audit_check_blames_the_chain_for_a_lost_gate_index_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The other way round: a problem of the audit log's own indexes (a decision's row in
    the gate index deleted; its text names no "audit") is the chain's: chain_ok false."""
    from stored import damage  # noqa: PLC0415

    from cpstore.store.audit_gates import DECISION_ID_PREFIX  # noqa: PLC0415

    url = str(tmp_path / "s")
    _, head = _record(url)
    with cpstore.open(url) as store:
        with store.read(head) as cp:
            session = cpstore.ReplaySession(cp, mode=cpstore.ReplayMode.BEST_EFFORT)
            replayed = session.finish("another state")
        decision = cpstore.validate(head, replayed, store=store)
        key = DECISION_ID_PREFIX + decision.id.encode()

        def drop(txn: object, dbs: dict[str, object]) -> None:
            assert txn.delete(key, db=dbs["meta"])  # type: ignore[attr-defined]

        damage(store, drop)
    code, out, _ = _run(["audit", "--check", "--json", "--store", url], capsys)
    data = json.loads(out)
    assert code == cli.EXIT_INTEGRITY and data["store_ok"] is False, data
    assert any(p["where"].startswith("meta/decision_id/") for p in data["problems"]), data
    assert data["chain_ok"] is False, data["problems"]


def test_audit_check_blames_the_chain_for_a_lost_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The chain itself: the first of two decision records deleted is chain_ok false, the
    listing still shown, exit 5."""
    from stored import edit_raw  # noqa: PLC0415

    url = str(tmp_path / "s")
    _, head = _record(url)
    with cpstore.open(url) as store:
        for state in ("another state", "a third"):
            with store.read(head) as cp:
                session = cpstore.ReplaySession(cp, mode=cpstore.ReplayMode.BEST_EFFORT)
                replayed = session.finish(state)
            cpstore.validate(head, replayed, store=store)
    edit_raw(url, "audit", (0).to_bytes(8, "big"), lambda old: None)
    code, out, _ = _run(["audit", "--check", "--json", "--store", url], capsys)
    data = json.loads(out)
    assert code == cli.EXIT_INTEGRITY and data["chain_ok"] is False, data["problems"]
    assert [r["index"] for r in data["records"]] == [1]
    assert any(p["where"] == "audit/1" for p in data["problems"])


# -- an id the store does not hold ---------------------------------------------------------


def test_diff_of_an_id_the_store_does_not_hold_is_not_found_not_damage(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A pruned id and an id never stored are exit 4 as in inspect and cat; before, diff
    said "stored data is damaged" (exit 5) of a store whose verify is clean."""
    first, head = _record(url)
    code, _, _ = _run(["gc", "--keep-last", "1", "--store", url], capsys)
    assert code == 0
    never = "f" * 32
    for a, b, says in ((first, head, "pruned"), (never, head, "no such"), (head, never, "no such")):
        for argv in (["diff", a, b], ["inspect", a if a != head else b]):
            code, _, err = _run([*argv, "--store", url], capsys)
            assert code == cli.EXIT_NOT_FOUND and says in err, (argv, code, err)
            assert "damaged" not in err
    code, _, _ = _run(["verify", "--store", url], capsys)
    assert code == 0


# -- copy and compact take folders ---------------------------------------------------------


@pytest.mark.usefixtures("pg_cluster")
def test_copy_into_a_url_and_compact_of_a_url_are_refused_up_front(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`copy postgresql://... --store FOLDER` wrote a whole LMDB copy into a folder tree
    named after the URL ("postgresql:/postgres@/...") under the working directory, left it
    there, and said "no store in this database schema" (exit 4); `compact --store URL`
    said "no store at this path" (exit 4) of a store that is there. Both are exit 3
    naming what to use instead, and nothing is written anywhere."""
    from pg_cluster import fresh_url  # noqa: PLC0415

    folder = str(tmp_path / "s")
    _record(folder)
    url = fresh_url()
    _record(url)
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        code, _, err = _run(["copy", fresh_url(), "--store", folder], capsys)
        assert code == cli.EXIT_BAD_INPUT and "push" in err, (code, err)
        code, _, err = _run(["compact", "--store", url], capsys)
        assert code == cli.EXIT_BAD_INPUT and "PostgreSQL" in err, (code, err)
    finally:
        os.chdir(here)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]


# -- a store of a newer format -------------------------------------------------------------


def test_every_command_refuses_a_newer_format_and_writes_nothing(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A format record of layout 7 (a newer release's): every command is exit 9 in one
    line; the store's bytes (LMDB) and format record stay, and no receiver or copy is
    made. Clean; pinned so that no command starts reading or writing such a store."""
    _record(url)
    if url.startswith("postgresql://"):
        _pg_format(url, 7)
    else:
        from stored import edit_raw  # noqa: PLC0415

        newer = encode_value({**FORMAT, "version": 7})
        edit_raw(url, "meta", FORMAT_KEY, lambda old: newer)
    before = None if url.startswith("postgresql://") else _data_bytes(url)
    made = str(tmp_path / "made")
    commands = [
        ["verify"],
        ["log"],
        ["stats"],
        ["audit", "--check"],
        ["inspect", "run-a@main"],
        ["cat", "run-a@main", "transcript"],
        ["gc", "--keep-last", "1"],
        ["gc", "--keep-last", "1", "--dry-run"],
        ["sign-off", "0" * 32, "--operator", "o", "--reason", "r"],
        ["push", made],
    ]
    if not url.startswith("postgresql://"):
        commands += [["compact"], ["copy", made]]
    for argv in commands:
        code, _, err = _run([*argv, "--store", url], capsys)
        assert code == cli.EXIT_FORMAT and "unknown version" in err, (argv, code, err)
    code, _, err = _run(["pull", url, "--store", made], capsys)
    assert code == cli.EXIT_FORMAT, err
    assert not os.path.exists(made)
    if before is not None:
        assert _data_bytes(url) == before
    else:
        assert _pg_format(url) == 7


# -- gc options that do not go together ----------------------------------------------------


def test_gc_delete_run_with_run_is_refused_not_half_read(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--run` says which run `--keep-last` prunes; beside `--delete-run` it was dropped
    without a word and the other run deleted (exit 0). Now exit 3, nothing removed (the
    API's gc(delete_run=, run_id=) alike)."""
    first, head = _record(url)
    code, _, err = _run(["gc", "--delete-run", "run-a", "--run", "run-b", "--store", url], capsys)
    assert code == cli.EXIT_BAD_INPUT and "--run" in err, (code, err)
    with cpstore.open(url) as store:
        assert store.ref("run-a", "main") == head and store.manifest(first).id == first
        with pytest.raises(cpstore.InvalidInputError):
            store.gc(delete_run="run-a", run_id="run-b")
        assert store.ref("run-a", "main") == head


# -- validate against a PostgreSQL store ---------------------------------------------------


def test_validate_takes_a_store_url_as_every_store_command_does(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`validate A B --store postgresql://...` was "no store at this path" (exit 4): the
    path check looked for a folder named like the URL. Now the same verdict on both
    backends, nothing recorded unless --record, then the decision in the audit log."""
    first, head = _record(url)
    code, out, err = _run(["validate", head, head, "--json", "--store", url], capsys)
    assert "no store" not in err and out, (code, err)
    verdict = json.loads(out)["verdict"]
    assert verdict in ("ACCEPT", "QUARANTINE")  # the same checkpoint on both sides
    assert code == {"ACCEPT": cli.EXIT_OK, "QUARANTINE": cli.EXIT_QUARANTINE}[verdict]
    code, out, err = _run(["validate", first, head, "--json", "--store", url], capsys)
    assert code == cli.EXIT_REJECT and json.loads(out)["verdict"] == "REJECT", err
    code, out, _ = _run(["audit", "--json", "--store", url], capsys)
    assert code == 0 and json.loads(out)["records"] == []
    code, out, err = _run(["validate", first, head, "--record", "--store", url], capsys)
    assert code == cli.EXIT_REJECT, err
    code, out, _ = _run(["audit", "--kind", "decision", "--json", "--store", url], capsys)
    assert [r["kind"] for r in json.loads(out)["records"]] == ["decision"]


# -- audit --check walks as verify does ----------------------------------------------------


def test_audit_check_survives_a_walk_liblmdb_dies_in(tmp_path: Path) -> None:
    """`audit --check` "verifies the whole store (as cpstore verify)": a walk that kills
    liblmdb (SIGABRT on a damaged page; here Store.verify aborts) is exit 5 in one line,
    as verify says it. Before, the walk ran in the command's own process, which died of
    the signal with no word (exit -6)."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    url = str(tmp_path / "s")
    _record(url)
    aborting = (
        "import os, sys\n"
        "from cpstore import cli\n"
        "from cpstore.store.facade import Store\n"
        "Store.verify = lambda self, **kw: os.abort()\n"
        "sys.exit(cli.main(['audit', '--check', '--store', sys.argv[1]]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", aborting, url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == cli.EXIT_INTEGRITY, (proc.returncode, proc.stderr)
    assert len(proc.stderr.splitlines()) == 1 and "liblmdb died with SIGABRT" in proc.stderr


def test_compact_of_a_damaged_store_blames_the_store_not_its_copy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """compact verifies the store before copying it: damage found there was reported as
    "the copy fails verification", sending the operator after a copy that was never made.
    Exit 5 naming the store and the object; nothing swapped, no copy left."""
    from stored import edit_raw, flip_byte  # noqa: PLC0415

    url = str(tmp_path / "s")
    _, head = _record(url)
    with cpstore.open(url, readonly=True) as store:
        key = bytes.fromhex(store.manifest(head).state_parts["plan"])
    edit_raw(url, "objects", key, flip_byte(-1))
    before = _data_bytes(url)
    code, _, err = _run(["compact", "--store", url], capsys)
    assert code == cli.EXIT_INTEGRITY and key.hex() in err, err
    assert "the store" in err and "the copy" not in err, err
    assert _data_bytes(url) == before and sorted(os.listdir(url)) == ["data.mdb", "lock.mdb"]


def test_a_push_or_pull_onto_its_own_store_is_bad_input(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """push/pull with the same store on both sides (a folder, through a symlink too, or
    one URL): exit 3 saying so, nothing written. On LMDB it was exit 7 "already open in
    this process with another mode", which names no mistake of the operator's."""
    _record(url)
    before = _store_bytes(url)
    names = [url]
    if not url.startswith("postgresql://"):
        os.symlink(url, tmp_path / "link")
        names.append(str(tmp_path / "link"))
    for other in names:
        for argv in (["push", other, "--store", url], ["pull", other, "--store", url]):
            code, _, err = _run(argv, capsys)
            assert code == cli.EXIT_BAD_INPUT and "same store" in err, (argv, code, err)
    assert _store_bytes(url) == before
