"""The decisions a transfer carries: the gates of the source hold in the destination.

A push or pull copies checkpoints; the audit log is per store. Without more, a
checkpoint whose standing decision in the source is REJECT or QUARANTINE would
arrive with no decision at all and the destination's gates would let anyone
record on from it and certify rollbacks of its branch. So, for every checkpoint
of the branches a transfer lands (copied now or already there):

* the source's standing decision (its latest ``decision`` record, read in the
  transfer's step-1 read txn) is looked at; an ACCEPT is never carried (the
  destination certifies rollbacks on its own decisions only);
* a non-ACCEPT one is appended to the destination's log as a ``decision`` record
  whose body is the source record's body plus ``imported``: ``{"store": where the
  source is (password redacted), "audit": the source record's digest, "index": its
  audit index}``, through :func:`~cpstore.store.audit.append_audit_txn` inside the
  branch's landing txn (the decision, gate and quarantine index rows as for a local
  decision; a checkpoint never lands without it);
* unless the destination already holds a decision with that ``decision_id`` (a
  re-push, a round trip, or one the destination has since superseded itself:
  nothing appended), or its standing decision for the checkpoint is stricter
  (a higher verdict; a record whose verdict does not follow from its finding codes
  counts as strictest, as the gates refuse it).

Sign-offs, gate records and permits are not carried: a carried QUARANTINE needs
the destination's own operator sign-off (docs/decision-table.md, "Gates").
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from cpstore.decision.table import FINDING_RULES, FindingCode, Verdict
from cpstore.errors import StoreError
from cpstore.store.audit import (
    DECISION_KIND,
    DECISION_PREFIX,
    AuditView,
    append_audit_txn,
    decided_checkpoint,
    indexed_count,
)
from cpstore.store.backend import Backend, Txn
from cpstore.store.content import records_of
from cpstore.store.location import redact
from cpstore.store.model import AuditRecord, check_metadata

__all__ = ["IMPORTED", "Carried", "carried_decisions", "check_carry", "land_decisions"]

#: Body field of a carried decision naming where it came from.
IMPORTED = "imported"
#: Severity of a decision record the gates refuse outright (verdict not following).
_UNUSABLE = int(Verdict.REJECT) + 1
#: A checkpoint id (16 raw bytes) -> the source's standing non-ACCEPT decision record.
Carried = dict[bytes, AuditRecord]


def _severity(body: dict[str, Any]) -> int:
    """The verdict a decision body's finding codes give (as the gates derive it), or
    :data:`_UNUSABLE` when a code is unknown or the stored verdict does not follow."""
    try:
        codes = [FindingCode(f.get("code")) for f in body.get("findings", [])]
    except (ValueError, AttributeError, TypeError):
        return _UNUSABLE
    derived = max((FINDING_RULES[c][0] for c in codes), default=Verdict.ACCEPT)
    return int(derived) if body.get("verdict") == derived.name else _UNUSABLE


def _decided(src: Backend, txn: Txn[memoryview], cids: list[bytes]) -> list[bytes]:
    """Those of ``cids`` with a decision: a decision index row (fetched in one round trip
    on PostgreSQL), or a decision record past the index's covered count."""
    meta = src.dbs["meta"]
    prefetch = getattr(txn, "prefetch", None)
    if prefetch is not None:
        prefetch({meta: [DECISION_PREFIX + c for c in cids]})
    tail = {
        decided_checkpoint(r.kind, r.body)
        for r in AuditView(src, txn).audit_records(
            kind=DECISION_KIND, start=indexed_count(txn, meta)
        )
    }
    return [c for c in cids if c in tail or txn.get(DECISION_PREFIX + c, db=meta) is not None]


def carried_decisions(src: Backend, txn: Txn[memoryview], cids: Iterable[bytes]) -> Carried:
    """The source's standing decision of each of ``cids`` that is not an ACCEPT."""
    view = AuditView(src, txn)
    out: Carried = {}
    for cid in _decided(src, txn, list(cids)):
        rec = view.latest_decision(cid.hex())
        if rec is not None and _severity(rec.body) != int(Verdict.ACCEPT):
            out[cid] = rec
    return out


def _wanted(view: AuditView, cid: bytes, rec: AuditRecord) -> bool:
    """True when ``rec`` (a source record about ``cid``) is to be appended to ``view``'s log."""
    ident = rec.body.get("decision_id")
    standing = view.latest_decision(cid.hex())
    if standing is not None and standing.body.get("decision_id") == ident:
        return False
    if isinstance(ident, str) and ident and view.decisions_by_id(ident):
        return False  # known here already: what the destination decided since is its own
    return standing is None or _severity(standing.body) <= _severity(rec.body)


def check_carry(dst: Backend, carried: Carried) -> None:
    """Before anything is copied: refuse (StoreError) when a decision is to be carried
    and the destination's log cannot be appended to (keyed, opened without its key)."""
    if not carried or not (dst.audit_keyed and dst.audit_key is None):
        return
    with dst.read_txn() as txn:
        view = AuditView(dst, txn)
        wanted = [cid for cid, rec in carried.items() if _wanted(view, cid, rec)]
    if wanted:
        raise StoreError(
            "the receiving store's audit log is keyed and was opened without its key: the "
            "source's decisions about the checkpoints this transfer copies cannot be "
            "appended to it, so nothing is copied (transfer() with a store opened with "
            "audit_key= carries them)",
            where=dst.path,
            expected="the destination's audit key",
            got=f"{len(wanted)} decision(s) to carry, first about checkpoint {wanted[0].hex()}",
        )


def land_decisions(
    src: Backend, dst: Backend, txn: Txn[memoryview], cids: Iterable[bytes], carried: Carried
) -> int:
    """Append, in the landing write ``txn``, the carried decisions of ``cids`` that the
    destination stores and lacks; returns how many were appended."""
    view = AuditView(dst, txn)
    records = records_of(dst.dbs)
    appended = 0
    for cid in cids:
        rec = carried.get(cid)
        if rec is None or not records.exists(txn, cid) or not _wanted(view, cid, rec):
            continue
        body = dict(rec.body)
        body[IMPORTED] = {"store": redact(src.path), "audit": rec.digest, "index": rec.index}
        content = check_metadata(body, "audit body")
        append_audit_txn(dst, txn, "decision", content, float(dst.now()))
        appended += 1
    return appended
