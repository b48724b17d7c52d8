"""Gates: what a decision allows, decided from the store's audit log alone.

A :class:`~cpstore.decision.validate.Decision` object in the caller's hands proves
nothing (anyone can build one); every gate here looks the decision up in the
store's hash-chained audit log, re-derives what it allows from the recorded
finding codes and :data:`FINDING_RULES`, and appends a record of what it
let through. The rules (docs/decision-table.md, "Gates"):

* **Resume** from a checkpoint needs the checkpoint's latest decision to be
  ACCEPT, or to have only releasable findings plus an operator sign-off
  recorded after it. A sign-off releases one resume only.
* **Rollback** certification needs the checkpoint's latest decision to be an
  ACCEPT from a STRICT replay, and the branch never to have been quarantined.
* **Sign-off** is refused for an ACCEPT (nothing to release), for any
  decision with a non-releasable finding, for a decision a later one
  supersedes (the gate would refuse it) and for a decision already signed off.
* **Recording** on from a checkpoint (:meth:`Store.recorder` continuing a
  branch or forking from it) needs, when the checkpoint's standing decision
  is not ACCEPT, a :class:`ResumePermit` for that decision, used once
  (:func:`check_resume`).

Every check a gate makes runs inside the write txn that appends its record
(``append_audit_checked``): two processes racing
with one sign-off, or a gate racing a newer decision, cannot both pass.
The decision named by id, digest or prefix, "already signed off", "sign-off already
used", "permit already used" and "branch ever quarantined" are asked of the view
(:meth:`~cpstore.decision.ports.AuditView.decisions_by_id`, ``decisions_by_prefix``,
``sign_off_of``, ``sign_off_use``, ``permit_use``, ``branch_quarantine``: the store's
gate index, docs/store.md), not found by reading every record. Finding the decision a
gate is named and trusting it (the chain vouches for it) is ``gate_reads.py``'s.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cpstore.decision.gate_reads import (
    MIN_PREFIX,
    _check_current,
    _checkpoint_of,
    _codes,
    _decision_record,
    _id_of,
    _latest_for,
    _linked,
    _verdict,
)
from cpstore.decision.ports import AuditEntry, AuditStore, AuditView
from cpstore.decision.table import AUDIT_DECISION, FINDING_RULES, Decision, Verdict
from cpstore.errors import GateError, InvalidInputError, NotFoundError, SignOffError
from cpstore.native.args import full_checkpoint_id, non_empty_text

__all__ = [
    "AUDIT_DECISION",
    "AUDIT_GATE",
    "AUDIT_RESUME",
    "AUDIT_SIGNOFF",
    "MIN_PREFIX",
    "ResumePermit",
    "RollbackCertificate",
    "SignOff",
    "certify_rollback",
    "check_resume",
    "resume_gate",
    "sign_off",
]

#: Audit record kinds written by the gates (decisions: ``AUDIT_DECISION``).
AUDIT_SIGNOFF = "signoff"
AUDIT_GATE = "gate"
#: Audit record kind of a permit used by a recorder (one per permit).
AUDIT_RESUME = "resume"


@dataclass(frozen=True)
class SignOff:
    """An operator's release of a releasable decision, as recorded in the audit log."""

    decision_id: str
    """The decision released."""
    checkpoint_id: str
    """The checkpoint that decision is about."""
    operator: str
    """Who signed."""
    reason: str
    """Why."""
    time: float
    """When (seconds since the epoch)."""
    audit_digest: str
    """Digest of the sign-off's audit record: what a gate is given."""


@dataclass(frozen=True)
class ResumePermit:
    """A resume the gate let through."""

    checkpoint_id: str
    """Where the run resumes."""
    decision_id: str
    """The decision that allowed it."""
    verdict: Verdict
    """That decision's verdict."""
    sign_off: str | None
    """Audit digest of the sign-off used (None for an ACCEPT)."""
    audit_digest: str
    """Digest of the gate's own audit record."""


@dataclass(frozen=True)
class RollbackCertificate:
    """A rollback the gate certified."""

    checkpoint_id: str
    """The checkpoint whose branch may be rolled back."""
    run_id: str
    """Its run."""
    branch: str | None
    """Its branch."""
    decision_id: str
    """The STRICT ACCEPT decision that certified it."""
    audit_digest: str
    """Digest of the gate's own audit record."""


# -- the gates ------------------------------------------------------------------


def sign_off(store: AuditStore, decision: Decision | str, *, operator: str, reason: str) -> SignOff:
    """Record an operator's release of a releasable decision (audit kind ``signoff``)."""
    operator = non_empty_text(operator, "operator")
    reason = non_empty_text(reason, "reason")
    now = time.time()

    def prepare(log: AuditView) -> Mapping[str, Any]:
        rec = _decision_record(log, decision)
        verdict = _verdict(rec)
        cid = _checkpoint_of(rec)
        if verdict is Verdict.ACCEPT:
            raise SignOffError("an ACCEPT needs no sign-off", where=rec.body.get("decision_id"))
        blocked = sorted({c.value for c in _codes(rec) if not FINDING_RULES[c][1]})
        if blocked:
            raise SignOffError(
                "decision has findings no sign-off can release",
                where=rec.body.get("decision_id"),
                expected="only releasable findings",
                got=blocked,
            )
        if cid is None:
            imported = rec.body.get("imported")
            if isinstance(imported, Mapping) and imported.get("branch_only") is True:
                raise SignOffError(  # docs/format.md: carried for its branch only
                    "decision was carried for its branch only: it quarantines its run and "
                    "branch for good and is about no checkpoint here; nothing to release "
                    "(sign off the checkpoint's standing decision)",
                    where=rec.body.get("decision_id"),
                    got=f"checkpoint {imported.get('checkpoint_id')} in its source",
                )
            raise SignOffError(
                "decision is not about a stored checkpoint; nothing to release",
                where=rec.body.get("decision_id"),
            )
        latest = _latest_for(log, cid)
        if latest is not None and latest.digest != rec.digest:
            # The gate would refuse it: a later decision stands for the checkpoint.
            raise SignOffError(
                "a later decision supersedes this one; sign off the standing decision",
                where=f"checkpoint {cid}",
                expected=latest.body.get("decision_id"),
                got=rec.body.get("decision_id"),
            )
        earlier = log.sign_off_of(rec)  # the gate index: no scan of the log
        if earlier is not None:
            raise SignOffError(
                "decision is already signed off; one decision takes one sign-off",
                where=f"audit/{earlier.index}",
                got=earlier.digest,
            )
        return {
            "decision_id": rec.body["decision_id"],
            "decision_audit": rec.digest,
            "checkpoint_id": cid,
            "operator": operator,
            "reason": reason,
            "time": now,
        }

    out = store.append_audit_checked(AUDIT_SIGNOFF, prepare)
    body = out.body
    return SignOff(body["decision_id"], body["checkpoint_id"], operator, reason, now, out.digest)


def _valid_sign_off(store: AuditView, digest: str, rec: AuditEntry) -> AuditEntry:
    try:
        so = store.get_audit(digest)
    except NotFoundError:
        raise SignOffError("sign-off is not in the audit log", got=digest) from None
    body = so.body
    if (
        so.kind != AUDIT_SIGNOFF
        or body.get("decision_id") != rec.body.get("decision_id")
        or body.get("decision_audit") != rec.digest
        or so.index <= rec.index
        or not isinstance(body.get("operator"), str)
        or not body.get("operator")
    ):
        raise SignOffError(
            "sign-off does not release this decision",
            where=f"audit/{so.index}",
            expected=rec.body.get("decision_id"),
            got=body.get("decision_id"),
        )
    _linked(store, so)
    if store.sign_off_use(so) is not None:  # the gate index: no scan of the log
        raise SignOffError("sign-off was already used; it releases one resume", got=so.digest)
    return so


def _gate_body(
    gate: str, checkpoint_id: str, rec: AuditEntry, sign_off: str | None
) -> dict[str, Any]:
    """The audit body of a gate passage (the only proof a gate was passed)."""
    return {
        "gate": gate,
        "checkpoint_id": checkpoint_id,
        "decision_id": rec.body["decision_id"],
        "decision_audit": rec.digest,
        "sign_off": sign_off,
    }


def _checkpoint_named(checkpoint_id: str) -> str:
    """``checkpoint_id`` as the decision records name it: 32 hex characters in either case
    are that id in lowercase, as ``validate`` reads them (audit68). review74: a gate named
    so refused the checkpoint's own decision as one "about another checkpoint"."""
    text = str.__str__(non_empty_text(checkpoint_id, "checkpoint_id"))  # a subclass's text
    return full_checkpoint_id(text) or text


def resume_gate(
    store: AuditStore,
    checkpoint_id: str,
    decision: Decision | str,
    *,
    sign_off: SignOff | str | None = None,
) -> ResumePermit:
    """Allow a resume from ``checkpoint_id`` or raise :class:`GateError`."""
    checkpoint_id = _checkpoint_named(checkpoint_id)
    _id_of(decision)
    digest: str | None = None
    if sign_off is not None:
        digest = non_empty_text(
            sign_off.audit_digest if isinstance(sign_off, SignOff) else sign_off, "sign_off"
        )
    passed: dict[str, Any] = {}

    def prepare(log: AuditView) -> Mapping[str, Any]:
        # Checked in the txn that appends the gate record: a sign-off used by
        # a racing gate, or a decision superseded meanwhile, is seen here.
        rec = _decision_record(log, decision)
        _check_current(log, rec, checkpoint_id)
        verdict = _verdict(rec)
        used: str | None = None
        if verdict is not Verdict.ACCEPT:
            blocked = sorted({c.value for c in _codes(rec) if not FINDING_RULES[c][1]})
            if blocked:
                raise GateError(
                    "decision has findings no sign-off can release; the run cannot resume here",
                    where=f"checkpoint {checkpoint_id}",
                    got=blocked,
                )
            if digest is None:
                raise GateError(
                    f"a {verdict.name} decision needs an operator sign-off to resume",
                    where=f"checkpoint {checkpoint_id}",
                )
            used = _valid_sign_off(log, digest, rec).digest
        passed.update(decision_id=rec.body["decision_id"], verdict=verdict, sign_off=used)
        return _gate_body("resume", checkpoint_id, rec, used)

    out = store.append_audit_checked(AUDIT_GATE, prepare)
    return ResumePermit(
        checkpoint_id, passed["decision_id"], passed["verdict"], passed["sign_off"], out.digest
    )


def certify_rollback(
    store: AuditStore, checkpoint_id: str, decision: Decision | str
) -> RollbackCertificate:
    """Certify rolling back the branch of ``checkpoint_id`` or raise :class:`GateError`."""
    checkpoint_id = _checkpoint_named(checkpoint_id)
    _id_of(decision)
    passed: dict[str, Any] = {}

    def prepare(log: AuditView) -> Mapping[str, Any]:
        rec = _decision_record(log, decision)
        _check_current(log, rec, checkpoint_id)
        verdict = _verdict(rec)
        if verdict is not Verdict.ACCEPT or rec.body.get("mode") != "strict":
            raise GateError(
                "a rollback needs an ACCEPT from a STRICT replay",
                where=f"checkpoint {checkpoint_id}",
                expected="ACCEPT, strict",
                got=f"{verdict.name}, {rec.body.get('mode')}",
            )
        recorded = rec.body.get("recorded") or {}
        run_id, branch = recorded.get("run_id"), recorded.get("branch")
        # The first decision about the run and branch that found its replay unverified
        # (the gate index), in this txn: a quarantine appended before this record
        # lands is seen here.
        quarantine = log.branch_quarantine(rec)
        if quarantine is not None:
            raise GateError(
                "the branch was quarantined; a quarantined branch is never rolled back",
                where=f"run {run_id!r} branch {branch!r}",
                got=quarantine.body.get("decision_id"),
            )
        passed.update(run_id=run_id, branch=branch, decision_id=rec.body["decision_id"])
        return _gate_body("rollback", checkpoint_id, rec, None)

    out = store.append_audit_checked(AUDIT_GATE, prepare)
    return RollbackCertificate(
        checkpoint_id, str(passed["run_id"]), passed["branch"], passed["decision_id"], out.digest
    )


def _permit_digest(permit: ResumePermit | str) -> str:
    if isinstance(permit, ResumePermit):
        return non_empty_text(permit.audit_digest, "permit")
    if isinstance(permit, str):
        return non_empty_text(permit, "permit")
    raise InvalidInputError("permit must be a ResumePermit or its audit digest", got=permit)


def _standing(log: AuditView, checkpoint_id: str) -> tuple[AuditEntry | None, Verdict | None]:
    """The checkpoint's standing decision (its latest) and that decision's verdict."""
    rec = log.latest_decision(checkpoint_id)
    return rec, None if rec is None else _verdict(rec)


def _use_permit(
    log: AuditView, digest: str, checkpoint_id: str, run_id: str, branch: str
) -> dict[str, Any]:
    """The body recording that ``digest`` was used, or GateError (all read in ``log``'s txn)."""
    try:
        gate = log.get_audit(digest)
    except (NotFoundError, InvalidInputError):
        raise GateError("permit is not in the audit log", got=digest) from None
    body = gate.body
    if gate.kind != AUDIT_GATE or body.get("gate") != "resume":
        raise GateError("not a resume permit", where=f"audit/{gate.index}", got=gate.kind)
    if body.get("checkpoint_id") != checkpoint_id:
        raise GateError(
            "permit is for another checkpoint",
            where=f"audit/{gate.index}",
            expected=checkpoint_id,
            got=body.get("checkpoint_id"),
        )
    _linked(log, gate)
    standing, _ = _standing(log, checkpoint_id)
    if standing is not None:
        _linked(log, standing)
    if standing is None or standing.digest != body.get("decision_audit"):
        raise GateError(
            "a later decision supersedes the one the permit was given for",
            where=f"checkpoint {checkpoint_id}",
            expected=None if standing is None else standing.body.get("decision_id"),
            got=body.get("decision_id"),
        )
    used = log.permit_use(gate)  # the gate index: no scan of the log
    if used is not None:
        raise GateError(
            "permit was already used; it allows one resume",
            where=f"audit/{used.index}",
            got=gate.digest,
        )
    return {
        "checkpoint_id": checkpoint_id,
        "run_id": run_id,
        "branch": branch,
        "permit": gate.digest,
        "decision_id": body.get("decision_id"),
    }


def check_resume(
    store: AuditStore,
    checkpoint_id: str | None,
    *,
    run_id: str,
    branch: str,
    permit: ResumePermit | str | None = None,
) -> None:
    """Refuse recording on from ``checkpoint_id`` unless its standing decision allows it.

    The standing decision is the latest decision recorded about the
    checkpoint (the decision index, :class:`~cpstore.decision.ports.AuditView`).
    None or an ACCEPT needs no permit; anything else needs ``permit``, a
    :class:`ResumePermit` from :func:`resume_gate` for this checkpoint and for
    that very decision, not used before. A permit given is always checked and
    used up (audit kind ``resume``), in the write txn that records its use.
    """
    if permit is None:
        if checkpoint_id is None:
            return
        with store.audit_view() as log:
            standing, verdict = _standing(log, checkpoint_id)
            if standing is not None:
                # What lets the recorder on is trusted as a gate trusts a record: its
                # MAC on a keyed log (audit52: a forged ACCEPT released it).
                _linked(log, standing)
        if standing is None or verdict is Verdict.ACCEPT:
            return
        raise GateError(
            f"the checkpoint's standing decision is {verdict.name if verdict else None}; "
            "recording on from it needs a ResumePermit from resume_gate (permit=)",
            where=f"checkpoint {checkpoint_id} (run {run_id!r} branch {branch!r})",
            got=standing.body.get("decision_id"),
        )
    digest = _permit_digest(permit)
    if checkpoint_id is None:
        raise GateError(
            "a permit releases a resume from a checkpoint; this recorder starts a new run",
            where=f"run {run_id!r} branch {branch!r}",
            got=digest,
        )
    store.append_audit_checked(
        AUDIT_RESUME, lambda log: _use_permit(log, digest, checkpoint_id, run_id, branch)
    )
