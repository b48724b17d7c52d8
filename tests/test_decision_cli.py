"""``cpstore validate``: exit codes, table and JSON output, one-line errors."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path
from typing import Any

import pytest
from test_decision_support import clean_doc, replay_of

from cpstore.cli.validate_command import EXIT_FOR_VERDICT, add_validate_parser
from cpstore.decision.table import Verdict
from cpstore.errors import CpstoreError, DocumentError, NotFoundError
from cpstore.store.facade import open as open_store


def cli(argv: list[str]) -> tuple[int, str]:
    parser = argparse.ArgumentParser(prog="cpstore")
    add_validate_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["validate", *argv])
    out = io.StringIO()
    return args.handler(args, out=out), out.getvalue()


def write(tmp_path: Path, name: str, doc: dict[str, Any]) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


def test_accept_exits_zero_with_a_readable_table(tmp_path: Path) -> None:
    """ACCEPT prints the verdict and fidelity and exits 0."""
    r = clean_doc()
    code, out = cli([write(tmp_path, "r.json", r), write(tmp_path, "p.json", replay_of(r))])
    assert code == 0
    assert "verdict   ACCEPT" in out and "FAITHFUL" in out


@pytest.mark.parametrize(
    ("change", "code", "verdict"),
    [({"state_digest": "x"}, 10, "REJECT"), ({"mode": "best_effort"}, 11, "QUARANTINE")],
)
def test_reject_and_quarantine_have_their_own_exit_codes(
    tmp_path: Path, change: dict[str, str], code: int, verdict: str
) -> None:
    """REJECT exits 10, QUARANTINE 11; --json gives verdict, fidelity and coded findings."""
    r = clean_doc()
    got, out = cli(
        [write(tmp_path, "r.json", r), write(tmp_path, "p.json", replay_of(r, **change)), "--json"]
    )
    assert got == code
    body = json.loads(out)
    assert body["verdict"] == verdict and body["fidelity"] == "UNVERIFIED"
    assert all("code" in f for f in body["findings"]) and body["findings"]


def test_table_lists_every_finding(tmp_path: Path) -> None:
    """The readable output has one row per finding code."""
    r = clean_doc()
    p = replay_of(r, state_digest="x", transcript_digest="t2")
    code, out = cli([write(tmp_path, "r.json", r), write(tmp_path, "p.json", p)])
    assert code == 10
    assert "STATE_MISMATCH" in out and "TRANSCRIPT_MISMATCH" in out and "hypothesis" in out


def test_bad_document_raises_a_document_error_for_the_cli_to_report(tmp_path: Path) -> None:
    """A malformed file propagates DocumentError (cpstore.cli prints one line, exit 3)."""
    r = write(tmp_path, "r.json", clean_doc())
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(DocumentError):
        cli([r, str(bad)])


def test_main_cli_prints_one_line_and_exits_3_for_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Through cpstore.cli.entry: bad input is one stderr line and exit code 3."""
    pytest.importorskip("cpstore.cli.inspect_commands")  # the lead's CLI wiring, landing separately
    pytest.importorskip("cpstore.cli.demo")
    from cpstore.cli import main  # noqa: PLC0415 - only once the lead's CLI modules exist

    bad = tmp_path / "bad.json"
    bad.write_text('{"format": 1}')
    code = main(["validate", str(bad), str(bad)])
    err = capsys.readouterr().err
    assert code == 3
    assert err.count("\n") == 1 and "Traceback" not in err and "missing field" in err
    bad.write_text('{"format": 9}')
    code = main(["validate", str(bad), str(bad)])
    err = capsys.readouterr().err
    assert code == 9  # an unknown format version has its own code (EXIT_FORMAT)
    assert err.count("\n") == 1 and "Traceback" not in err and "format" in err


def test_checkpoint_ids_with_store_and_missing_store(tmp_path: Path) -> None:
    """With --store, ids are checkpoints; --record audits the decision; a missing store is 4."""
    path = tmp_path / "s"
    with open_store(path) as store:
        rec = store.recorder("r")
        rec.token("rng", 1)
        cid = rec.checkpoint(1, b"s")
    code, out = cli([cid, cid, "--store", str(path), "--json", "--record"])
    # A checkpoint has no declared replay mode unless its metadata says so: not evidence.
    assert code == EXIT_FOR_VERDICT[Verdict[json.loads(out)["verdict"]]] == 11
    with open_store(path) as store:
        assert len(list(store.audit_records(kind="decision"))) == 1
    code, _ = cli([cid, cid, "--store", str(path), "--no-record"])
    code, _ = cli([cid, cid, "--store", str(path)])  # looking (the default) records nothing
    with open_store(path) as store:
        assert len(list(store.audit_records(kind="decision"))) == 1
    with pytest.raises(NotFoundError):
        cli([cid, cid, "--store", str(tmp_path / "nowhere")])
    assert not (tmp_path / "nowhere").exists()
    assert issubclass(NotFoundError, CpstoreError)


def test_a_file_named_like_the_checkpoint_id_never_replaces_the_stored_recording(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 32-hex argument is the stored checkpoint even when the cwd holds a file of that name."""
    with open_store(tmp_path / "s") as st:
        rec = st.recorder("r")
        cid = rec.checkpoint(1, b"recorded state")
    # A document (a faithful replay of itself) saved under the checkpoint's id.
    doc = clean_doc()
    (tmp_path / cid).write_text(json.dumps(doc))
    replay = write(tmp_path, "p.json", replay_of(doc))
    monkeypatch.chdir(tmp_path)
    code, out = cli([cid, replay, "--store", str(tmp_path / "s"), "--no-record"])
    assert code == EXIT_FOR_VERDICT[Verdict.REJECT], out
    assert "STATE_MISMATCH" in out
    # The file is still reachable, spelled as a path.
    code, out = cli([f"./{cid}", replay])
    assert code == 0, out
