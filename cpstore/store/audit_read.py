"""Reading the hash-chained audit log (docs/store.md, "Audit log"): the records as
stored, and :class:`AuditView`, the log as one txn sees it.

Record ``i`` is the canonical encoding of ``{"index", "prev", "kind", "body", "time"}``
stored under the 8-byte big-endian key ``i``; its digest is its identity and ``prev`` is the
digest of record ``i - 1``. The meta key ``audit_head`` holds ``[count, last digest]`` so
that losing the newest records is found too.

The decision index (meta keys ``decision/<checkpoint id>``, covered count under
``decisions_indexed``) is read here (:meth:`AuditView.latest_decision`); appending and
keeping it and the other indexes is ``cpstore.store.audit``'s, which sits above this module
and re-exports its public names.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping
from typing import Any

from cpstore.errors import (
    AuditChainError,
    CanonicalEncodingError,
    InvalidInputError,
    NotFoundError,
)
from cpstore.native.binding import digest
from cpstore.native.canonical import decode_value
from cpstore.native.fast_canonical import decode_fast
from cpstore.native.kept import kept_contextmanager
from cpstore.store.audit_lookups import GateLookups
from cpstore.store.audit_named import AUDITED_PREFIX, named_by
from cpstore.store.audit_permits import index_row
from cpstore.store.backend import FORKS, Backend, Txn, forked_view
from cpstore.store.keyed_audit import check_mac, keyed_in
from cpstore.store.model import AuditRecord, parse_id

__all__ = [
    "DECISIONS_INDEXED",
    "DECISION_KIND",
    "DECISION_PREFIX",
    "HEAD_KEY",
    "AuditView",
    "audit_records",
    "audit_view",
    "check_record_mac",
    "decided_checkpoint",
    "get_audit",
    "indexed_count",
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


@kept_contextmanager
def audit_view(store: Backend) -> Iterator[AuditView]:
    """An :class:`AuditView` over a read txn, for the ``with`` block."""
    with store.read_txn() as txn:
        view = AuditView(store, txn)
        try:
            yield view
        finally:
            view.closed = True


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
