"""audit68: edges of ``validate`` where a wrong ACCEPT could hide.

Each test is a probe of the decision table (docs/decision-table.md) at an input
edge: how a side is named, how identity fields and logs compare, and whether the
native token kernels and the pure-Python reference give the same decision.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_decision_cli import cli
from test_decision_support import clean_doc, replay_of

from cpstore.decision.table import Verdict
from cpstore.decision.validate import validate
from cpstore.errors import InvalidInputError
from cpstore.store.facade import open as open_store

# -- naming a side: 32 hex characters are always an id ----------------------------


def _store_with_a_checkpoint(path: Path) -> str:
    with open_store(path) as store:
        rec = store.recorder("agent")
        rec.token("rng", 1)
        return rec.checkpoint(1, {"memory": "x"})


def test_an_uppercase_id_names_the_checkpoint_never_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A str of 32 hex characters is a checkpoint id in either case: a file in the working
    directory named like the id never stands in for the recording. Before audit68 only
    lowercase hex was an id, so ``validate(cid.upper(), P, store=)`` read a file named so
    as R and gave an ACCEPT (standing "evidence") about a document, not the checkpoint."""
    cid = _store_with_a_checkpoint(tmp_path / "s")
    monkeypatch.chdir(tmp_path)
    doc = clean_doc()
    (tmp_path / cid.upper()).write_text(json.dumps(doc))  # planted beside the caller
    with open_store(tmp_path / "s") as store:
        d = validate(cid.upper(), replay_of(doc), store=store, record=False)
    assert d.recorded.checkpoint_id == cid
    assert d.verdict is Verdict.REJECT  # the checkpoint is not the planted document
    with pytest.raises(InvalidInputError, match="needs a store"):
        validate(cid.upper(), replay_of(doc))


def test_the_cli_reads_an_uppercase_id_as_the_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``cpstore validate`` too: README and decision-table.md say 32 hex characters are
    always an id (``./NAME`` for a file named like one); an uppercase id with a file of
    that name beside it was read as the file (ACCEPT, exit 0)."""
    cid = _store_with_a_checkpoint(tmp_path / "s")
    monkeypatch.chdir(tmp_path)
    doc = clean_doc()
    (tmp_path / cid.upper()).write_text(json.dumps(doc))
    (tmp_path / "p.json").write_text(json.dumps(replay_of(doc)))
    code, out = cli([cid.upper(), "p.json", "--store", "s", "--json"])
    body = json.loads(out)
    assert body["recorded"]["checkpoint_id"] == cid
    assert code == 10 and body["verdict"] == "REJECT"
    code, out = cli([f"./{cid.upper()}", "p.json", "--json"])  # the documented way to a file
    assert code == 0 and json.loads(out)["verdict"] == "ACCEPT"
