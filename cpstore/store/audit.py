"""Appending to the hash-chained, append-only audit log, and keeping its indexes
(docs/store.md, "Audit log"). Nothing in cpstore deletes an audit record.

The records' format and reading them, :class:`AuditView` among them, are
``cpstore.store.audit_read``'s; this module re-exports its public names.

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

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from cpstore.errors import AuditChainError, CanonicalEncodingError, InvalidInputError
from cpstore.native.binding import digest
from cpstore.native.canonical import decode_value, encode_value
from cpstore.native.fast_canonical import encode_fast
from cpstore.store.audit_gates import gate_count, put_gate_rows, set_gate_count, start_rebuild
from cpstore.store.audit_named import (
    AUDITED_PREFIX,
    named_by,
    named_count,
    put_first_naming,
    put_named,
    set_named_count,
)
from cpstore.store.audit_read import (
    _INDEX,
    DECISION_KIND,
    DECISION_PREFIX,
    DECISIONS_INDEXED,
    HEAD_KEY,
    AuditView,
    _decode,
    _read_head,
    audit_records,
    audit_view,
    check_record_mac,
    decided_checkpoint,
    get_audit,
    indexed_count,
)
from cpstore.store.backend import Backend, Txn
from cpstore.store.keyed_audit import check_can_append, mac_append
from cpstore.store.model import AuditRecord, check_metadata

__all__ = [
    "DECISIONS_INDEXED",
    "DECISION_KIND",
    "DECISION_PREFIX",
    "HEAD_KEY",
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
