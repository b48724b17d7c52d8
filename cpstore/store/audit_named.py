"""The audited-checkpoint index: which checkpoints the audit log names (docs/store.md).

A checkpoint is *named* by the log when a ``decision`` record has it as its
``recorded`` or ``replayed`` side's ``checkpoint_id``, or a ``signoff``, ``gate``
or ``resume`` record has it as its ``checkpoint_id`` (:func:`named_by`; what a
retention sweep lists in ``GcReport.decided``). The index keeps, under the meta
key ``audited/<checkpoint id>`` (16 B), the audit index of the first record that
names the checkpoint, and under ``audited_indexed`` the canonical ``[version,
count]``: index version :data:`AUDITED_INDEX_VERSION` covering records ``0`` to
``count - 1``. It is kept in each append's txn and caught up from the log when it
lags (``cpstore.store.audit``); a row of another version covers nothing, so a
cpstore that defines "named" differently rebuilds the index instead of trusting it.

This module reads and writes only ``meta`` rows; the audit records themselves are
decoded by ``cpstore.store.audit``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from cpstore.errors import CanonicalEncodingError
from cpstore.native.canonical import decode_value, encode_value
from cpstore.store.backend import Txn
from cpstore.store.model import Problem

__all__ = [
    "AUDITED_INDEXED",
    "AUDITED_INDEX_VERSION",
    "AUDITED_PREFIX",
    "NAMING_KINDS",
    "check_index_rows",
    "check_named_index",
    "named_by",
    "named_count",
    "put_first_naming",
    "put_named",
    "set_named_count",
]

#: Version of the index's definition and rows; ``audited_indexed`` carries it.
AUDITED_INDEX_VERSION = 1
AUDITED_PREFIX = b"audited/"
AUDITED_INDEXED = b"audited_indexed"
#: Audit kinds whose records can name a checkpoint (``decision``: both sides).
NAMING_KINDS = ("decision", "signoff", "gate", "resume")
_ID = re.compile("[0-9a-f]{32}")


def named_by(kind: str, body: Mapping[str, Any]) -> list[bytes]:
    """The checkpoints (16 raw bytes) one record names, in body order.

    A name that is not 32 lowercase hex characters is no checkpoint id
    (``.hex()`` of a 16-byte id), so it can name no checkpoint a sweep removes.
    """
    if kind == "decision":
        sides = (body.get("recorded"), body.get("replayed"))
        names = [side.get("checkpoint_id") for side in sides if isinstance(side, dict)]
    elif kind in NAMING_KINDS:
        names = [body.get("checkpoint_id")]
    else:
        return []
    return [bytes.fromhex(n) for n in names if isinstance(n, str) and _ID.fullmatch(n)]


def covered_count(txn: Txn[memoryview], meta: Any, key: bytes, version: int) -> int:
    """How many audit records an index whose covered count is at ``key`` covers (0 when
    absent, damaged or of another version than ``version``)."""
    raw = txn.get(key, db=meta)
    try:
        row = None if raw is None else decode_value(raw)
    except CanonicalEncodingError:
        row = None
    if (
        isinstance(row, list)
        and len(row) == 2
        and row[0] == version
        and isinstance(row[1], int)
        and not isinstance(row[1], bool)
        and row[1] >= 0
    ):
        return row[1]
    return 0


def set_covered_count(
    txn: Txn[memoryview], meta: Any, key: bytes, version: int, count: int
) -> None:
    """Record at ``key`` that an index of ``version`` covers audit records 0 to count - 1."""
    txn.put(key, encode_value([version, count]), db=meta)


def named_count(txn: Txn[memoryview], meta: Any) -> int:
    """How many audit records the index covers (0 when absent, damaged or of another version)."""
    return covered_count(txn, meta, AUDITED_INDEXED, AUDITED_INDEX_VERSION)


def set_named_count(txn: Txn[memoryview], meta: Any, count: int) -> None:
    """Record that the index covers audit records ``0`` to ``count - 1``."""
    set_covered_count(txn, meta, AUDITED_INDEXED, AUDITED_INDEX_VERSION, count)


def put_named(
    txn: Txn[memoryview], meta: Any, index: int, kind: str, body: Mapping[str, Any]
) -> None:
    """Index record ``index``: each checkpoint it names keeps its first naming record."""
    for cid in named_by(kind, body):
        put_first_naming(txn, meta, cid, index)


def put_first_naming(txn: Txn[memoryview], meta: Any, cid: bytes, index: int) -> None:
    """Record ``index`` as the first record naming ``cid`` unless an earlier one is indexed."""
    txn.put(AUDITED_PREFIX + cid, encode_value(index), overwrite=False, db=meta)


def check_named_index(
    txn: Txn[memoryview], dbs: Mapping[str, Any], first: Mapping[bytes, int]
) -> list[Problem]:
    """The index must hold exactly ``first`` (checkpoint -> first covered record naming it)."""
    return check_index_rows(
        txn,
        dbs["meta"],
        AUDITED_PREFIX,
        first,
        disagrees="audited-checkpoint index disagrees with the audit log",
        lacks="audited-checkpoint index lacks a checkpoint the audit log names",
    )


def check_index_rows(
    txn: Txn[memoryview],
    meta: Any,
    prefix: bytes,
    want: Mapping[bytes, Any],
    *,
    disagrees: str,
    lacks: str,
    name: Callable[[bytes], str] = bytes.hex,
) -> list[Problem]:
    """The meta rows ``prefix`` + key must hold exactly ``want`` (checkpoint id or record
    digest -> audit index or nil, canonical): a row with another value, or a row ``want``
    has no key for, is ``disagrees``; a key of ``want`` without a row ``lacks`` (the
    decision, audited-checkpoint and gate indexes); ``name`` prints a key in ``where``."""
    problems: list[Problem] = []
    seen: set[bytes] = set()
    where = "meta/" + prefix.decode()
    with txn.cursor(db=meta) as cur:
        found = cur.set_range(prefix)
        while found and bytes(cur.key()).startswith(prefix):
            cid = bytes(cur.key())[len(prefix) :]
            raw = bytes(cur.value())
            try:
                got: Any = decode_value(raw)
            except CanonicalEncodingError:
                got = raw.hex()
            seen.add(cid)
            # Canonical bytes, not ``==``: a row of 1.0 or True for index 1 is refused.
            if cid not in want or encode_value(want[cid]) != raw:
                problems.append(Problem(disagrees, where + name(cid), want.get(cid), got))
            found = cur.next()
    for cid in sorted(set(want) - seen):
        problems.append(Problem(lacks, where + name(cid), expected=want[cid]))
    return problems
