"""The hash-chained, append-only audit log (docs/store.md, "Audit log").

Record ``i`` is the canonical encoding of ``{"index", "prev", "kind", "body", "time"}``
stored under the 8-byte big-endian key ``i``; its digest is its identity and ``prev`` is the
digest of record ``i - 1``. The meta key ``audit_head`` holds ``[count, last digest]`` so
that losing the newest records is found too. Nothing in cpstore deletes an audit record.

:func:`append_audit_checked` evaluates the caller's check *inside* the write txn that
appends, over an :class:`AuditView` of that txn: no other writer, in any process, can append
between the check and the record (LMDB has one writer at a time). The gates use it so that
"not used before" and "not superseded" hold when their record lands.

The decision index (meta keys ``decision/<checkpoint id>``, covered count under
``decisions_indexed``) maps a checkpoint to the audit index of the latest ``decision``
record about it (its ``recorded.checkpoint_id``). It is maintained in the append's txn,
caught up from the log when it lags (a store written before it existed), and checked by
``cpstore.store.audit_chain.check_audit_chain``. The audited-checkpoint index
(``cpstore.store.audit_named``: which checkpoints the log names, for retention sweeps) is
kept, caught up and checked the same way; :func:`audited_among` answers from it. So is the
gate index (``cpstore.store.audit_gates``, ``audit_permits``: decisions by id and prefix,
sign-offs, gates, permit uses, branch quarantines), which the :class:`AuditView` methods
answer from.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from cpstore.errors import (
    AuditChainError,
    CanonicalEncodingError,
    InvalidInputError,
    NotFoundError,
)
from cpstore.native.binding import digest
from cpstore.native.canonical import decode_value, encode_value
from cpstore.native.fast_canonical import decode_fast, encode_fast
from cpstore.store.audit_gates import gate_count, put_gate_rows, set_gate_count, start_rebuild
from cpstore.store.audit_lookups import GateLookups
from cpstore.store.audit_named import (
    AUDITED_PREFIX,
    named_by,
    named_count,
    put_first_naming,
    put_named,
    set_named_count,
)
from cpstore.store.audit_permits import index_row
from cpstore.store.backend import FORKS, Backend, Txn, forked_view
from cpstore.store.keyed_audit import check_can_append, check_mac, keyed_in, mac_append
from cpstore.store.model import AuditRecord, check_metadata, parse_id

__all__ = [
    "AuditView",
    "append_audit",
    "append_audit_checked",
    "append_audit_txn",
    "audit_records",
    "audit_view",
    "audited_among",
    "catch_up_indexes",
    "check_record_mac",
    "decided_checkpoint",
    "get_audit",
    "indexed_count",
    "indexes_lag",
]

_INDEX = struct.Struct(">Q")
HEAD_KEY = b"audit_head"
#: Audit kind the decision index covers (``cpstore.decision`` AUDIT_DECISION).
DECISION_KIND = "decision"
DECISION_PREFIX = b"decision/"
DECISIONS_INDEXED = b"decisions_indexed"


def _decode(index: int, raw: bytes | memoryview, where: str) -> AuditRecord:
    try:
        rec = decode_fast(raw)
    except CanonicalEncodingError as exc:
        raise AuditChainError("audit record is not canonical", where=where, got=str(exc)) from None
    if (
        not isinstance(rec, dict)
        or rec.get("index") != index
        or not isinstance(rec.get("kind"), str)
        or not isinstance(rec.get("body"), dict)
        or not isinstance(rec.get("time"), float)
        or "prev" not in rec  # present even for record 0 (as nil)
        or not (rec["prev"] is None or isinstance(rec["prev"], bytes))
    ):
        raise AuditChainError("audit record has the wrong shape", where=where, got=rec)
    prev = rec["prev"]
    return AuditRecord(
        index=index,
        digest=digest(raw).hex(),
        prev=None if prev is None else prev.hex(),
        kind=rec["kind"],
        body=rec["body"],
        time=rec["time"],
    )


def decided_checkpoint(kind: str, body: Mapping[str, Any]) -> bytes | None:
    """The checkpoint (16 raw bytes) a decision record is about, or None."""
    if kind != DECISION_KIND:
        return None
    recorded = body.get("recorded")
    cid = recorded.get("checkpoint_id") if isinstance(recorded, Mapping) else None
    if not isinstance(cid, str) or len(cid) != 32:
        return None
    try:
        return bytes.fromhex(cid)
    except ValueError:
        return None


def indexed_count(txn: Txn[memoryview], meta: Any) -> int:
    """How many decision records the decision index covers (0 when unreadable)."""
    raw = txn.get(DECISIONS_INDEXED, db=meta)
    try:
        count = None if raw is None else decode_value(raw)
    except CanonicalEncodingError:
        count = None
    return count if isinstance(count, int) and count >= 0 else 0


def _covered(txn: Txn[memoryview], meta: Any) -> tuple[int, int, int]:
    """The covered counts of the decision, audited-checkpoint and gate indexes."""
    return indexed_count(txn, meta), named_count(txn, meta), gate_count(txn, meta)


def _catch_up(txn: Txn[memoryview], dbs: Mapping[str, Any], end: int) -> tuple[int, int, int]:
    """Index the records ``0`` to ``end - 1`` that an index does not cover yet; the three
    covered counts found (decision, audited-checkpoint and gate indexes).

    Each index starts at its own covered count; the caller records the new counts
    (``end`` or more).
    """
    meta = dbs["meta"]
    counts = _covered(txn, meta)
    decided_from, named_from, gated_from = counts
    start = min(counts)
    if start >= end:
        return counts
    if gated_from == 0:
        start_rebuild(txn, meta)
    latest: dict[bytes, int] = {}  # checkpoint -> its latest decision's index
    first: dict[bytes, int] = {}  # checkpoint -> the first record naming it
    with txn.cursor(db=dbs["audit"]) as cur:
        found = cur.set_range(_INDEX.pack(start))
        while found:
            index = _INDEX.unpack(cur.key())[0]
            if index >= end:
                break
            rec = _decode(index, cur.value(), f"audit/{index}")
            cid = decided_checkpoint(rec.kind, rec.body)
            if cid is not None and index >= decided_from:
                latest[cid] = index
            if index >= named_from:
                for named in named_by(rec.kind, rec.body):
                    first.setdefault(named, index)
            if index >= gated_from:  # in order: a row is claimed after it is written
                put_gate_rows(
                    txn, meta, index, bytes.fromhex(rec.digest), kind=rec.kind, body=rec.body
                )
            found = cur.next()
    for cid, index in latest.items():
        txn.put(DECISION_PREFIX + cid, encode_value(index), db=meta)
    for cid, index in first.items():
        put_first_naming(txn, meta, cid, index)
    return counts


def _record_count(txn: Txn[memoryview], dbs: Mapping[str, Any]) -> int:
    """One more than the last record's index (0 for an empty log)."""
    with txn.cursor(db=dbs["audit"]) as cur:
        return _INDEX.unpack(cur.key())[0] + 1 if cur.last() else 0


def catch_up_indexes(store: Backend, txn: Txn[memoryview]) -> None:
    """In the caller's write txn, bring the audit indexes up to the whole log."""
    dbs = store.dbs
    meta = dbs["meta"]
    end = _record_count(txn, dbs)
    decided_from, named_from, gated_from = _catch_up(txn, dbs, end)
    if decided_from < end:
        txn.put(DECISIONS_INDEXED, encode_value(end), db=meta)
    if named_from < end:
        set_named_count(txn, meta, end)
    if gated_from < end:
        set_gate_count(txn, meta, end)


def indexes_lag(store: Backend) -> bool:
    """True when an audit index does not cover the whole log (a read txn; no decode)."""
    with store.read_txn() as txn:
        return min(_covered(txn, store.dbs["meta"])) < _record_count(txn, store.dbs)


def audited_among(store: Backend, txn: Txn[memoryview], cids: Iterable[bytes]) -> set[bytes]:
    """Which of ``cids`` (16 raw bytes each) the audit log names (``audit_named.named_by``).

    One index read per checkpoint, one record read per indexed one (that record
    must name it: a forged entry is an AuditChainError, never a silent answer),
    then a scan of the records the index does not cover yet (none after
    :func:`catch_up_indexes`).
    """
    view = AuditView(store, txn)
    meta = store.dbs["meta"]
    wanted = set(cids)
    found: set[bytes] = set()
    for cid in sorted(wanted):
        raw = txn.get(AUDITED_PREFIX + cid, db=meta)
        if raw is None:
            continue
        try:
            index = decode_value(raw)
        except CanonicalEncodingError:
            index = None
        valid = isinstance(index, int) and not isinstance(index, bool) and 0 <= index < 2**64
        recs = list(view.audit_records(start=index, limit=1)) if valid else []
        if not recs or recs[0].index != index or cid not in named_by(recs[0].kind, recs[0].body):
            raise AuditChainError(
                "audited-checkpoint index names a record that does not name the checkpoint "
                "(verify reports the index)",
                where=f"meta/audited/{cid.hex()}",
                expected="the index of an audit record naming the checkpoint",
                got=index,
            )
        found.add(cid)
    # Records the index does not cover yet (appended by an older cpstore).
    for rec in view.audit_records(start=named_count(txn, meta)):
        found.update(wanted.intersection(named_by(rec.kind, rec.body)))
    return found


class AuditView(GateLookups):
    """The audit log as one txn sees it (read, or the appending write txn). It offers the
    read methods of :class:`~cpstore.store.facade.Store` under the same names, so the gates'
    checks run unchanged over a store or inside an append. Use it only while its txn is
    open, in the process that began it: ForkError in a fork() child, InvalidInputError after
    its ``with`` block; each checked again by an iteration at every record it hands out.
    Its gate-index questions (``decisions_by_id``, ``sign_off_of`` …) are those of its base,
    :class:`~cpstore.store.audit_lookups.GateLookups`."""

    def __init__(self, store: Backend, txn: Txn[memoryview]) -> None:
        self._store, self._held, self._fork = store, txn, FORKS[0]
        self._dbs = store.dbs
        self.closed = False  # set when audit_view()'s block ends

    @property
    def _txn(self) -> Txn[memoryview]:  # the parent's in a fork() child (FORKS, audit41)
        if self._fork != FORKS[0]:
            raise forked_view("audit view", None)
        if self.closed:  # the txn is over: py-lmdb's raw error, or a reused reader slot
            raise InvalidInputError(
                "the audit view is closed",
                expected="use inside with store.audit_view() as log: ...",
                got="use after the with block ended",
            )
        return self._held

    def audit_records(
        self, *, kind: str | None = None, start: int = 0, limit: int | None = None
    ) -> Iterator[AuditRecord]:
        """Records from ``start`` in order, filtered by ``kind``."""
        produced = 0
        with self._txn.cursor(db=self._dbs["audit"]) as cur:
            found = cur.set_range(_INDEX.pack(start))
            while found and (limit is None or produced < limit):
                index = _INDEX.unpack(cur.key())[0]
                rec = _decode(index, cur.value(), f"audit/{index}")
                if kind is None or rec.kind == kind:
                    yield rec
                    produced += 1
                    self._txn  # noqa: B018 - resumed after its block, or in a fork() child
                found = cur.next()

    def get_audit(self, digest_hex: str) -> AuditRecord:
        """The record whose digest is ``digest_hex``."""
        return _get(self._txn, self._dbs, digest_hex)

    def check_audit_mac(self, index: int) -> None:
        """Raise AuditChainError unless record ``index`` carries its true keyed MAC."""
        check_record_mac(self._store, self._txn, index)

    def latest_decision(self, checkpoint_id: str) -> AuditRecord | None:
        """The latest ``decision`` record about ``checkpoint_id`` (decision index + log tail),
        one the chain vouches for (``chained_digest``; else AuditChainError)."""
        cid = parse_id(checkpoint_id, "checkpoint id")
        latest = self.indexed_decision(cid)
        # Records the index does not cover yet (written by an older cpstore).
        txn, meta = self._txn, self._dbs["meta"]
        for rec in self.audit_records(kind=DECISION_KIND, start=indexed_count(txn, meta)):
            if decided_checkpoint(rec.kind, rec.body) == cid:
                latest = rec
        if latest is not None:
            self.check_vouched(latest)  # altered in place: its successor (or head) disagrees
        return latest

    def indexed_decision(self, cid: bytes, *, before: int = 2**64) -> AuditRecord | None:
        """The record the decision index names for checkpoint ``cid`` (16 raw bytes), or
        None without a row; AuditChainError when the row is damaged or names a record
        that is not a decision about ``cid`` below ``before`` (never a wrong answer)."""
        raw = self._txn.get(DECISION_PREFIX + cid, db=self._dbs["meta"])
        if raw is None:
            self._check_no_row(cid)
            return None
        try:
            index = decode_value(raw)
        except CanonicalEncodingError:
            index = None
        valid = isinstance(index, int) and not isinstance(index, bool) and 0 <= index < before
        found = list(self.audit_records(start=index, limit=1)) if valid else []
        if (
            not found
            or found[0].index != index
            or decided_checkpoint(found[0].kind, found[0].body) != cid
        ):
            raise AuditChainError(
                "decision index names a record that is not a decision about the checkpoint "
                "(verify reports the index)",
                where=f"meta/decision/{cid.hex()}",
                expected="the audit index of the checkpoint's latest decision",
                got=index,
            )
        return found[0]

    def _check_no_row(self, cid: bytes) -> None:
        """AuditChainError when ``cid`` has no decision-index row but the first record
        naming it (its ``audited/`` row) is a covered decision about it: the row was
        deleted, and "no decision" would let a recorder on with no permit (audit62). A
        checkpoint first named by another record, or as a replayed side, is not told."""
        txn, meta = self._txn, self._dbs["meta"]
        raw = txn.get(AUDITED_PREFIX + cid, db=meta)
        if raw is None:
            return
        valid, index = index_row(raw)
        rec = self._read_one(index) if valid and index is not None else None
        if rec is None or rec.index != index or cid not in named_by(rec.kind, rec.body):
            raise AuditChainError(
                "audited-checkpoint index names a record that does not name the checkpoint "
                "(verify reports the index)",
                where=f"meta/audited/{cid.hex()}",
                got=index,
            )
        if rec.index < indexed_count(txn, meta) and decided_checkpoint(rec.kind, rec.body) == cid:
            raise AuditChainError(
                "decision index lacks the row of a checkpoint a covered decision is about "
                "(verify reports the index)",
                where=f"meta/decision/{cid.hex()}",
                expected=f"the audit index of a decision at or after {rec.index}",
                got=None,
            )

    def check_vouched(
        self, rec: AuditRecord, after: AuditRecord | None = None, *, what: str = ""
    ) -> None:
        """AuditChainError (where ``audit/<index>``) unless ``rec`` is the very record the
        chain vouches for (:meth:`chained_digest`): an altered record that still decodes is
        no longer the one the next record's ``prev`` (or the head) names (audit62).
        ``after``: the record listed after ``rec``, when the caller has it; its ``prev``
        vouches when it is record ``rec.index + 1`` (no read). ``what``: appended to the
        message, the caller's consequence."""
        if after is not None and after.index == rec.index + 1:
            vouched = after.prev
        else:
            vouched = self.chained_digest(rec.index)
        if vouched != rec.digest:
            raise AuditChainError(
                "audit record is not the one the chain vouches for (altered)" + what,
                where=f"audit/{rec.index}",
                expected=vouched,
                got=rec.digest,
            )

    def chained_digest(self, index: int) -> str:
        """The digest the log vouches for record ``index``: the ``prev`` of record
        ``index + 1``, or the head's last digest (meta ``audit_head``) when ``index`` is the
        last record. AuditChainError when what should vouch is damaged."""
        after = next(self.audit_records(start=index + 1, limit=1), None)
        if after is not None:
            if after.index != index + 1:
                raise AuditChainError("audit log has a gap", where=f"audit/{index + 1}")
            return str(after.prev)
        head = _read_head(self._txn, self._dbs["meta"])
        if head is None:
            raise AuditChainError("audit head is missing or damaged", where="meta/audit_head")
        if head[0] != index + 1:
            raise AuditChainError(
                "audit head does not match the last record (records lost?)",
                where="meta/audit_head",
                expected=index + 1,
                got=head[0],
            )
        result: str = head[1].hex()
        return result


def check_record_mac(store: Backend, txn: Txn[memoryview], index: int) -> None:
    """Raise AuditChainError unless audit record ``index`` carries its true keyed MAC.

    A no-op on an unkeyed store; on a keyed store opened without the key it
    raises, since nothing it reads can be trusted against a forger.
    """
    if not keyed_in(store, txn):
        return
    if store.audit_key is None:
        raise AuditChainError(
            "this store's audit log is keyed; open it with audit_key= to trust a record",
            where=f"audit/{index}",
        )
    check_mac(txn, store.dbs, store.audit_key, index)


@contextmanager
def audit_view(store: Backend) -> Iterator[AuditView]:
    """An :class:`AuditView` over a read txn, for the ``with`` block."""
    with store.read_txn() as txn:
        view = AuditView(store, txn)
        try:
            yield view
        finally:
            view.closed = True


def append_audit(store: Backend, kind: str, body: Mapping[str, Any]) -> AuditRecord:
    """Append one record after the current last one, in one durable txn."""
    return append_audit_checked(store, kind, lambda _log: body)


def append_audit_checked(
    store: Backend, kind: str, prepare: Callable[[AuditView], Mapping[str, Any]]
) -> AuditRecord:
    """Append the body ``prepare`` returns, ``prepare`` running inside the append's txn.

    ``prepare`` sees the log through an :class:`AuditView` of the write txn and
    raises to refuse: nothing is appended then. It may run more than once (the
    txn is retried after the map grows), so it must depend only on the view.
    """
    if not isinstance(kind, str) or not kind:
        raise InvalidInputError("audit kind must be a non-empty str", got=kind)
    when = float(store.now())

    def append(txn: Txn[memoryview]) -> AuditRecord:
        content = check_metadata(prepare(AuditView(store, txn)), "audit body")
        return append_audit_txn(store, txn, kind, content, when)

    result: AuditRecord = store.write_txn(append)
    return result


def append_audit_txn(
    store: Backend, txn: Txn[memoryview], kind: str, content: dict[str, Any], when: float
) -> AuditRecord:
    """Append one record in the caller's write txn (for a change audited atomically with it).

    ``content`` must already have passed ``check_metadata``. The decision index
    and the audited-checkpoint index (docs/store.md) are kept in this same txn.
    """
    check_can_append(store, txn)
    dbs = store.dbs
    audit, index_db, meta = dbs["audit"], dbs["audit_index"], dbs["meta"]
    with txn.cursor(db=audit) as cur:
        if cur.last():
            last_index = _INDEX.unpack(cur.key())[0]
            last = digest(cur.value())
            _check_last_vouched(txn, dbs, last_index, last)
            prev: bytes | None = last
            index = last_index + 1
        else:
            prev, index = None, 0
    raw = encode_fast({"index": index, "prev": prev, "kind": kind, "body": content, "time": when})
    key = digest(raw)
    if not txn.put(_INDEX.pack(index), raw, overwrite=False, db=audit):
        raise AuditChainError("audit index already used", where=f"audit/{index}")
    if store.audit_key is not None:
        mac_append(txn, dbs, store.audit_key, index, raw)
    txn.put(key, _INDEX.pack(index), overwrite=False, db=index_db)
    txn.put(HEAD_KEY, encode_fast([index + 1, key]), db=meta)
    _catch_up(txn, dbs, index)
    cid = decided_checkpoint(kind, content)
    if cid is not None:
        # The row this decision replaces must be sound: overwritten unread, a damaged row
        # was erased with nothing reported (audit62; the txn aborts, nothing appended).
        AuditView(store, txn).indexed_decision(cid, before=index)
        txn.put(DECISION_PREFIX + cid, encode_value(index), db=meta)
    put_named(txn, meta, index, kind, content)
    put_gate_rows(txn, meta, index, key, kind=kind, body=content)
    txn.put(DECISIONS_INDEXED, encode_value(index + 1), db=meta)
    set_named_count(txn, meta, index + 1)
    set_gate_count(txn, meta, index + 1)
    return AuditRecord(index, key.hex(), None if prev is None else prev.hex(), kind, content, when)


def _check_last_vouched(
    txn: Txn[memoryview], dbs: Mapping[str, Any], last_index: int, last: bytes
) -> None:
    """AuditChainError when neither the digest index nor the head vouches for the last
    record's bytes as stored: it was altered in place, and the append would make its
    ``prev`` vouch for it, and the gates trust it again (session 26). One index read
    when sound; a damaged head alone (the record indexed) lets the append rewrite it."""
    pos = txn.get(last, db=dbs["audit_index"])
    if pos is not None and bytes(pos) == _INDEX.pack(last_index):
        return
    head = _read_head(txn, dbs["meta"])
    if head is not None and head[0] == last_index + 1 and head[1] == last:
        return
    raise AuditChainError(
        "the last audit record is not the one the chain vouches for (altered in place): "
        "an append would vouch for it; nothing appended (verify reports it)",
        where=f"audit/{last_index}",
        expected=None if head is None else head[1].hex(),
        got=last.hex(),
    )


def _read_head(txn: Txn[memoryview], meta: Any) -> tuple[Any, bytes] | None:
    """Meta ``audit_head`` as ``(count, last digest)``, or None when it is missing or
    does not decode to a pair whose second item is bytes (the count is the caller's to
    compare)."""
    raw = txn.get(HEAD_KEY, db=meta)
    try:
        head = None if raw is None else decode_fast(raw)
    except CanonicalEncodingError:
        return None
    if isinstance(head, list) and len(head) == 2 and isinstance(head[1], bytes):
        return head[0], head[1]
    return None


def audit_records(
    store: Backend, *, kind: str | None = None, start: int = 0, limit: int | None = None
) -> Iterator[AuditRecord]:
    """Records from ``start`` in order, filtered by ``kind``; read in pages of 256."""
    if isinstance(start, bool) or not isinstance(start, int) or not 0 <= start < 2**64:
        raise InvalidInputError("start must be an int in [0, 2**64)", got=start)
    if limit is not None and (not isinstance(limit, int) or limit < 0):
        raise InvalidInputError("limit must be a non-negative int or None", got=limit)
    audit = store.db("audit")
    produced = 0
    position = start
    while limit is None or produced < limit:
        page: list[AuditRecord] = []
        with store.read_txn() as txn, txn.cursor(db=audit) as cur:
            found = cur.set_range(_INDEX.pack(position))
            while found and len(page) < 256:
                index = _INDEX.unpack(cur.key())[0]
                page.append(_decode(index, cur.value(), f"audit/{index}"))
                found = cur.next()
        if not page:
            return
        for rec in page:
            position = rec.index + 1
            if kind is None or rec.kind == kind:
                yield rec
                produced += 1
                if limit is not None and produced >= limit:
                    return


def get_audit(store: Backend, digest_hex: str) -> AuditRecord:
    """The record whose digest is ``digest_hex``."""
    with store.read_txn() as txn:
        return _get(txn, store.dbs, digest_hex)


def _get(txn: Txn[memoryview], dbs: Mapping[str, Any], digest_hex: str) -> AuditRecord:
    key = parse_id(digest_hex, "audit digest")
    pos = txn.get(key, db=dbs["audit_index"])
    if pos is None:
        raise NotFoundError("no audit record with this digest", where="audit", got=digest_hex)
    index = _INDEX.unpack(pos)[0]
    raw = txn.get(bytes(pos), db=dbs["audit"])
    if raw is None or digest(raw) != key:
        raise AuditChainError("audit index points at a different record", where=f"audit/{index}")
    return _decode(index, raw, f"audit/{index}")
