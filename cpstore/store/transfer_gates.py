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

A branch the source quarantined through a decision since superseded (its
checkpoint validated again) stays quarantined in the destination: that first
quarantining decision (the source's ``quarantined/`` row, or a record past its gate
index) is carried too, before the standing one, when it is about a checkpoint the
branch lands, the destination does not know its ``decision_id``, has not quarantined
that run and branch itself and holds no stricter standing decision for the
checkpoint. The destination's standing decision for that checkpoint is then that
QUARANTINE (stricter than the source's later one, never milder) until it decides
again itself; the branch stays quarantined there for good, as in the source. A
branch's first quarantine about a checkpoint no landing branch holds (swept by the
source's retention) is carried with the branch it names (``Carry.aside``). One the
destination's stricter standing decision for its checkpoint keeps out (a REJECT of its
own) is carried for its branch only (:func:`_branch_only`): the stricter decision
stands and the branch is quarantined. A record so carried is about no checkpoint; pulled
on into a third store it goes with the checkpoint its ``imported`` names, for its branch
only again (it was picked up by no carry, and the third store certified a rollback the
first two refuse).

Sign-offs, gate records and permits are not carried: a carried QUARANTINE needs
the destination's own operator sign-off (docs/decision-table.md, "Gates").
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
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
from cpstore.store.audit_gates import gate_count
from cpstore.store.audit_named import AUDITED_PREFIX
from cpstore.store.audit_permits import (
    QUARANTINE_PREFIX,
    branch_key,
    branch_of,
    index_row,
    unverified,
)
from cpstore.store.backend import Backend, Txn
from cpstore.store.content import records_of
from cpstore.store.keyed_audit import keyed_in
from cpstore.store.location import redact
from cpstore.store.model import AuditRecord, check_metadata

__all__ = ["IMPORTED", "Carried", "Carry", "carried_decisions", "check_carry", "land_decisions"]

#: Body field of a carried decision naming where it came from.
IMPORTED = "imported"
#: Severity of a decision record the gates refuse outright (verdict not following).
_UNUSABLE = 2 * int(Verdict.REJECT) + 2


@dataclass(frozen=True)
class Carry:
    """The source's records to carry about one checkpoint, appended in this order."""

    #: The first quarantines of branches, about this checkpoint, since superseded (log order).
    quarantines: tuple[AuditRecord, ...]
    #: The checkpoint's standing decision when it is not an ACCEPT.
    standing: AuditRecord | None
    #: The checkpoint lands in no branch of the transfer (retention swept it in the
    #: source, or a reset left it behind): ``quarantines`` are carried with the branch
    #: they quarantine (land_decisions' ``pair``), whether or not it is stored there.
    aside: bool = False


#: A checkpoint id (16 raw bytes) -> what the source's log carries about it.
Carried = dict[bytes, Carry]


def _severity(body: dict[str, Any]) -> int:
    """How strict a decision body is, as the gates derive it: twice its verdict, plus one
    when a finding no sign-off can release is among its codes (a REJECT only the source
    could release is milder than one nobody can: audit52), or :data:`_UNUSABLE` when a
    code is unknown or the stored verdict does not follow."""
    try:
        codes = [FindingCode(f.get("code")) for f in body.get("findings", [])]
    except (ValueError, AttributeError, TypeError):
        return _UNUSABLE
    derived = max((FINDING_RULES[c][0] for c in codes), default=Verdict.ACCEPT)
    if body.get("verdict") != derived.name:
        return _UNUSABLE
    return 2 * int(derived) + any(not FINDING_RULES[c][1] for c in codes)


def _decided(src: Backend, txn: Txn[memoryview], cids: list[bytes]) -> list[bytes]:
    """Those of ``cids`` that may have a decision: a decision index row, or an
    audited-checkpoint row (a deleted decision row then makes ``latest_decision`` raise
    instead of the checkpoint travelling with no decision, audit62), both fetched in one
    round trip on PostgreSQL; or a decision record past the index's covered count."""
    meta = src.dbs["meta"]
    prefetch = getattr(txn, "prefetch", None)
    if prefetch is not None:
        prefetch({meta: [p + c for c in cids for p in (DECISION_PREFIX, AUDITED_PREFIX)]})
    tail = {
        decided_checkpoint(r.kind, r.body)
        for r in AuditView(src, txn).audit_records(
            kind=DECISION_KIND, start=indexed_count(txn, meta)
        )
    }
    return [
        c
        for c in cids
        if c in tail
        or txn.get(DECISION_PREFIX + c, db=meta) is not None
        or txn.get(AUDITED_PREFIX + c, db=meta) is not None
    ]


def _first_quarantines(view: AuditView, txn: Txn[memoryview], meta: Any) -> Iterator[AuditRecord]:
    """The first quarantining decision of each run and branch a log has quarantined: the
    records its ``quarantined/`` rows name, then those past its gate index (a pair too long
    for a row is found only there). A damaged or wrong row names nothing here (verify
    reports it in that store)."""
    seen: set[bytes] = set()
    with txn.cursor(db=meta) as cur:
        rows, found = [], cur.set_range(QUARANTINE_PREFIX)
        while found and bytes(cur.key()).startswith(QUARANTINE_PREFIX):
            rows.append((bytes(cur.key()), index_row(bytes(cur.value()))))
            found = cur.next()
    for key, (valid, index) in rows:
        seen.add(key)
        if valid and index is not None:
            named = next(view.audit_records(start=index, limit=1), None)
            if named is not None and named.index == index and _quarantining(named):
                yield _vouched(view, named)
    for rec in view.audit_records(kind=DECISION_KIND, start=gate_count(txn, meta)):
        _, run_id, branch = branch_of(rec.body)
        pair = branch_key(run_id, branch)
        if _quarantining(rec) and (pair is None or pair not in seen):
            if pair is not None:
                seen.add(pair)
            yield _vouched(view, rec)


def _vouched(view: AuditView, rec: AuditRecord) -> AuditRecord:
    """``rec`` when the source's chain vouches for it (the next record's ``prev``, or the
    head); AuditChainError for a record altered in place, which would land with a digest
    the source's chain does not hold (audit62: as ``latest_decision`` refuses one)."""
    view.check_vouched(rec, what="; nothing carried")
    return rec


def _quarantining(rec: AuditRecord) -> bool:
    return rec.kind == DECISION_KIND and branch_of(rec.body)[0] and unverified(rec.body)


def carried_decisions(
    src: Backend,
    txn: Txn[memoryview],
    cids: Iterable[bytes],
    pairs: Sequence[tuple[str, str]] = (),
) -> Carried:
    """What the source's log carries about each of ``cids``: its standing decision when not
    an ACCEPT, and a branch's first quarantine about it when since superseded; and the first
    quarantine of each of ``pairs`` (the run and branch of each landing branch) about a
    checkpoint not in ``cids`` (``Carry.aside``)."""
    view = AuditView(src, txn)
    landing = list(cids)
    standing = {cid: view.latest_decision(cid.hex()) for cid in _decided(src, txn, landing)}
    quarantines: dict[bytes, list[AuditRecord]] = {}
    aside: dict[bytes, list[AuditRecord]] = {}
    every = set(landing)
    for rec in _first_quarantines(view, txn, src.dbs["meta"]):
        moved = _moved_checkpoint(rec.body)  # carried here for its branch only: carried on
        about = decided_checkpoint(rec.kind, rec.body) if moved is None else moved
        if about is not None and about not in every:
            if branch_of(rec.body)[1:] in pairs:  # == per pair: a field may be unhashable
                aside.setdefault(about, []).append(rec)
            continue
        now = standing.get(about) if about is not None else None
        superseded = now is not None and now.index != rec.index
        if about is not None and (moved is not None or superseded):
            quarantines.setdefault(about, []).append(rec)
    out: Carried = {
        cid: Carry(tuple(sorted(found, key=lambda r: r.index)), None, aside=True)
        for cid, found in aside.items()
    }
    for cid in dict.fromkeys([*standing, *quarantines]):
        last = standing.get(cid)
        keep = last if last is not None and _severity(last.body) != int(Verdict.ACCEPT) else None
        if keep is not None or cid in quarantines:
            found = sorted(quarantines.get(cid, []), key=lambda r: r.index)
            out[cid] = Carry(tuple(found), keep)
    return out


def _wanted(
    view: AuditView, cid: bytes, rec: AuditRecord, before: AuditRecord | None = None
) -> bool:
    """True when ``rec`` (a source record about ``cid``) is to be appended to ``view``'s log;
    ``before`` is a record about ``cid`` judged to be appended just before it."""
    ident = rec.body.get("decision_id")
    standing = before if before is not None else view.latest_decision(cid.hex())
    if standing is not None and standing.body.get("decision_id") == ident:
        return False
    if _known(view, rec):
        return False  # known here already: what the destination decided since is its own
    return standing is None or _severity(standing.body) <= _severity(rec.body)


def _known(view: AuditView, rec: AuditRecord) -> bool:
    """Whether the destination holds a decision with ``rec``'s ``decision_id``."""
    ident = rec.body.get("decision_id")
    return bool(isinstance(ident, str) and ident and view.decisions_by_id(ident))


def _pair_quarantined(view: AuditView, rec: AuditRecord) -> bool:
    """Whether the destination has quarantined the run and branch ``rec`` is about."""
    _, run_id, branch = branch_of(rec.body)
    return view.pair_quarantine(run_id, branch) is not None


def _to_append(
    dst: Backend, txn: Txn[memoryview], cid: bytes, carry: Carry
) -> list[tuple[AuditRecord, bool]]:
    """The records of ``carry`` the destination is to append, in order, each judged as if
    the ones before it were appended; each with True when it is carried for its branch
    only (:func:`_branch_only`)."""
    view = AuditView(dst, txn)
    out: list[tuple[AuditRecord, bool]] = []
    ident = None if carry.standing is None else carry.standing.body.get("decision_id")
    for q in carry.quarantines:
        if q.body.get("decision_id") == ident or _pair_quarantined(view, q):
            continue  # one id for both: the standing one goes
        if _moved_checkpoint(q.body) is not None:  # about no checkpoint in the source either
            if not _known(view, q):
                out.append((q, True))
        elif _wanted(view, cid, q, _last_about(out)):
            out.append((q, False))
        elif not _known(view, q):  # a stricter standing decision here keeps its place
            out.append((q, True))
    last = carry.standing
    if last is None:
        return out
    if _wanted(view, cid, last, _last_about(out)):
        out.append((last, False))
    elif (
        _quarantining(last)
        and not _known(view, last)
        and not _pair_quarantined(view, last)
        and not any(_quarantining(r) and _same_pair(r, last) for r, _ in out)
    ):
        out.append((last, True))
    return out


def _last_about(out: list[tuple[AuditRecord, bool]]) -> AuditRecord | None:
    """The last record of ``out`` to be appended as a decision about its checkpoint."""
    return next((r for r, branch_only in reversed(out) if not branch_only), None)


def _same_pair(a: AuditRecord, b: AuditRecord) -> bool:
    return bool(branch_of(a.body)[1:] == branch_of(b.body)[1:])


def _moved_checkpoint(body: dict[str, Any]) -> bytes | None:
    """The checkpoint a record carried into this store for its branch only was about in
    its source (``imported.checkpoint_id`` beside ``branch_only`` true), else None."""
    imported, recorded = body.get(IMPORTED), body.get("recorded")
    if not (isinstance(imported, Mapping) and imported.get("branch_only") is True):
        return None
    if not isinstance(recorded, Mapping) or recorded.get("checkpoint_id") is not None:
        return None
    cid = imported.get("checkpoint_id")
    try:
        return bytes.fromhex(cid) if isinstance(cid, str) and len(cid) == 32 else None
    except ValueError:
        return None


def _branch_only(body: dict[str, Any], checkpoint_id: str | None = None) -> None:
    """Make ``body`` (a carried quarantine's) quarantine its run and branch without being a
    decision about its checkpoint: the destination's standing decision for it is stricter
    (its own REJECT, say), which a carried QUARANTINE appended after it would replace
    with a milder one; not carried at all, the branch arrived unquarantined and the
    destination certified a rollback the source refuses. ``recorded.checkpoint_id``
    moves to ``imported`` (``branch_only`` true), so no gate reads the record as about
    that checkpoint; the ``quarantined/`` row of its pair is indexed as for any decision.
    ``checkpoint_id``: the one a record carried for its branch only in its source too names
    in its ``imported`` (its ``recorded`` one is nil), kept as it is carried on."""
    recorded = dict(body["recorded"])
    moved = recorded["checkpoint_id"] if checkpoint_id is None else checkpoint_id
    body[IMPORTED].update(checkpoint_id=moved, branch_only=True)
    recorded["checkpoint_id"] = None
    body["recorded"] = recorded


def check_carry(dst: Backend, carried: Carried) -> None:
    """Before anything is copied: refuse (StoreError) when a decision is to be carried
    and the destination's log cannot be appended to (keyed, opened without its key)."""
    if not carried or dst.audit_key is not None:
        return
    with dst.read_txn() as txn:
        if not keyed_in(dst, txn):  # read now: another process may have keyed it (audit55)
            return
        wanted = [cid for cid, carry in carried.items() if _to_append(dst, txn, cid, carry)]
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
    src: Backend,
    dst: Backend,
    txn: Txn[memoryview],
    cids: Iterable[bytes],
    carried: Carried,
    *,
    pair: tuple[str, str] | None = None,
) -> int:
    """Append, in the landing write ``txn``, the carried decisions of ``cids`` that the
    destination stores and lacks, and the quarantines of run and branch ``pair`` carried
    aside; returns how many were appended."""
    records = records_of(dst.dbs)
    todo = [(cid, carried.get(cid)) for cid in cids if records.exists(txn, cid)]
    todo += [
        (cid, carry)
        for cid, carry in carried.items()
        if carry.aside and pair is not None and branch_of(carry.quarantines[0].body)[1:] == pair
    ]
    appended = 0
    for cid, carry in todo:
        if carry is None or (carry.aside and pair is None):
            continue
        for rec, branch_only in _to_append(dst, txn, cid, carry):
            body = dict(rec.body)
            moved = _moved_checkpoint(body)  # read before ``imported`` is the source's own
            body[IMPORTED] = {"store": redact(src.path), "audit": rec.digest, "index": rec.index}
            if branch_only:
                _branch_only(body, None if moved is None else moved.hex())
            content = check_metadata(body, "audit body")
            append_audit_txn(dst, txn, "decision", content, float(dst.now()))
            appended += 1
    return appended
