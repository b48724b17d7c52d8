"""The audit log's own check (``verify``): the hash chain, its head and its indexes.

:func:`check_audit_chain` walks every record of the log (``cpstore.store.audit``) in one
txn: indexes dense from 0, each ``prev`` the digest of the record before, the digest index,
the head (``meta/audit_head``), and the decision, audited-checkpoint and gate indexes
against what the records say. It reports problems; it never raises for damage.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cpstore.errors import AuditChainError, CanonicalEncodingError
from cpstore.native.binding import digest
from cpstore.native.canonical import decode_value
from cpstore.store.audit_gates import GateRows, check_gate_index, gate_count
from cpstore.store.audit_named import check_index_rows, check_named_index, named_by, named_count
from cpstore.store.audit_read import (
    _INDEX,
    DECISION_PREFIX,
    HEAD_KEY,
    _decode,
    decided_checkpoint,
    indexed_count,
)
from cpstore.store.backend import Txn
from cpstore.store.model import Problem

__all__ = ["check_audit_chain"]


def check_audit_chain(txn: Txn[memoryview], dbs: Mapping[str, Any]) -> tuple[int, list[Problem]]:
    """Walk the chain: indexes dense from 0, each ``prev`` the digest before, head matches."""
    problems: list[Problem] = []
    prev: bytes | None = None
    count = 0
    indexed = indexed_count(txn, dbs["meta"])
    named_covered = named_count(txn, dbs["meta"])
    signed_covered = gate_count(txn, dbs["meta"])
    signoffs = GateRows()
    decided: dict[bytes, int] = {}
    first_named: dict[bytes, int] = {}
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
            cid = decided_checkpoint(rec.kind, rec.body)
            if cid is not None and index < indexed:
                decided[cid] = index
            if index < named_covered:
                for named in named_by(rec.kind, rec.body):
                    first_named.setdefault(named, index)
            if index < signed_covered:
                signoffs.add(index, digest(raw), rec.kind, rec.body)
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
    problems.extend(_check_decision_index(txn, dbs, decided))
    problems.extend(check_named_index(txn, dbs, first_named))
    problems.extend(check_gate_index(txn, dbs["meta"], signoffs))
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


def _check_decision_index(
    txn: Txn[memoryview], dbs: Mapping[str, Any], decided: Mapping[bytes, int]
) -> list[Problem]:
    """The decision index must name, for each checkpoint, its latest indexed decision."""
    return check_index_rows(
        txn,
        dbs["meta"],
        DECISION_PREFIX,
        decided,
        disagrees="decision index disagrees with the audit log",
        lacks="decision index lacks a checkpoint's latest decision",
    )
