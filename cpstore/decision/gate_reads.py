"""Reading the audit log for the gates (``cpstore.decision.gates``): the decision record a
gate is named, found in the log and trusted only when the chain vouches for it (and, on a
keyed log, its MAC), and what a gate re-derives from it (its checkpoint, finding codes and
verdict, whether a later decision supersedes it). Nothing here appends.
"""

from __future__ import annotations

from collections.abc import Mapping

from cpstore.decision.ports import AuditEntry, AuditView
from cpstore.decision.table import AUDIT_DECISION, FINDING_RULES, Decision, FindingCode, Verdict
from cpstore.errors import AuditChainError, GateError, InvalidInputError, NotFoundError
from cpstore.native.args import is_hex


def _linked(store: AuditView, rec: AuditEntry) -> None:
    """Check ``rec`` is where the chain says, the very record the log vouches for (the next
    record's ``prev``, or the head's digest: an altered record that still decodes was
    trusted, audit62), and (keyed store) that its MAC verifies."""
    store.check_audit_mac(rec.index)
    store.check_vouched(rec)
    if rec.index == 0:
        if rec.prev is not None:
            raise AuditChainError("first audit record names a predecessor", where="audit/0")
        return
    before = list(store.audit_records(start=rec.index - 1, limit=1))
    if not before or before[0].digest != rec.prev:
        raise AuditChainError(
            "audit record does not chain to its predecessor",
            where=f"audit/{rec.index}",
            expected=rec.prev,
            got=None if not before else before[0].digest,
        )


def _id_of(decision: Decision | str) -> str:
    """The id a caller names a decision by: the Decision's own, or the str given."""
    if isinstance(decision, Decision):
        return decision.id
    if isinstance(decision, str) and decision:
        return decision
    raise InvalidInputError("decision must be a Decision or a decision id", got=decision)


#: Shortest prefix of a decision id or audit digest an operator may type (as git's ids).
MIN_PREFIX = 8


def _by_digest(store: AuditView, ident: str) -> list[AuditEntry]:
    """The decision record whose audit digest is ``ident`` (32 lowercase hex), if any."""
    if len(ident) != 32 or not is_hex(ident) or ident != ident.lower():
        return []
    try:
        rec = store.get_audit(ident)
    except NotFoundError:
        return []
    return [rec] if rec.kind == AUDIT_DECISION else []


def _decision_by_name(store: AuditView, ident: str) -> list[AuditEntry]:
    """Decision records ``ident`` names: by decision id, else by the record's audit digest,
    else (a str of >= 8 hex characters) by a unique prefix of either; any other str is
    InvalidInputError (no id or digest can start with it).

    All three are asked of the gate index (no read of the log): a prefix, what an
    operator types, reads the rows and records that start with it."""
    found = list(store.decisions_by_id(ident))
    if found:
        return found
    found = _by_digest(store, ident)
    if found:
        return found
    if len(ident) < MIN_PREFIX or not is_hex(ident):
        # No id or digest can start with it: a mistake in the name, not a missing
        # decision (exit 3, as a checkpoint prefix too short for Store.resolve).
        raise InvalidInputError(
            "a decision is named by its id, its audit digest or a prefix of at least "
            f"{MIN_PREFIX} hex characters of either",
            expected=f"a prefix of >= {MIN_PREFIX} hex characters",
            got=ident,
        )
    matches = {r.digest: r for r in store.decisions_by_prefix(ident.lower())}
    if len(matches) > 1:
        raise InvalidInputError(
            "ambiguous decision prefix; give more characters",
            where=ident,
            expected="one of "
            + ", ".join(
                f"{r.body.get('decision_id')} (audit {r.digest})" for r in matches.values()
            ),
            got=f"{len(matches)} decisions",
        )
    return list(matches.values())


def _decision_record(store: AuditView, decision: Decision | str) -> AuditEntry:
    """The one audit record of ``decision``; the caller's object is not trusted.

    A str names the decision by its id or by its audit record's digest (what
    ``cpstore audit`` prints), or by a unique prefix of >= 8 hex characters of either.
    """
    ident = _id_of(decision)
    if isinstance(decision, Decision):
        found = list(store.decisions_by_id(ident))
    else:
        found = _decision_by_name(store, ident)
    if not found:
        raise NotFoundError(
            "no such decision in the audit log (neither a decision id nor its audit digest)",
            where="audit",
            got=ident,
        )
    if len(found) > 1:
        raise GateError(
            "decision id appears more than once in the audit log; refusing to trust it",
            got=[r.digest for r in found],
        )
    rec = found[0]
    if isinstance(decision, Decision) and decision.audit_digest not in (None, rec.digest):
        raise GateError(
            "decision object does not match its audit record",
            expected=rec.digest,
            got=decision.audit_digest,
        )
    _linked(store, rec)
    return rec


def _checkpoint_of(rec: AuditEntry) -> str | None:
    recorded = rec.body.get("recorded")
    return recorded.get("checkpoint_id") if isinstance(recorded, Mapping) else None


def _codes(rec: AuditEntry) -> list[FindingCode]:
    out = []
    for f in rec.body.get("findings", []):
        try:
            out.append(FindingCode(f.get("code")))
        except (ValueError, AttributeError):
            # An unknown code cannot be released by anyone.
            raise GateError(
                "decision record holds an unknown finding code", where=rec.digest, got=f
            ) from None
    return out


def _verdict(rec: AuditEntry) -> Verdict:
    # Re-derive from the codes; the stored verdict must agree with them.
    derived = max((FINDING_RULES[c][0] for c in _codes(rec)), default=Verdict.ACCEPT)
    if rec.body.get("verdict") != derived.name:
        raise GateError(
            "decision record's verdict does not follow from its findings",
            where=rec.digest,
            expected=derived.name,
            got=rec.body.get("verdict"),
        )
    return derived


def _latest_for(log: AuditView, checkpoint_id: str) -> AuditEntry | None:
    return log.latest_decision(checkpoint_id)


def _check_current(store: AuditView, rec: AuditEntry, checkpoint_id: str) -> None:
    if _checkpoint_of(rec) != checkpoint_id:
        raise GateError(
            "decision is about another checkpoint",
            expected=checkpoint_id,
            got=_checkpoint_of(rec),
        )
    latest = _latest_for(store, checkpoint_id)
    if latest is not None and latest.digest != rec.digest:
        raise GateError(
            "a later decision supersedes this one for the checkpoint",
            where=f"checkpoint {checkpoint_id}",
            expected=latest.body.get("decision_id"),
            got=rec.body.get("decision_id"),
        )
