"""Gates racing appends of an older release (audit20): records past the gate index's count.

An older cpstore appends gate, sign-off and decision records without gate index rows
and without moving ``gates_indexed``, and its gates read the whole log (the scans of
``git show e17d1ae:cpstore/decision/gates.py``). Racing processes of both releases on
one store must still give one resume per sign-off and one sign-off per decision.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures
from test_decision_support import stored_replay
from test_gate_races import _checkpoint, _race, _resumer, _signer, url  # noqa: F401 - fixture

from cpstore.decision.gates import AUDIT_GATE, AUDIT_SIGNOFF, sign_off
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
    url: str,  # noqa: F811 - the fixture
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
    url: str,  # noqa: F811 - the fixture
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
