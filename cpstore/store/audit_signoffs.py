"""The sign-off index: which decision a sign-off released, which sign-off a gate used.

The gates refuse a second sign-off of one decision and a second use of one
sign-off (``cpstore.decision.gates``). Both once decoded every ``signoff`` or
``gate`` record inside the append's write txn; this index answers them with one
meta row and one record decode (docs/store.md, "Audit log"). Index version
:data:`SIGNOFF_INDEX_VERSION`, meta rows:

* ``signed/<decision digest>`` (16 B) for **every** covered ``decision`` record:
  canonical nil, or the audit index of the first covered ``signoff`` record after it
  whose ``decision_audit`` is that digest (32 lowercase hex characters);
* ``signoff_used/<sign-off digest>`` (16 B) for **every** covered ``signoff`` record:
  nil, or the audit index of the first covered ``gate`` record after it whose
  ``sign_off`` is that digest;
* ``signoffs_indexed``: canonical ``[version, count]``, the rows cover records ``0``
  to ``count - 1`` (absent, damaged or another version: none).

Every covered decision and sign-off has its row, so a row that is missing for a
record below the covered count is damage (``AuditChainError``), never "not signed"
or "unused"; a row naming a record is checked against that record. Records past the
count (an older cpstore appended them) are read from the log. A row rewritten to
nil is found by ``verify()`` only (docs/security.md).

This module reads and writes ``meta`` rows; records are read through the
``read``/``tail`` callables the caller (``cpstore.store.audit``) passes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from cpstore.errors import AuditChainError, CanonicalEncodingError
from cpstore.native.canonical import decode_value, encode_value
from cpstore.store.backend import Txn

__all__ = [
    "SIGNED_PREFIX",
    "SIGNOFFS_INDEXED",
    "SIGNOFF_INDEX_VERSION",
    "USED_PREFIX",
    "SignoffRows",
    "first_sign_off",
    "first_use",
    "put_signoff_rows",
    "set_signoff_count",
    "signoff_count",
]

#: Version of the index's definition and rows; ``signoffs_indexed`` carries it.
SIGNOFF_INDEX_VERSION = 1
SIGNED_PREFIX = b"signed/"
USED_PREFIX = b"signoff_used/"
SIGNOFFS_INDEXED = b"signoffs_indexed"
# The gates' audit kinds (cpstore.decision.gates: AUDIT_DECISION, AUDIT_SIGNOFF, AUDIT_GATE).
DECISION, SIGNOFF, GATE = "decision", "signoff", "gate"
_DIGEST = re.compile("[0-9a-f]{32}")
#: A row's value: nil (nothing yet) or the audit index of the record that names it.
_NIL = encode_value(None)


class _Entry(Protocol):
    @property
    def index(self) -> int: ...
    @property
    def digest(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def body(self) -> dict[str, Any]: ...


def _named(value: object) -> bytes | None:
    """The 16-byte digest a body field names, or None (only what ``.hex()`` prints)."""
    return bytes.fromhex(value) if isinstance(value, str) and _DIGEST.fullmatch(value) else None


def signoff_count(txn: Txn[memoryview], meta: Any) -> int:
    """How many audit records the index covers (0 when absent, damaged or of another version)."""
    raw = txn.get(SIGNOFFS_INDEXED, db=meta)
    try:
        row = None if raw is None else decode_value(raw)
    except CanonicalEncodingError:
        row = None
    if (
        isinstance(row, list)
        and len(row) == 2
        and row[0] == SIGNOFF_INDEX_VERSION
        and isinstance(row[1], int)
        and not isinstance(row[1], bool)
        and row[1] >= 0
    ):
        return row[1]
    return 0


def set_signoff_count(txn: Txn[memoryview], meta: Any, count: int) -> None:
    """Record that the index covers audit records ``0`` to ``count - 1``."""
    txn.put(SIGNOFFS_INDEXED, encode_value([SIGNOFF_INDEX_VERSION, count]), db=meta)


def _row(raw: bytes | memoryview | None) -> tuple[bool, int | None]:
    """(valid, value) of a row: nil or an audit index; invalid when damaged."""
    if raw is None:
        return False, None
    try:
        value = decode_value(raw)
    except CanonicalEncodingError:
        return False, None
    if value is None:
        return True, None
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**64
    return ok, value if ok else None


def _claim(txn: Txn[memoryview], meta: Any, key: bytes, index: int) -> None:
    """Set row ``key`` to ``index`` if it exists and is nil (the first record naming it)."""
    valid, value = _row(txn.get(key, db=meta))
    if valid and value is None:
        txn.put(key, encode_value(index), db=meta)


def put_signoff_rows(
    txn: Txn[memoryview],
    meta: Any,
    index: int,
    record_digest: bytes,
    *,
    kind: str,
    body: Mapping[str, Any],
) -> None:
    """Index record ``index`` (all earlier records indexed already, in this txn or before)."""
    if kind == DECISION:
        txn.put(SIGNED_PREFIX + record_digest, _NIL, db=meta)
    elif kind == SIGNOFF:
        txn.put(USED_PREFIX + record_digest, _NIL, db=meta)
        decision = _named(body.get("decision_audit"))
        if decision is not None:
            _claim(txn, meta, SIGNED_PREFIX + decision, index)
    elif kind == GATE:
        used = _named(body.get("sign_off"))
        if used is not None:
            _claim(txn, meta, USED_PREFIX + used, index)


class SignoffRows:
    """The rows ``verify()`` expects, computed record by record over the covered records."""

    def __init__(self) -> None:
        self.signed: dict[bytes, int | None] = {}
        self.used: dict[bytes, int | None] = {}

    def add(self, index: int, record_digest: bytes, kind: str, body: Mapping[str, Any]) -> None:
        """Account for covered record ``index`` (records in order)."""
        if kind == DECISION:
            self.signed[record_digest] = None
        elif kind == SIGNOFF:
            self.used[record_digest] = None
            _first(self.signed, _named(body.get("decision_audit")), index)
        elif kind == GATE:
            _first(self.used, _named(body.get("sign_off")), index)


def _first(rows: dict[bytes, int | None], key: bytes | None, index: int) -> None:
    if key is not None and key in rows and rows[key] is None:
        rows[key] = index


Read = Callable[[int], _Entry | None]
Tail = Callable[[str, int], Iterator[_Entry]]


def _lookup(
    txn: Txn[memoryview], meta: Any, prefix: bytes, of: _Entry, *, kind: str, field: str, read: Read
) -> _Entry | None:
    """The record ``of``'s row names (None for nil); ``of`` is below the covered count.

    A missing or damaged row, or one naming a record that is not a ``kind`` after ``of``
    whose ``field`` is ``of``'s digest, is an AuditChainError (verify names the row).
    """
    where = f"meta/{prefix.decode()}{of.digest}"
    valid, index = _row(txn.get(prefix + bytes.fromhex(of.digest), db=meta))
    if not valid:
        raise AuditChainError(
            "sign-off index lacks the row of a record it covers, or the row is damaged "
            "(verify reports the index)",
            where=where,
            expected=f"nil or the index of a {kind} record naming audit[{of.index}]",
        )
    if index is None:
        return None
    rec = read(index)
    if (
        rec is None
        or rec.index != index
        or rec.kind != kind
        or rec.body.get(field) != of.digest
        or index <= of.index
    ):
        raise AuditChainError(
            f"sign-off index names a record that is not a {kind} naming audit[{of.index}] "
            "(verify reports the index)",
            where=where,
            expected=f"the index of a {kind} record whose {field} is {of.digest}",
            got=index,
        )
    return rec


def _find(
    txn: Txn[memoryview],
    meta: Any,
    prefix: bytes,
    of: _Entry,
    *,
    kind: str,
    field: str,
    read: Read,
    tail: Tail,
) -> _Entry | None:
    covered = signoff_count(txn, meta)
    if of.index < covered:
        found = _lookup(txn, meta, prefix, of, kind=kind, field=field, read=read)
        if found is not None:
            return found
    # Records the index does not cover (an older cpstore appended them), after ``of``.
    for rec in tail(kind, max(covered, of.index + 1)):
        if rec.body.get(field) == of.digest:
            return rec
    return None


def first_sign_off(
    txn: Txn[memoryview], meta: Any, decision: _Entry, *, read: Read, tail: Tail
) -> _Entry | None:
    """The first ``signoff`` record after ``decision`` whose ``decision_audit`` names it."""
    return _find(
        txn,
        meta,
        SIGNED_PREFIX,
        decision,
        kind=SIGNOFF,
        field="decision_audit",
        read=read,
        tail=tail,
    )


def first_use(
    txn: Txn[memoryview], meta: Any, sign_off: _Entry, *, read: Read, tail: Tail
) -> _Entry | None:
    """The first ``gate`` record after ``sign_off`` whose ``sign_off`` names it."""
    return _find(
        txn, meta, USED_PREFIX, sign_off, kind=GATE, field="sign_off", read=read, tail=tail
    )
