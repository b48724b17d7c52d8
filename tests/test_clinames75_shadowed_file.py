"""A bare command-line name that is both a file in the working directory and a checkpoint
name in the store is refused (exit 3), never read as the file.

``cpstore validate`` and ``cpstore diff`` read a side that exists as a file as that file,
even when it also reads as a checkpoint name (an id prefix, ``RUN@BRANCH``). An auditor
validating ``agent@main`` next to an exported ``agent@main`` validated the export, a
decision about no checkpoint, and was told nothing (review74: "CLI name shadowing").
``./NAME`` stays the file, the full id stays the checkpoint, and a hex-named file the
store resolves to nothing stays the file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_decision_support import clean_doc, replay_of

import cpstore
from cpstore.cli import EXIT_BAD_INPUT, EXIT_OK
from cpstore.cli import main as cli_main


def _store(path: Path) -> str:
    with cpstore.open(path) as store:
        rec = store.recorder("agent")
        rec.token("rng", 1)
        return rec.checkpoint(1, {"memory": "x"})


def _planted(tmp_path: Path, name: str) -> None:
    """A run document named ``name`` and its replay ``p.json``, beside the caller."""
    doc = clean_doc()
    (tmp_path / name).write_text(json.dumps(doc))
    (tmp_path / "p.json").write_text(json.dumps(replay_of(doc)))


def _audits(path: Path) -> int:
    with cpstore.open(path, readonly=True) as store:
        return len(list(store.audit_records()))


@pytest.mark.parametrize("how", ["run@branch", "prefix", "prefix upper"])
def test_validate_refuses_a_name_that_is_also_a_file_here(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    how: str,
) -> None:
    cid = _store(tmp_path / "s")
    name = {"run@branch": "agent@main", "prefix": cid[:10], "prefix upper": cid[:10].upper()}[how]
    monkeypatch.chdir(tmp_path)
    _planted(tmp_path, name)
    before = _audits(tmp_path / "s")
    code = cli_main(["validate", name, "p.json", "--store", "s", "--record"])
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT
    assert "both a file here and a checkpoint name" in err and f"./{name}" in err
    assert _audits(tmp_path / "s") == before  # nothing recorded
    # the file, spelled as a path; the checkpoint, by its full id
    assert cli_main(["validate", f"./{name}", "p.json", "--json"]) == EXIT_OK
    capsys.readouterr()
    assert cli_main(["validate", cid, "p.json", "--store", "s", "--json"]) != EXIT_BAD_INPUT
    assert json.loads(capsys.readouterr().out)["recorded"]["checkpoint_id"] == cid


def test_a_hex_file_the_store_does_not_name_is_still_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cid = _store(tmp_path / "s")
    name = "0123abcd" if not cid.startswith("0123abcd") else "4567abcd"
    monkeypatch.chdir(tmp_path)
    _planted(tmp_path, name)
    code = cli_main(["validate", name, "p.json", "--store", "s", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == EXIT_OK and out["verdict"] == "ACCEPT"
    assert out["recorded"]["checkpoint_id"] is None  # the document, as before
    # a run@branch-looking file with no such run: the file too
    _planted(tmp_path, "nobody@main")
    assert cli_main(["validate", "nobody@main", "p.json", "--store", "s"]) == EXIT_OK


def test_diff_refuses_a_name_that_is_also_a_file_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cid = _store(tmp_path / "s")
    monkeypatch.chdir(tmp_path)
    _planted(tmp_path, "agent@main")
    code = cli_main(["diff", "agent@main", cid, "--store", "s"])
    assert code == EXIT_BAD_INPUT
    assert "both a file here and a checkpoint name" in capsys.readouterr().err
    assert cli_main(["diff", cid, cid, "--store", "s"]) == EXIT_OK
