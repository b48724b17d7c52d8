"""An ACCEPT made over unverified store reads is not evidence.

``validate(..., verify=False)`` (``cpstore validate --no-verify``) skips the hash
checks of what a stored side references: for looking only (recording it is refused,
tests/test_audit31_unverified_record.py). Its ACCEPT over a damaged checkpoint said
``evidence`` True and ``standing`` "evidence": a caller citing it had a forensic claim
that nothing proved. It is now a hypothesis, and says why.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_audit31_unverified_record import _damaged
from test_decision_support import clean_doc, replay_of, stored_replay

from cpstore.cli.entry import main
from cpstore.decision.table import Verdict
from cpstore.decision.validate import validate
from cpstore.run.document import dump_document
from cpstore.store.facade import open as open_store


def test_an_unverified_accept_of_a_stored_side_is_a_hypothesis(tmp_path: Path) -> None:
    cid = _damaged(tmp_path / "s")
    with open_store(tmp_path / "s") as store:
        p = stored_replay(store, cid)
        looked = validate(cid, p, store=store, record=False, verify=False)
    assert looked.verdict is Verdict.ACCEPT  # the damage is not seen without verification
    assert not looked.verified
    assert not looked.evidence
    assert looked.standing == "hypothesis"
    assert not looked.releasable  # nothing to sign off: it is an ACCEPT
    assert looked.to_dict()["verified"] is False
    assert looked.to_dict()["standing"] == "hypothesis"
    looked.raise_for_verdict()  # raise_on_failure follows the verdict, as documented


def test_verified_and_document_only_decisions_are_unchanged(tmp_path: Path) -> None:
    with open_store(tmp_path / "s") as store:
        rec = store.recorder("r")
        rec.token("rng", 1)
        cid = rec.checkpoint(1, {"a": "x"})
        rec.close()
        checked = validate(cid, stored_replay(store, cid), store=store, record=False)
        assert checked.verdict is Verdict.ACCEPT and checked.verified and checked.evidence
        assert "verified" not in checked.to_dict()  # the recorded body's format is unchanged
    # No stored side: nothing was read unverified, whatever verify says.
    r = clean_doc()
    docs = validate(r, replay_of(r), verify=False)
    assert docs.verdict is Verdict.ACCEPT and docs.verified and docs.evidence


def test_the_command_line_says_an_unverified_accept_is_not_evidence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cid = _damaged(tmp_path / "s")
    with open_store(tmp_path / "s") as store:
        p = stored_replay(store, cid)
    doc = tmp_path / "p.json"
    doc.write_bytes(dump_document(p))
    args = ["validate", cid, str(doc), "--store", str(tmp_path / "s"), "--no-verify"]
    assert main(args) == 0  # ACCEPT's exit code: the verdict is unchanged
    text = capsys.readouterr().out
    assert "standing  hypothesis (not evidence): stored data read without verification" in text
    assert main([*args, "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["verified"] is False and body["standing"] == "hypothesis"
