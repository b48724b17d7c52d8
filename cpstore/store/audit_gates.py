"""The gate index: a decision by its id, its sign-off, and the gate that used a sign-off.

The gates find a decision by its id (refusing an id the log holds twice), refuse a
second sign-off of one decision and a second use of one sign-off
(``cpstore.decision.gates``). Each once decoded every record of the log inside the
append's write txn; this index answers them with one meta row and one record decode
per record it names (docs/store.md, "Audit log"). Index version
:data:`GATE_INDEX_VERSION`, meta rows:

* ``decision_id/<id>`` (the id's UTF-8, 1 to :data:`MAX_ID_BYTES` bytes): the canonical
  list of the audit indexes of the covered ``decision`` records whose ``decision_id``
  is that str (ascending; more than one is what the gates refuse);
* ``signed/<decision digest>`` (16 B) for **every** covered ``decision`` record:
  canonical nil, or the audit index of the first covered ``signoff`` record after it
  whose ``decision_audit`` is that digest (32 lowercase hex characters);
* ``signoff_used/<sign-off digest>`` (16 B) for **every** covered ``signoff`` record:
  nil, or the audit index of the first covered ``gate`` record after it whose
  ``sign_off`` is that digest;
* since version 2, ``permit_used/``, ``quarantined/`` and ``odd_id/`` rows
  (``cpstore.store.audit_permits``: permits used, branches quarantined, decisions by
  an operator's prefix);
* ``gates_indexed``: canonical ``[version, count]``, the rows cover records ``0``
  to ``count - 1`` (absent, damaged or another version: none; a rebuild from record 0
  first removes the ``quarantined/`` and ``decision_id/`` rows, not keyed by a record).

Every covered decision and sign-off has its ``signed``/``signoff_used`` row, so one
missing for a record below the covered count is damage (``AuditChainError``), never
"not signed" or "unused"; every record a row names is decoded and checked against
it. Records past the count (an older cpstore appended them) are read from the log.
A row rewritten to nil, or a ``decision_id`` row that drops an index, is found by
``verify()`` only; a deleted ``decision_id`` row makes the decision unknown (the gates
refuse) (docs/security.md).

This module reads and writes ``meta`` rows; records are read through the
``read``/``tail`` callables the caller (``cpstore.store.audit``) passes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from cpstore.errors import AuditChainError, CanonicalEncodingError
from cpstore.native.canonical import decode_value, encode_value
from cpstore.store.audit_named import check_index_rows, covered_count, set_covered_count
from cpstore.store.audit_permits import (
    ODD_ID_PREFIX,
    PERMIT_PREFIX,
    QUARANTINE_PREFIX,
    Read,
    Tail,
    branch_key,
    branch_of,
    clear_branch_rows,
    clear_rows,
    index_row,
    odd_key,
    put_branch_row,
    unverified,
)
from cpstore.store.audit_permits import (
    IndexedRecord as _Entry,
)
from cpstore.store.backend import Txn
from cpstore.store.model import Problem

__all__ = [
    "DECISION_ID_PREFIX",
    "GATES_INDEXED",
    "GATE_INDEX_VERSION",
    "MAX_ID_BYTES",
    "SIGNED_PREFIX",
    "USED_PREFIX",
    "GateRows",
    "check_gate_index",
    "decisions_by_id",
    "first_permit_use",
    "first_sign_off",
    "first_use",
    "gate_count",
    "id_key",
    "put_gate_rows",
    "set_gate_count",
    "start_rebuild",
]

#: Version of the index's definition and rows; ``gates_indexed`` carries it.
GATE_INDEX_VERSION = 3
SIGNED_PREFIX = b"signed/"
DECISION_ID_PREFIX = b"decision_id/"
#: Longest decision id (UTF-8 bytes) with a row; a longer one is found by reading the log.
MAX_ID_BYTES = 400
USED_PREFIX = b"signoff_used/"
GATES_INDEXED = b"gates_indexed"
# The gates' audit kinds (cpstore.decision.gates: AUDIT_DECISION, AUDIT_SIGNOFF, AUDIT_GATE).
DECISION, SIGNOFF, GATE, RESUME = "decision", "signoff", "gate", "resume"
_DIGEST = re.compile("[0-9a-f]{32}")
#: A row's value: nil (nothing yet) or the audit index of the record that names it.
_NIL = encode_value(None)


def _named(value: object) -> bytes | None:
    """The 16-byte digest a body field names, or None (only what ``.hex()`` prints)."""
    return bytes.fromhex(value) if isinstance(value, str) and _DIGEST.fullmatch(value) else None


def id_key(decision_id: object) -> bytes | None:
    """The ``decision_id/`` row key of a decision id, or None when it has none."""
    if not isinstance(decision_id, str) or not decision_id:
        return None
    try:
        raw = decision_id.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return DECISION_ID_PREFIX + raw if len(raw) <= MAX_ID_BYTES else None


def _indexes(raw: bytes | memoryview | None) -> list[int] | None:
    """A ``decision_id/`` row's list ([] when absent), or None when damaged."""
    if raw is None:
        return []
    try:
        value = decode_value(raw)
    except CanonicalEncodingError:
        return None
    if isinstance(value, list) and all(
        isinstance(i, int) and not isinstance(i, bool) and 0 <= i < 2**64 for i in value
    ):
        return value
    return None


def gate_count(txn: Txn[memoryview], meta: Any) -> int:
    """How many audit records the index covers (0 when absent, damaged or of another version)."""
    return covered_count(txn, meta, GATES_INDEXED, GATE_INDEX_VERSION)


def set_gate_count(txn: Txn[memoryview], meta: Any, count: int) -> None:
    """Record that the index covers audit records ``0`` to ``count - 1``."""
    set_covered_count(txn, meta, GATES_INDEXED, GATE_INDEX_VERSION, count)


def _claim(txn: Txn[memoryview], meta: Any, key: bytes, index: int) -> None:
    """Set row ``key`` to ``index`` if it exists and is nil (the first record naming it)."""
    valid, value = index_row(txn.get(key, db=meta))
    if valid and value is None:
        txn.put(key, encode_value(index), db=meta)


def put_gate_rows(
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
        key = id_key(body.get("decision_id"))
        if key is not None:
            # Entries at or past ``index`` are left from an index this catch-up rebuilds.
            # A damaged row is left as it is (rewritten, it would drop the id's earlier
            # records): the gate refuses it, verify reports it, a rebuild from 0 removes it.
            indexes = _indexes(txn.get(key, db=meta))
            if indexes is not None:
                known = [i for i in indexes if i < index]
                txn.put(key, encode_value([*known, index]), db=meta)
        else:
            odd = odd_key(record_digest, body.get("decision_id", ""))
            if odd is not None:
                txn.put(odd, encode_value(index), db=meta)
        put_branch_row(txn, meta, index, body)
    elif kind == SIGNOFF:
        txn.put(USED_PREFIX + record_digest, _NIL, db=meta)
        decision = _named(body.get("decision_audit"))
        if decision is not None:
            _claim(txn, meta, SIGNED_PREFIX + decision, index)
    elif kind == GATE:
        used = _named(body.get("sign_off"))
        if used is not None:
            _claim(txn, meta, USED_PREFIX + used, index)
        if body.get("gate") == "resume":
            txn.put(PERMIT_PREFIX + record_digest, _NIL, db=meta)
    elif kind == RESUME:
        permit = _named(body.get("permit"))
        if permit is not None:
            _claim(txn, meta, PERMIT_PREFIX + permit, index)


def start_rebuild(txn: Txn[memoryview], meta: Any) -> None:
    """Before indexing from record 0 (no index, or one of another version): drop the rows
    keyed by something other than a record's digest, which indexing does not overwrite
    (``quarantined/``; ``decision_id/``, whose damaged rows it leaves as they are)."""
    clear_branch_rows(txn, meta)
    clear_rows(txn, meta, DECISION_ID_PREFIX)


class GateRows:
    """The rows ``verify()`` expects, computed record by record over the covered records."""

    def __init__(self) -> None:
        self.by_id: dict[bytes, list[int]] = {}
        self.signed: dict[bytes, int | None] = {}
        self.used: dict[bytes, int | None] = {}
        self.permits: dict[bytes, int | None] = {}
        self.branches: dict[bytes, int | None] = {}
        self.odd: dict[bytes, int] = {}

    def add(self, index: int, record_digest: bytes, kind: str, body: Mapping[str, Any]) -> None:
        """Account for covered record ``index`` (records in order)."""
        if kind == DECISION:
            self.signed[record_digest] = None
            key = id_key(body.get("decision_id"))
            if key is not None:
                self.by_id.setdefault(key[len(DECISION_ID_PREFIX) :], []).append(index)
            else:
                odd = odd_key(record_digest, body.get("decision_id", ""))
                if odd is not None:
                    self.odd[odd[len(ODD_ID_PREFIX) :]] = index
            readable, run_id, branch = branch_of(body)
            pair = branch_key(run_id, branch) if readable else None
            if pair is not None:
                self.branches.setdefault(pair[len(QUARANTINE_PREFIX) :], None)
                if unverified(body):
                    _first(self.branches, pair[len(QUARANTINE_PREFIX) :], index)
        elif kind == SIGNOFF:
            self.used[record_digest] = None
            _first(self.signed, _named(body.get("decision_audit")), index)
        elif kind == GATE:
            _first(self.used, _named(body.get("sign_off")), index)
            if body.get("gate") == "resume":
                self.permits[record_digest] = None
        elif kind == RESUME:
            _first(self.permits, _named(body.get("permit")), index)


def _first(rows: dict[bytes, int | None], key: bytes | None, index: int) -> None:
    if key is not None and key in rows and rows[key] is None:
        rows[key] = index


def _other_version(txn: Txn[memoryview], meta: Any) -> bool:
    """Whether ``gates_indexed`` is a well-formed count row of another index version."""
    raw = txn.get(GATES_INDEXED, db=meta)
    try:
        row = None if raw is None else decode_value(raw)
    except CanonicalEncodingError:
        return False
    return (
        isinstance(row, list)
        and len(row) == 2
        and isinstance(row[0], int)
        and not isinstance(row[0], bool)
        and row[0] != GATE_INDEX_VERSION
    )


def check_gate_index(txn: Txn[memoryview], meta: Any, want: GateRows) -> list[Problem]:
    """The gate index must hold the covered decisions by id, and one row per covered
    decision and sign-off naming the first covered record that signs or uses it.

    Under a count row of another version (a v1 release appended last: ``[1, count]``)
    the rows cover nothing and no gate reads them; the next append rebuilds them from
    record 0, and a stray row left meanwhile is reported then."""
    if _other_version(txn, meta):
        return []
    return [
        *check_index_rows(
            txn,
            meta,
            DECISION_ID_PREFIX,
            want.by_id,
            disagrees="gate index disagrees with the audit log (decisions by id)",
            lacks="gate index lacks a decision id",
            name=lambda key: key.decode("utf-8", "backslashreplace"),
        ),
        *check_index_rows(
            txn,
            meta,
            SIGNED_PREFIX,
            want.signed,
            disagrees="gate index disagrees with the audit log (signed decisions)",
            lacks="gate index lacks a decision record's row",
        ),
        *check_index_rows(
            txn,
            meta,
            USED_PREFIX,
            want.used,
            disagrees="gate index disagrees with the audit log (used sign-offs)",
            lacks="gate index lacks a sign-off record's row",
        ),
        *check_index_rows(
            txn,
            meta,
            PERMIT_PREFIX,
            want.permits,
            disagrees="gate index disagrees with the audit log (used permits)",
            lacks="gate index lacks a permit's row",
        ),
        *check_index_rows(
            txn,
            meta,
            QUARANTINE_PREFIX,
            want.branches,
            disagrees="gate index disagrees with the audit log (quarantined branches)",
            lacks="gate index lacks a branch's row",
        ),
        *check_index_rows(
            txn,
            meta,
            ODD_ID_PREFIX,
            want.odd,
            disagrees="gate index disagrees with the audit log (decisions by odd id)",
            lacks="gate index lacks an odd decision id's row",
            name=lambda key: key.decode("ascii", "backslashreplace"),
        ),
    ]


def _lookup(
    txn: Txn[memoryview], meta: Any, prefix: bytes, of: _Entry, *, kind: str, field: str, read: Read
) -> _Entry | None:
    """The record ``of``'s row names (None for nil); ``of`` is below the covered count.

    A missing or damaged row, or one naming a record that is not a ``kind`` after ``of``
    whose ``field`` is ``of``'s digest, is an AuditChainError (verify names the row).
    """
    where = f"meta/{prefix.decode()}{of.digest}"
    valid, index = index_row(txn.get(prefix + bytes.fromhex(of.digest), db=meta))
    if not valid:
        raise AuditChainError(
            "gate index lacks the row of a record it covers, or the row is damaged "
            "(verify reports the index)",
            where=where,
            expected=f"nil or the index of a {kind} record naming audit/{of.index}",
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
            f"gate index names a record that is not a {kind} naming audit/{of.index} "
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
    covered = gate_count(txn, meta)
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


def first_permit_use(
    txn: Txn[memoryview], meta: Any, gate: _Entry, *, read: Read, tail: Tail
) -> _Entry | None:
    """The first ``resume`` record after ``gate`` (a permit) whose ``permit`` names it."""
    return _find(txn, meta, PERMIT_PREFIX, gate, kind=RESUME, field="permit", read=read, tail=tail)


def decisions_by_id(
    txn: Txn[memoryview], meta: Any, decision_id: str, *, read: Read, tail: Tail
) -> list[_Entry]:
    """Every ``decision`` record whose ``decision_id`` is ``decision_id``, in log order.

    The row's records (each decoded and checked: an entry naming another record is an
    AuditChainError), then the records past the covered count; an id without a row
    key (too long) is looked for in the whole log.
    """
    key = id_key(decision_id)
    covered = gate_count(txn, meta) if key is not None else 0
    found: list[_Entry] = []
    if key is not None and covered:
        indexes = _indexes(txn.get(key, db=meta))
        where = "meta/decision_id/" + decision_id
        if indexes is None:
            raise AuditChainError(
                "gate index row is damaged (verify reports the index)", where=where
            )
        for index in indexes:
            if index >= covered:
                continue  # past the count (a rewound count row): the tail reads it
            rec = read(index)
            if (
                rec is None
                or rec.index != index
                or rec.kind != DECISION
                or rec.body.get("decision_id") != decision_id
            ):
                raise AuditChainError(
                    "gate index names a record that is not a decision with this id "
                    "(verify reports the index)",
                    where=where,
                    expected=f"covered decision records with decision_id {decision_id!r}",
                    got=index,
                )
            found.append(rec)
    found.extend(r for r in tail(DECISION, covered) if r.body.get("decision_id") == decision_id)
    return found
