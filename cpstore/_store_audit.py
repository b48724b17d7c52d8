"""The hash-chained, append-only audit log (docs/store.md, "Audit log").

Record ``i`` is the canonical encoding of ``{"index", "prev", "kind", "body",
"time"}`` stored under the 8-byte big-endian key ``i``; its digest is its
identity and ``prev`` is the digest of record ``i - 1``. The meta key
``audit_head`` holds ``[count, last digest]`` so that losing the newest
records is found too. Nothing in cpstore deletes an audit record.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ._canonical import decode_value, encode_value
from ._errors import (
    AuditChainError,
    CanonicalEncodingError,
    InvalidInputError,
    NotFoundError,
    StoreError,
)
from ._native import digest
from ._store_env import Txn
from ._store_keyed import mac_append
from ._store_model import AuditRecord, Problem, check_metadata, parse_id

if TYPE_CHECKING:
    from ._store import Store

__all__ = ["append_audit", "audit_records", "check_audit_chain", "get_audit"]

_INDEX = struct.Struct(">Q")
HEAD_KEY = b"audit_head"


def _decode(index: int, raw: bytes | memoryview, where: str) -> AuditRecord:
    try:
        rec = decode_value(raw)
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


def append_audit(store: Store, kind: str, body: Mapping[str, Any]) -> AuditRecord:
    """Append one record after the current last one, in one durable txn."""
    if not isinstance(kind, str) or not kind:
        raise InvalidInputError("audit kind must be a non-empty str", got=kind)
    content = check_metadata(body, "audit body")
    if store.audit_keyed and store._audit_key is None:
        raise StoreError(
            "this store's audit log is keyed; open it with audit_key= to append",
            where=store.path,
        )
    audit, index_db, meta = store._db("audit"), store._db("audit_index"), store._db("meta")
    when = float(store.now())

    def append(txn: Txn[memoryview]) -> AuditRecord:
        with txn.cursor(db=audit) as cur:
            if cur.last():
                last_index = _INDEX.unpack(cur.key())[0]
                prev: bytes | None = digest(cur.value())
                index = last_index + 1
            else:
                prev, index = None, 0
        raw = encode_value(
            {"index": index, "prev": prev, "kind": kind, "body": content, "time": when}
        )
        key = digest(raw)
        if not txn.put(_INDEX.pack(index), raw, overwrite=False, db=audit):
            raise AuditChainError("audit index already used", where=f"audit/{index}")
        if store._audit_key is not None:
            mac_append(txn, store._e.dbs, store._audit_key, index, raw)
        txn.put(key, _INDEX.pack(index), overwrite=False, db=index_db)
        txn.put(HEAD_KEY, encode_value([index + 1, key]), db=meta)
        return AuditRecord(
            index, key.hex(), None if prev is None else prev.hex(), kind, content, when
        )

    result: AuditRecord = store._write(append)
    return result


def audit_records(
    store: Store, *, kind: str | None = None, start: int = 0, limit: int | None = None
) -> Iterator[AuditRecord]:
    """Records from ``start`` in order, filtered by ``kind``; read in pages of 256."""
    if isinstance(start, bool) or not isinstance(start, int) or not 0 <= start < 2**64:
        raise InvalidInputError("start must be an int in [0, 2**64)", got=start)
    if limit is not None and (not isinstance(limit, int) or limit < 0):
        raise InvalidInputError("limit must be a non-negative int or None", got=limit)
    audit = store._db("audit")
    produced = 0
    position = start
    while limit is None or produced < limit:
        page: list[AuditRecord] = []
        with store._read() as txn, txn.cursor(db=audit) as cur:
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


def get_audit(store: Store, digest_hex: str) -> AuditRecord:
    """The record whose digest is ``digest_hex``."""
    key = parse_id(digest_hex, "audit digest")
    with store._read() as txn:
        pos = txn.get(key, db=store._db("audit_index"))
        if pos is None:
            raise NotFoundError("no audit record with this digest", where="audit", got=digest_hex)
        index = _INDEX.unpack(pos)[0]
        raw = txn.get(bytes(pos), db=store._db("audit"))
        if raw is None or digest(raw) != key:
            raise AuditChainError(
                "audit index points at a different record", where=f"audit/{index}"
            )
        return _decode(index, raw, f"audit/{index}")


def check_audit_chain(txn: Txn[memoryview], dbs: Mapping[str, Any]) -> tuple[int, list[Problem]]:
    """Walk the chain: indexes dense from 0, each ``prev`` the digest before, head matches."""
    problems: list[Problem] = []
    prev: bytes | None = None
    count = 0
    with txn.cursor(db=dbs["audit"]) as cur:
        for key, raw in cur:
            if len(key) != _INDEX.size:
                problems.append(
                    Problem("audit key is not an 8-byte index", f"audit/{bytes(key).hex()}")
                )
                continue
            index = _INDEX.unpack(key)[0]
            where = f"audit/{index}"
            if index != count:
                problems.append(Problem("audit log has a gap", where, expected=count, got=index))
            try:
                rec = _decode(index, raw, where)
            except AuditChainError as exc:
                problems.append(Problem(exc.what, where, got=exc.got))
                prev = digest(raw)
                count = index + 1
                continue
            expected_prev = None if prev is None else prev.hex()
            if rec.prev != expected_prev:
                problems.append(
                    Problem("audit chain broken", where, expected=expected_prev, got=rec.prev)
                )
            d = digest(raw)
            pos = txn.get(d, db=dbs["audit_index"])
            if pos is None or bytes(pos) != bytes(key):
                problems.append(
                    Problem("audit digest index missing or wrong", where, expected=d.hex())
                )
            prev = d
            count = index + 1
    head_raw = txn.get(HEAD_KEY, db=dbs["meta"])
    try:
        head = None if head_raw is None else decode_value(head_raw)
    except CanonicalEncodingError as exc:
        head = f"not canonical: {exc}"
    expected_head = None if count == 0 else [count, prev]
    if head != expected_head:
        problems.append(
            Problem(
                "audit head does not match the last record (records lost?)",
                "meta/audit_head",
                expected=expected_head,
                got=head,
            )
        )
    return count, problems
