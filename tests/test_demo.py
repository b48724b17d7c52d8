"""The main job end to end: every verdict in the demo comes from the real validator."""

from __future__ import annotations

from pathlib import Path

import pytest

import cpstore
from cpstore import FindingCode as C
from cpstore import Verdict, cli
from cpstore.cli.demo import DemoReport, run_demo


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> DemoReport:
    """One small demo run shared by the tests below."""
    path = str(tmp_path_factory.mktemp("demo") / "store")
    lines: list[str] = []
    return run_demo(path, steps=160, every=5, bulk_tokens=50_000, say=lines.append)


def _row(report: DemoReport, prefix: str) -> cpstore.Decision:
    return next(r.decision for r in report.scenarios if r.name.startswith(prefix))


def test_faithful_replay_is_accepted_as_evidence(report: DemoReport) -> None:
    """A strict, faithful replay of the whole run is ACCEPT and FAITHFUL."""
    d = _row(report, "faithful")
    assert d.verdict is Verdict.ACCEPT and d.findings == ()
    assert d.fidelity is cpstore.Fidelity.FAITHFUL and d.evidence


def test_seed_000_stale_config_is_rejected_despite_equal_state(report: DemoReport) -> None:
    """The step-12 re-fetch of a newer config: equal state, REJECT on observations."""
    d = _row(report, "seed 000")
    assert C.STATE_MISMATCH not in d.codes
    assert {C.OBSERVATION_MISMATCH, C.UNPINNED_OBSERVATION} <= d.codes
    assert d.verdict is Verdict.REJECT and d.releasable
    first = d.divergences["observations"]
    assert first.code is C.OBSERVATION_MISMATCH


def test_seed_002_live_tokens_and_escaped_call_are_quarantined(report: DemoReport) -> None:
    """Live-resolved tokens with equal values, best-effort mode and an unrecorded effect."""
    d = _row(report, "seed 002")
    assert d.codes == {C.LIVE_RESOLUTION, C.BEST_EFFORT, C.UNRECORDED_EFFECT}
    assert d.verdict is Verdict.QUARANTINE
    live = next(f for f in d.findings if f.code is C.LIVE_RESOLUTION)
    assert live.count == 2


def test_unrecorded_effect_is_stopped_before_it_escapes(report: DemoReport) -> None:
    """The ledger guard refused the effect; validation quarantines the replay."""
    row = next(r for r in report.scenarios if r.name.startswith("unrecorded effect"))
    assert row.stopped == 1
    assert row.decision.codes == {C.UNRECORDED_EFFECT}
    assert row.decision.verdict is Verdict.QUARANTINE


def test_seed_004_idempotent_branch_is_rejected_and_perturbed(report: DemoReport) -> None:
    """Equal transcript, different tool at one step, harness bumped a counter."""
    d = _row(report, "seed 004")
    assert {C.CALL_GRAPH_MISMATCH, C.HARNESS_PERTURBATION} <= d.codes
    assert C.TRANSCRIPT_MISMATCH not in d.codes and C.STATE_MISMATCH not in d.codes
    assert d.verdict is Verdict.REJECT
    assert d.fidelity is cpstore.Fidelity.DIVERGENT_PERTURBED


def test_bulk_replay_is_accepted(report: DemoReport) -> None:
    """The bulk cursor replay validates to ACCEPT over every token."""
    row = next(r for r in report.scenarios if r.name.startswith("bulk"))
    assert row.decision.verdict is Verdict.ACCEPT and row.tokens == 50_000


def test_gates_allow_and_refuse_what_the_verdicts_say(report: DemoReport) -> None:
    """Each gate outcome follows from its decision."""
    gates = dict(report.gates)
    assert gates["resume from the faithful replay's checkpoint"].startswith("allowed")
    assert gates["certify rollback on the faithful STRICT replay"].startswith("allowed")
    assert gates["resume after seed 000 without sign-off"].startswith("REFUSED")
    assert gates["resume after seed 000 with the operator's sign-off"].startswith("allowed")
    assert gates["the same sign-off used a second time"].startswith("REFUSED")
    assert gates["certify rollback of the seed 002 (quarantined) branch"].startswith("REFUSED")
    assert gates["sign off the seed 004 call-graph divergence"].startswith("REFUSED")
    assert gates["resume after the unrecorded effect without sign-off"].startswith("REFUSED")
    assert gates["record on from the seed 004 (rejected) checkpoint"].startswith("REFUSED")


def test_demo_store_verifies_and_audit_holds_every_decision(report: DemoReport) -> None:
    """verify passes at the end; the audit log has a record per decision at least."""
    assert report.verified
    assert report.audit_records >= len(report.scenarios)
    with cpstore.open(report.path, readonly=True) as store:
        decisions = list(store.audit_records(kind="decision"))
    assert len(decisions) == len(report.scenarios)


def test_demo_refuses_a_non_empty_folder(tmp_path: Path) -> None:
    """The CLI never records a demo into a folder that already holds something."""
    (tmp_path / "x").write_text("keep me")
    assert cli.main(["demo", "--path", str(tmp_path)]) == cli.EXIT_BAD_INPUT
    assert (tmp_path / "x").read_text() == "keep me"
