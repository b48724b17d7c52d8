"""Gates and sign-off: decided from the audit log, never from the caller's objects."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from test_decision_support import stored_replay

from cpstore.decision.gates import (
    AUDIT_GATE,
    AUDIT_SIGNOFF,
    certify_rollback,
    resume_gate,
    sign_off,
)
from cpstore.decision.table import Verdict
from cpstore.decision.validate import validate
from cpstore.errors import GateError, NotFoundError, SignOffError
from cpstore.run.model import ReplayMode
from cpstore.store.facade import open as open_store

if TYPE_CHECKING:
    from cpstore import Decision, Store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(tmp_path / "s") as s:
        yield s


def checkpoint(store: Store, run: str = "r", branch: str = "main", **obs: float) -> str:
    rec = store.recorder(run, branch=branch)
    rec.observe(1, "clock", b"t", pinned_at=obs.get("pinned_at", 1.0))
    rec.token("rng", 1)
    return rec.checkpoint(1, b"state")


def quarantined(store: Store, cid: str) -> Decision:
    return validate(cid, stored_replay(store, cid, mode=ReplayMode.BEST_EFFORT), store=store)


def test_accept_opens_the_resume_gate_and_is_recorded(store: Store) -> None:
    """An ACCEPT for the checkpoint lets the resume through and logs a gate record."""
    cid = checkpoint(store)
    d = validate(cid, stored_replay(store, cid), store=store)
    permit = resume_gate(store, cid, d)
    assert permit.verdict is Verdict.ACCEPT and permit.sign_off is None
    (gate,) = list(store.audit_records(kind=AUDIT_GATE))
    assert gate.body["decision_id"] == d.id and gate.digest == permit.audit_digest


def test_releasable_decision_needs_a_sign_off_that_releases_once(store: Store) -> None:
    """QUARANTINE: refused without sign-off, passes with one, refused when it is replayed."""
    cid = checkpoint(store)
    d = quarantined(store, cid)
    with pytest.raises(GateError, match="sign-off"):
        resume_gate(store, cid, d)
    so = sign_off(store, d, operator="alice", reason="debug replay reviewed")
    assert (so.operator, so.reason, so.decision_id, so.checkpoint_id) == (
        "alice",
        "debug replay reviewed",
        d.id,
        cid,
    )
    assert resume_gate(store, cid, d, sign_off=so).sign_off == so.audit_digest
    with pytest.raises(SignOffError, match="already used"):
        resume_gate(store, cid, d, sign_off=so)


def test_sign_off_refused_for_non_releasable_and_for_accept(store: Store) -> None:
    """STATE_MISMATCH cannot be signed off; an ACCEPT needs no sign-off."""
    cid = checkpoint(store)
    bad = validate(cid, stored_replay(store, cid, state_digest="00" * 16), store=store)
    with pytest.raises(SignOffError, match="no sign-off can release") as info:
        sign_off(store, bad, operator="alice", reason="ship it")
    assert info.value.got == ["STATE_MISMATCH"]
    with pytest.raises(GateError, match="cannot resume"):
        resume_gate(store, cid, bad)
    good = validate(cid, stored_replay(store, cid), store=store)
    with pytest.raises(SignOffError, match="needs no sign-off"):
        sign_off(store, good, operator="alice", reason="x")
    assert list(store.audit_records(kind=AUDIT_SIGNOFF)) == []


def test_sign_off_needs_operator_and_reason(store: Store) -> None:
    """Empty operator or reason is bad input."""
    cid = checkpoint(store)
    d = quarantined(store, cid)
    with pytest.raises(ValueError):
        sign_off(store, d, operator="", reason="r")
    with pytest.raises(ValueError):
        sign_off(store, d, operator="a", reason="  ")


def test_forged_sign_off_record_for_a_non_releasable_decision_does_not_release(
    store: Store,
) -> None:
    """A sign-off appended straight to the audit log for a REJECT never opens the gate."""
    cid = checkpoint(store)
    bad = validate(cid, stored_replay(store, cid, state_digest="00" * 16), store=store)
    forged = store.append_audit(
        AUDIT_SIGNOFF,
        {
            "decision_id": bad.id,
            "decision_audit": bad.audit_digest,
            "checkpoint_id": cid,
            "operator": "mallory",
            "reason": "trust me",
            "time": 0.0,
        },
    )
    with pytest.raises(GateError):
        resume_gate(store, cid, bad, sign_off=forged.digest)


def test_sign_off_for_another_decision_does_not_release(store: Store) -> None:
    """A sign-off for decision A presented with decision B is refused."""
    a_cid = checkpoint(store, run="a")
    b_cid = checkpoint(store, run="b")
    a = quarantined(store, a_cid)
    b = quarantined(store, b_cid)
    so_a = sign_off(store, a, operator="alice", reason="ok")
    with pytest.raises(SignOffError, match="does not release"):
        resume_gate(store, b_cid, b, sign_off=so_a)


def test_sign_off_not_in_the_log_does_not_release(store: Store) -> None:
    """A SignOff object made up by the caller (unknown digest) is refused."""
    cid = checkpoint(store)
    d = quarantined(store, cid)
    so = sign_off(store, d, operator="alice", reason="ok")
    fake = dataclasses.replace(so, audit_digest="ff" * 16)
    with pytest.raises(SignOffError, match="not in the audit log"):
        resume_gate(store, cid, d, sign_off=fake)


def test_forged_decision_object_is_ignored_in_favour_of_the_log(store: Store) -> None:
    """A Decision object edited to ACCEPT still needs the sign-off its record requires."""
    cid = checkpoint(store)
    d = quarantined(store, cid)
    forged = dataclasses.replace(d, verdict=Verdict.ACCEPT, findings=())
    with pytest.raises(GateError, match="sign-off"):
        resume_gate(store, cid, forged)


def test_forged_decision_record_whose_verdict_does_not_follow_is_refused(store: Store) -> None:
    """An audit record claiming ACCEPT with a STATE_MISMATCH finding is refused."""
    cid = checkpoint(store)
    store.append_audit(
        "decision",
        {
            "decision_id": "f" * 32,
            "verdict": "ACCEPT",
            "mode": "strict",
            "recorded": {"checkpoint_id": cid, "run_id": "r", "branch": "main"},
            "findings": [{"code": "STATE_MISMATCH"}],
        },
    )
    with pytest.raises(GateError, match="does not follow"):
        resume_gate(store, cid, "f" * 32)


def test_unrecorded_decision_opens_nothing(store: Store) -> None:
    """A decision made without the store (or with record=False) is not in the log."""
    cid = checkpoint(store)
    d = validate(cid, stored_replay(store, cid), store=store, record=False)
    assert d.audit_digest is None
    with pytest.raises(NotFoundError):
        resume_gate(store, cid, d)


def test_superseded_and_foreign_decisions_are_refused(store: Store) -> None:
    """An older ACCEPT after a newer REJECT, or a decision about another checkpoint, is refused."""
    cid = checkpoint(store, run="a")
    other = checkpoint(store, run="b")
    old = validate(cid, stored_replay(store, cid), store=store)
    validate(cid, stored_replay(store, cid, state_digest="00" * 16), store=store)
    with pytest.raises(GateError, match="supersedes"):
        resume_gate(store, cid, old)
    fresh = validate(other, stored_replay(store, other), store=store)
    with pytest.raises(GateError, match="another checkpoint"):
        resume_gate(store, cid, fresh)


def test_rollback_needs_a_strict_accept(store: Store) -> None:
    """A strict ACCEPT certifies a rollback; a QUARANTINE with a sign-off does not."""
    cid = checkpoint(store, run="ok")
    cert = certify_rollback(store, cid, validate(cid, stored_replay(store, cid), store=store))
    assert (cert.run_id, cert.branch) == ("ok", "main")
    q_cid = checkpoint(store, run="q")
    q = quarantined(store, q_cid)
    sign_off(store, q, operator="alice", reason="ok")
    with pytest.raises(GateError, match="STRICT"):
        certify_rollback(store, q_cid, q)


def test_audit_chain_verifies_after_decisions_sign_offs_and_gates(store: Store) -> None:
    """Every record the gates wrote chains to the one before; store.verify() is clean."""
    cid = checkpoint(store)
    d = quarantined(store, cid)
    so = sign_off(store, d, operator="alice", reason="ok")
    resume_gate(store, cid, d, sign_off=so)
    records = list(store.audit_records())
    assert [r.kind for r in records] == ["decision", "signoff", "gate"]
    assert all(b.prev == a.digest for a, b in itertools.pairwise(records))
    assert store.verify().ok
