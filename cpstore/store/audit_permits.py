"""Gate index rows added in version 2: permits used, branches quarantined, odd decision ids.

Three more questions the gates once answered by reading the log (``cpstore.decision.gates``),
each kept in the append's txn with the rest of the gate index (``cpstore.store.audit_gates``,
whose ``gates_indexed`` row carries the version and the covered count):

* ``permit_used/<gate digest>`` (16 B) for **every** covered ``gate`` record whose ``gate``
  is ``"resume"`` (a permit): canonical nil, or the audit index of the first covered
  ``resume`` record after it whose ``permit`` is that digest (``check_resume``: "used?");
* ``quarantined/<canonical [run_id, branch]>`` (at most :data:`MAX_KEY_BYTES` bytes) for
  every pair a covered ``decision`` record's ``recorded`` side names (a map, or absent:
  ``[nil, nil]``; run id and branch each a str or nil): canonical nil, or the audit index
  of the first covered ``decision`` with that pair that found the replay unverified: its
  ``verdict`` is ``"QUARANTINE"``, or it holds a QUARANTINE-level finding (a REJECT that
  also found one: :func:`unverified`; since index version 3) (``certify_rollback``: "was
  the branch ever quarantined?");
* ``odd_id/<hex run>/<decision digest>`` (16 B at the end): canonical audit index, for each
  covered ``decision`` whose ``decision_id`` has no ``decision_id/`` row (not a str, or a
  str longer than 400 UTF-8 bytes) and whose ``str()`` starts with at least
  :data:`MIN_RUN` lowercase hex characters; ``hex run`` is that leading run, at most
  :data:`MAX_RUN` characters (what an operator's prefix can match).

A decision named by an operator's prefix is found by a range of ``decision_id/`` rows, a
range of ``odd_id/`` rows and a range of the audit digest index (``audit_index``), each
named record decoded and checked, then the records past the covered count.

This module reads and writes ``meta`` rows (and ranges of ``audit_index``); records are
read through the ``read``/``tail`` callables the caller passes.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Iterator, Mapping
from decimal import Decimal
from typing import Any, Protocol

from cpstore.decision.table import FINDING_RULES, Verdict
from cpstore.errors import AuditChainError, CanonicalEncodingError, InvalidInputError
from cpstore.native.canonical import decode_value, encode_value
from cpstore.store.backend import Txn

__all__ = [
    "MAX_KEY_BYTES",
    "MAX_RUN",
    "MIN_RUN",
    "ODD_ID_PREFIX",
    "PERMIT_PREFIX",
    "QUARANTINE_PREFIX",
    "IndexedRecord",
    "Read",
    "Tail",
    "branch_key",
    "branch_of",
    "clear_branch_rows",
    "clear_rows",
    "decisions_by_prefix",
    "first_quarantine",
    "index_row",
    "odd_key",
    "put_branch_row",
    "quarantines",
    "unverified",
]

PERMIT_PREFIX = b"permit_used/"
QUARANTINE_PREFIX = b"quarantined/"
ODD_ID_PREFIX = b"odd_id/"
#: Longest canonical ``[run_id, branch]`` with a row; a longer pair is looked for in the log.
MAX_KEY_BYTES = 400
#: Shortest leading hex run an ``odd_id/`` row is kept for (``gates.MIN_PREFIX``).
MIN_RUN = 8
#: Longest leading hex run an ``odd_id/`` key holds (a longer prefix is filtered after).
MAX_RUN = 64
DECISION, RESUME, QUARANTINE = "decision", "resume", "QUARANTINE"
_HEX_RUN = re.compile("[0-9a-f]*")
#: The smallest int of 4301 digits: Python's default limit refuses its str().
_TOO_MANY_DIGITS = 10**4300
_INDEX = struct.Struct(">Q")


#: Finding codes that leave a replay unverified (the table's QUARANTINE level).
_UNVERIFIED_CODES = frozenset(
    code.value for code, (level, _) in FINDING_RULES.items() if level is Verdict.QUARANTINE
)


def unverified(body: Mapping[str, Any]) -> bool:
    """Whether a decision found its replay unverified: a QUARANTINE, or a REJECT that holds
    a QUARANTINE-level finding too (a BEST_EFFORT replay that also diverged is still one
    whose branch seed 002 quarantines; counting only the verdict let the worse decision
    leave the branch rollback-certifiable, audit31)."""
    if body.get("verdict") == QUARANTINE:
        return True
    findings = body.get("findings")
    if not isinstance(findings, list):
        return False
    return any(isinstance(f, Mapping) and f.get("code") in _UNVERIFIED_CODES for f in findings)


class IndexedRecord(Protocol):
    """What the gate index reads of an audit record (audit_gates' too)."""

    @property
    def index(self) -> int: ...
    @property
    def digest(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def body(self) -> dict[str, Any]: ...


Read = Callable[[int], IndexedRecord | None]
Tail = Callable[[str, int], Iterator[IndexedRecord]]


def index_row(raw: bytes | memoryview | None) -> tuple[bool, int | None]:
    """(valid, value) of a gate index row: nil or an audit index; invalid when absent or
    damaged (audit_gates' rows too)."""
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


# -- branches quarantined -------------------------------------------------------------


def branch_of(body: Mapping[str, Any]) -> tuple[bool, Any, Any]:
    """(readable, run_id, branch) of a decision's ``recorded`` side, as ``certify_rollback``
    compares it: absent or empty is ``(nil, nil)``; anything else that is no map names no
    branch (readable False)."""
    recorded = body.get("recorded") or {}
    if not isinstance(recorded, Mapping):
        return False, None, None
    return True, recorded.get("run_id"), recorded.get("branch")


def branch_key(run_id: object, branch: object) -> bytes | None:
    """The ``quarantined/`` key of a pair, or None (not str-or-nil each, or too long).

    For str and nil, equal canonical bytes is exactly Python ``==``, which the gate's
    comparison is; a pair of other types is looked for in the log."""
    if not all(v is None or isinstance(v, str) for v in (run_id, branch)):
        return None
    try:
        raw = encode_value([run_id, branch])
    except (CanonicalEncodingError, UnicodeEncodeError):
        return None
    return QUARANTINE_PREFIX + raw if len(raw) <= MAX_KEY_BYTES else None


def _decision_branch_key(body: Mapping[str, Any]) -> bytes | None:
    readable, run_id, branch = branch_of(body)
    return branch_key(run_id, branch) if readable else None


def put_branch_row(txn: Txn[memoryview], meta: Any, index: int, body: Mapping[str, Any]) -> None:
    """Index decision record ``index`` in its pair's ``quarantined/`` row (records in order).

    A row naming ``index`` or later is left from an index this catch-up rebuilds. A
    damaged row is left as it is: rewritten, it would say "never quarantined" of a branch
    that was; the gate refuses it and verify reports it (a rebuild from 0 removes it)."""
    key = _decision_branch_key(body)
    if key is None:
        return
    quarantined = unverified(body)
    raw = txn.get(key, db=meta)
    valid, value = index_row(raw)
    if raw is not None and not valid:
        return
    if raw is None or (value is not None and value >= index):
        txn.put(key, encode_value(index if quarantined else None), db=meta)
    elif value is None and quarantined:
        txn.put(key, encode_value(index), db=meta)


def clear_branch_rows(txn: Txn[memoryview], meta: Any) -> None:
    """Remove every ``quarantined/`` row (a rebuild from record 0 inherits none)."""
    clear_rows(txn, meta, QUARANTINE_PREFIX)


def clear_rows(txn: Txn[memoryview], meta: Any, prefix: bytes) -> None:
    """Remove every meta row whose key starts with ``prefix``."""
    with txn.cursor(db=meta) as cur:
        found = cur.set_range(prefix)
        keys = []
        while found and bytes(cur.key()).startswith(prefix):
            keys.append(bytes(cur.key()))
            found = cur.next()
    for key in keys:
        txn.delete(key, db=meta)


def quarantines(rec: IndexedRecord, run_id: object, branch: object) -> bool:
    """Whether ``rec`` is a decision about ``run_id``/``branch`` that quarantines it
    (:func:`unverified`)."""
    readable, run, br = branch_of(rec.body)
    return (
        rec.kind == DECISION
        and readable
        and run == run_id
        and br == branch
        and unverified(rec.body)
    )


def first_quarantine(
    txn: Txn[memoryview],
    meta: Any,
    covered: int,
    run_id: object,
    branch: object,
    *,
    read: Read,
    tail: Tail,
    certified: int,
) -> IndexedRecord | None:
    """The first quarantining ``decision`` (:func:`unverified`) about ``run_id``/``branch``
    in the log, or None.

    ``certified`` is the audit index of a decision about that pair: below ``covered`` its
    row must exist (AuditChainError otherwise, never "not quarantined"). A row naming a
    record that is not such a quarantine (past the covered count or the log too) is an
    AuditChainError; a pair without a key is looked for in the whole log.
    """
    key = branch_key(run_id, branch)
    if key is None:
        return next((r for r in tail(DECISION, 0) if quarantines(r, run_id, branch)), None)
    where = "meta/quarantined/" + key[len(QUARANTINE_PREFIX) :].hex()
    raw = txn.get(key, db=meta) if covered else None
    valid, index = index_row(raw)
    if raw is not None or certified < covered:
        if not valid:
            raise AuditChainError(
                "gate index lacks the row of a branch a covered decision names, or the row "
                "is damaged (verify reports the index)",
                where=where,
                expected="nil or the index of the branch's first QUARANTINE decision",
            )
        if index is not None:  # past the count too: such a row names a real quarantine
            rec = read(index)
            if rec is None or rec.index != index or not quarantines(rec, run_id, branch):
                raise AuditChainError(
                    "gate index names a record that is not a QUARANTINE of the branch "
                    "(verify reports the index)",
                    where=where,
                    expected=f"the index of a QUARANTINE decision about {[run_id, branch]!r}",
                    got=index,
                )
            return rec
    # Records the index does not cover (an older cpstore appended them).
    return next((r for r in tail(DECISION, covered) if quarantines(r, run_id, branch)), None)


# -- decisions by an operator's prefix --------------------------------------------------


def id_text(decision_id: object) -> str:
    """``str()`` of a decision id, as the prefix search compares it ("" if it has none).

    An int is written out as Python's default int-to-str limit allows (4300 digits; a
    longer one starts with no prefix), whatever ``sys.set_int_max_str_digits`` this
    process set: the writer of a row, the gate and verify read the same text."""
    if isinstance(decision_id, int) and not isinstance(decision_id, bool):
        return "" if abs(decision_id) >= _TOO_MANY_DIGITS else str(Decimal(decision_id))
    try:
        return str(decision_id)
    except ValueError:  # a container holding such an int: "[" or "{" starts no prefix
        return ""


def odd_key(record_digest: bytes, decision_id: object) -> bytes | None:
    """The ``odd_id/`` key of a decision whose id has no ``decision_id/`` row, or None."""
    run = _HEX_RUN.match(id_text(decision_id))
    text = run.group() if run else ""
    if len(text) < MIN_RUN:
        return None
    return ODD_ID_PREFIX + text[:MAX_RUN].encode() + b"/" + record_digest


def prefix_matches(rec: IndexedRecord, low: str) -> bool:
    """The old scan's test: a decision whose ``str(decision_id)`` or digest starts with
    ``low``."""
    return rec.kind == DECISION and (
        id_text(rec.body.get("decision_id", "")).startswith(low) or rec.digest.startswith(low)
    )


def _range(txn: Txn[memoryview], db: Any, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
    with txn.cursor(db=db) as cur:
        found = cur.set_range(prefix)
        while found:
            key = bytes(cur.key())
            if not key.startswith(prefix):
                return
            yield key, bytes(cur.value())
            found = cur.next()


def _named_record(read: Read, index: int, where: str, what: str) -> IndexedRecord:
    rec = read(index)
    if rec is None or rec.index != index or rec.kind != DECISION:
        raise AuditChainError(
            f"gate index names a record that is not {what} (verify reports the index)",
            where=where,
            got=index,
        )
    return rec


def decisions_by_prefix(
    txn: Txn[memoryview],
    dbs: Mapping[str, Any],
    covered: int,
    low: str,
    *,
    read: Read,
    tail: Tail,
) -> list[IndexedRecord]:
    """Every ``decision`` record whose ``str(decision_id)`` or digest starts with ``low``
    (lowercase hex, at least MIN_RUN characters), in log order: ranges of rows, each
    named record decoded and checked, then the records past ``covered``."""
    if len(low) < MIN_RUN or not _HEX_RUN.fullmatch(low):
        raise InvalidInputError("a decision prefix is 8 or more lowercase hex characters", got=low)
    meta = dbs["meta"]
    found: dict[int, IndexedRecord] = {}
    if covered:
        id_prefix = b"decision_id/"
        for key, raw in _range(txn, meta, id_prefix + low.encode()):
            decision_id = key[len(id_prefix) :].decode("utf-8", "surrogateescape")
            where = "meta/decision_id/" + decision_id
            try:
                indexes = decode_value(raw)
            except CanonicalEncodingError:
                indexes = None
            if not isinstance(indexes, list) or not all(
                isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in indexes
            ):
                raise AuditChainError(
                    "gate index row is damaged (verify reports the index)", where=where
                )
            for index in indexes:
                if index < covered:
                    rec = _named_record(read, index, where, "a decision with this id")
                    if rec.body.get("decision_id") != decision_id:
                        raise AuditChainError(
                            "gate index names a record that is not a decision with this id "
                            "(verify reports the index)",
                            where=where,
                            got=index,
                        )
                    found[index] = rec
        for key, raw in _range(txn, meta, ODD_ID_PREFIX + low[:MAX_RUN].encode()):
            where = "meta/" + key.decode("ascii", "backslashreplace")
            valid, index = index_row(raw)
            if not valid or index is None:
                raise AuditChainError(
                    "gate index row is damaged (verify reports the index)", where=where
                )
            if index < covered:
                rec = _named_record(read, index, where, "the decision its key names")
                if bytes.fromhex(rec.digest) != key[-16:]:
                    raise AuditChainError(
                        "gate index names a record that is not the decision its key names "
                        "(verify reports the index)",
                        where=where,
                        got=index,
                    )
                if prefix_matches(rec, low):
                    found[index] = rec
    # Digests: the audit digest index, which every release keeps in each append's txn.
    whole = low[: len(low) // 2 * 2]
    for key, pos in _range(txn, dbs["audit_index"], bytes.fromhex(whole)):
        if not key.hex().startswith(low):
            continue
        index = _INDEX.unpack(pos)[0] if len(pos) == _INDEX.size else -1
        rec_at = read(index) if index >= 0 else None
        if rec_at is None or rec_at.index != index or rec_at.digest != key.hex():
            raise AuditChainError(
                "audit index points at a different record", where=f"audit_index/{key.hex()}"
            )
        if rec_at.kind == DECISION:
            found[index] = rec_at
    for rec in tail(DECISION, covered):
        if prefix_matches(rec, low):
            found[rec.index] = rec
    return [found[i] for i in sorted(found)]
