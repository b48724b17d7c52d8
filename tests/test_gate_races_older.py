"""Gates racing appends of an older release (audit20): records past the gate index's count.

An older cpstore appends gate, sign-off and decision records without gate index rows
and without moving ``gates_indexed``, and its gates read the whole log (the scans of
``git show e17d1ae:cpstore/decision/gates.py``). Racing processes of both releases on
one store must still give one resume per sign-off and one sign-off per decision.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pg_cluster import backend_url, pg_cluster, pg_url  # noqa: F401 - fixtures
from test_decision_support import stored_replay
from test_gate_races import (
    _certify_or_quarantine,
    _checkpoint,
    _race,
    _recorder_with_permit,
    _resumer,
    _signer,
)

from cpstore.decision.gates import AUDIT_GATE, AUDIT_RESUME, AUDIT_SIGNOFF, resume_gate, sign_off
from cpstore.decision.table import AUDIT_DECISION, Verdict
from cpstore.decision.validate import validate
from cpstore.run.model import ReplayMode
from cpstore.store import audit
from cpstore.store.facade import open as open_store

ROUNDS = 16


def _as_older_release() -> None:
    """This process appends as a release before the gate index, and its gates scan."""
    setattr(audit, "put_gate_rows", lambda *a, **k: None)  # noqa: B010 - not exported
    setattr(audit, "set_gate_count", lambda *a, **k: None)  # noqa: B010 - not exported

    def records(view: audit.AuditView, kind: str, start: int = 0) -> Iterator[Any]:
        return view.audit_records(kind=kind, start=start)

    def by_id(view: audit.AuditView, decision_id: str) -> list[Any]:
        return [
            r for r in records(view, AUDIT_DECISION) if r.body.get("decision_id") == decision_id
        ]

    def sign_off_of(view: audit.AuditView, rec: Any) -> Any:
        found = (
            r
            for r in records(view, AUDIT_SIGNOFF, rec.index + 1)
            if r.body.get("decision_audit") == rec.digest
        )
        return next(found, None)

    def use(view: audit.AuditView, so: Any) -> Any:
        return next(
            (r for r in records(view, AUDIT_GATE) if r.body.get("sign_off") == so.digest), None
        )

    def permit_use(view: audit.AuditView, gate: Any) -> Any:
        found = (
            r
            for r in records(view, AUDIT_RESUME, gate.index + 1)
            if r.body.get("permit") == gate.digest
        )
        return next(found, None)

    def quarantine(view: audit.AuditView, rec: Any) -> Any:
        recorded = rec.body.get("recorded") or {}
        pair = (recorded.get("run_id"), recorded.get("branch"))
        return next(
            (
                r
                for r in records(view, AUDIT_DECISION)
                if ((r.body.get("recorded") or {}).get("run_id"),
                    (r.body.get("recorded") or {}).get("branch")) == pair
                and r.body.get("verdict") == "QUARANTINE"
            ),
            None,
        )  # fmt: skip

    audit.AuditView.permit_use = permit_use  # type: ignore[method-assign,assignment]
    audit.AuditView.branch_quarantine = quarantine  # type: ignore[method-assign,assignment]
    audit.AuditView.decisions_by_id = by_id  # type: ignore[method-assign,assignment]
    audit.AuditView.sign_off_of = sign_off_of  # type: ignore[method-assign,assignment]
    audit.AuditView.sign_off_use = use  # type: ignore[method-assign,assignment]


def _mixed_resumer(path: str, barrier: Any, older: bool, rounds: list[Any]) -> list[str | None]:
    if older:
        _as_older_release()
    return _resumer(path, barrier, rounds, None)


def _mixed_signer(path: str, barrier: Any, older: bool, rounds: list[str], who: str) -> list[Any]:
    if older:
        _as_older_release()
    return _signer(path, barrier, rounds, None, who)


def _quarantined(st: Any, run: str) -> Any:
    cid = _checkpoint(st, run)
    d = validate(cid, stored_replay(st, cid, mode=ReplayMode.BEST_EFFORT), store=st)
    assert d.verdict is Verdict.QUARANTINE
    return cid, d


def test_one_sign_off_releases_one_resume_among_processes_of_two_releases(
    url: str,
) -> None:
    """Two older-release and two current processes race each sign-off: one permit per round;
    the next append catches the index up and verify agrees, on LMDB and PostgreSQL."""
    rounds = []
    with open_store(url) as st:
        for i in range(ROUNDS):
            cid, d = _quarantined(st, f"run-{i}")
            rounds.append((cid, d.id, sign_off(st, d, operator="op", reason="drill").audit_digest))
    results = _race(_mixed_resumer, [(url, older, rounds) for older in (True, False, True, False)])
    assert [sum(r[i] is not None for r in results) for i in range(ROUNDS)] == [1] * ROUNDS
    with open_store(url) as st:
        _quarantined(st, "after")  # an append of this release: the index catches up
        gates = [g.body["sign_off"] for g in st.audit_records(kind=AUDIT_GATE)]
        assert sorted(gates) == sorted(so for _, _, so in rounds)
        result = st.verify()
        assert result.ok, result.problems


def test_one_decision_takes_one_sign_off_among_processes_of_two_releases(
    url: str,
) -> None:
    """Two older-release and two current processes sign each decision off: one sign-off per
    decision, on LMDB and PostgreSQL; verify agrees after the catch-up."""
    with open_store(url) as st:
        rounds = [_quarantined(st, f"run-{i}")[1].id for i in range(ROUNDS)]
    args = [(url, older, rounds, f"op-{w}") for w, older in enumerate((True, False, False, True))]
    results = _race(_mixed_signer, args)
    assert [sum(r[i] is not None for r in results) for i in range(ROUNDS)] == [1] * ROUNDS
    with open_store(url) as st:
        _quarantined(st, "after")
        signed = [r.body["decision_id"] for r in st.audit_records(kind=AUDIT_SIGNOFF)]
        assert sorted(signed) == sorted(rounds)
        result = st.verify()
        assert result.ok, result.problems


def _mixed_recorder(path: str, barrier: Any, older: bool, rounds: list[Any]) -> list[bool]:
    if older:
        _as_older_release()
    return _recorder_with_permit(path, barrier, rounds)


def test_one_permit_opens_one_recorder_among_processes_of_two_releases(
    url: str,
) -> None:
    """Two older-release processes (no rows, "used?" scanned) and two current ones race each
    permit: one recorder per permit; the next append catches the permit rows up, on LMDB
    and PostgreSQL, and verify agrees."""
    rounds = []
    with open_store(url) as st:
        for i in range(ROUNDS):
            cid, d = _quarantined(st, f"run-{i}")
            so = sign_off(st, d, operator="op", reason="drill")
            rounds.append((f"run-{i}", resume_gate(st, cid, d, sign_off=so).audit_digest))
    args = [(url, older, rounds) for older in (True, False, False, True)]
    results = _race(_mixed_recorder, args)
    assert [sum(r[i] for r in results) for i in range(ROUNDS)] == [1] * ROUNDS
    with open_store(url) as st:
        _quarantined(st, "after")
        used = [r.body["permit"] for r in st.audit_records(kind=AUDIT_RESUME)]
        assert sorted(used) == sorted(p for _, p in rounds)
        result = st.verify()
        assert result.ok, result.problems


def _mixed_certify(path: str, barrier: Any, role: int, older: bool, rounds: list[Any]) -> Any:
    if older:
        _as_older_release()
    return _certify_or_quarantine(path, barrier, role, rounds)


def test_a_rollback_is_never_certified_over_a_quarantine_of_an_older_release(
    url: str,
) -> None:
    """Certifications (one current, one older process) race quarantines of the branch (one
    older process appending without rows, one current): every certificate precedes the
    branch's first quarantine, on LMDB and PostgreSQL; verify agrees after the catch-up."""
    rounds = []
    with open_store(url) as st:
        for i in range(ROUNDS):
            accepted = _checkpoint(st, f"run-{i}")
            d = validate(accepted, stored_replay(st, accepted), store=st)
            rounds.append((accepted, d.id, _checkpoint(st, f"run-{i}")))
    roles = [(0, False), (1, True), (2, True), (3, False)]
    _race(_mixed_certify, [(url, role, older, rounds) for role, older in roles])
    with open_store(url) as st:
        _quarantined(st, "after")
        records = list(st.audit_records())
        for accepted, _, later in rounds:
            run = next(r.body["recorded"]["run_id"] for r in records if r.kind == AUDIT_DECISION
                       and r.body["recorded"]["checkpoint_id"] == later)  # fmt: skip
            first = min(
                r.index
                for r in records
                if r.kind == AUDIT_DECISION
                and r.body["recorded"]["run_id"] == run
                and r.body["verdict"] == "QUARANTINE"
            )
            certified = [
                r.index
                for r in records
                if r.kind == AUDIT_GATE and r.body["checkpoint_id"] == accepted
            ]
            assert all(c < first for c in certified), (run, certified, first)
        result = st.verify()
        assert result.ok, result.problems
