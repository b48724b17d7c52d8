"""audit51: a recording that declares itself a best-effort replay is never the ground of an ACCEPT.

Seed 002: "A replay that completed without error in BEST_EFFORT mode is evidence of
nothing", and best-effort replay "must be tagged as such in the audit record so
downstream rollback logic refuses to act on it". A run document's ``mode`` is that
tag. Before audit51 only P's mode was looked at: R declaring ``best_effort`` (a
best-effort replay handed over as the recording) and a strict replay of it was an
ACCEPT, evidence, exit 0 on the command line. It is BEST_EFFORT on the recorded side
now (QUARANTINE). R declaring ``strict`` is unchanged (the fixtures' recordings do).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_decision_support import clean_doc, input_forms, replay_of

from cpstore import cli, validate
from cpstore.decision.table import Fidelity, FindingCode, Verdict


@pytest.mark.parametrize("form", ["mapping", "run", "json", "msgpack", "cprun"])
def test_recorded_best_effort_quarantines(form: str) -> None:
    r = clean_doc(mode="best_effort")
    d = validate(input_forms(r)[form], replay_of(r))
    assert d.verdict is Verdict.QUARANTINE and not d.evidence
    assert d.codes == {FindingCode.BEST_EFFORT}
    f = d.findings[0]
    assert (f.side, f.stream, f.expected, f.observed) == (
        "recorded",
        "mode",
        "strict or undeclared",
        "best_effort",
    )
    assert d.fidelity is Fidelity.UNVERIFIED and d.releasable


def test_both_sides_best_effort_are_two_findings() -> None:
    r = clean_doc(mode="best_effort")
    d = validate(r, replay_of(r, mode="best_effort"))
    sides = sorted(f.side for f in d.findings if f.code is FindingCode.BEST_EFFORT)
    assert sides == ["recorded", "replayed"] and d.verdict is Verdict.QUARANTINE


@pytest.mark.parametrize("mode", ["strict", None])
def test_recorded_strict_or_undeclared_is_unchanged(mode: str | None) -> None:
    r = clean_doc(mode=mode)
    assert validate(r, replay_of(r)).verdict is Verdict.ACCEPT


def test_command_line_exit_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    r = clean_doc(mode="best_effort")
    (tmp_path / "r.json").write_text(json.dumps(r))
    (tmp_path / "p.json").write_text(json.dumps(replay_of(r)))
    code = cli.main(["validate", str(tmp_path / "r.json"), str(tmp_path / "p.json")])
    assert code == 11, capsys.readouterr().out
