"""Keyed MACs over the audit log: tamper evidence against someone who can write the data file.

The audit chain (:mod:`cpstore.store.audit`) links records by XXH3-128 digests, which
anyone can recompute: it catches accidents, not a forger. This module is the
primitive the keyed-audit store option is built on. With a secret key kept
**outside** the store (16 to 64 bytes), each record ``i`` gets

    mac_i = BLAKE2b-256(key, person="cpstore-audit-v1",
                        tag_of(mac_{i-1}) || u64 len(record_i) || record_i)

where ``record_i`` is the record's canonical bytes exactly as stored (so the
record's index and ``prev`` digest are inside the MAC) and ``mac_{-1}`` is
absent. Chaining the MACs means a record cannot be moved, dropped or
re-ordered without breaking the MAC of the record after it; the head MAC
(:func:`mac_head`) binds the record count so a cut tail is found as well.
Without the key nobody can produce a MAC that verifies, so a forged decision,
sign-off or gate record is reported by :func:`verify_macs`.

What it cannot detect: an attacker who restores an *older* consistent state of
the whole store (records, MACs and head together) — that needs the verifier to
remember the last count it saw, outside the store.

Everything here is pure (no LMDB, no I/O); the store wires it in.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from collections.abc import Iterable
from typing import Any

from cpstore.errors import InvalidInputError
from cpstore.store.model import Problem

__all__ = [
    "MAC_SIZE",
    "MAX_KEY_SIZE",
    "MIN_KEY_SIZE",
    "chain_macs",
    "check_key",
    "check_record_mac",
    "key_id",
    "mac_head",
    "mac_record",
    "verify_macs",
]

#: Bytes of one MAC (BLAKE2b with a 32-byte digest).
MAC_SIZE = 32
#: Shortest key accepted: below 128 bits a key can be guessed.
MIN_KEY_SIZE = 16
#: Longest key BLAKE2b takes.
MAX_KEY_SIZE = 64

_LEN = struct.Struct("<Q")
_PERSON_RECORD = b"cpstore-audit-v1"
_PERSON_HEAD = b"cpstore-ahead-v1"
_PERSON_KEYID = b"cpstore-keyid-v1"


def check_key(key: object) -> bytes:
    """The key as bytes, or :class:`InvalidInputError` if it is not 16..64 bytes."""
    if not isinstance(key, (bytes, bytearray, memoryview)):
        raise InvalidInputError("audit key must be bytes", got=type(key).__name__)
    raw = bytes(key)
    if not MIN_KEY_SIZE <= len(raw) <= MAX_KEY_SIZE:
        raise InvalidInputError(
            "audit key has the wrong length",
            expected=f"{MIN_KEY_SIZE}..{MAX_KEY_SIZE} bytes",
            got=f"{len(raw)} bytes",
        )
    return raw


def _check_mac(value: object, what: str) -> bytes | None:
    if value is None:
        return None
    if not isinstance(value, (bytes, bytearray, memoryview)) or len(value) != MAC_SIZE:
        raise InvalidInputError(f"{what} must be {MAC_SIZE} bytes or None", got=value)
    return bytes(value)


def key_id(key: bytes) -> str:
    """A public fingerprint of ``key`` (hex), to tell a wrong key from tampering.

    It is a MAC of the empty message, so it reveals nothing about the key.
    """
    h = hashlib.blake2b(key=check_key(key), digest_size=16, person=_PERSON_KEYID)
    return h.hexdigest()


def mac_record(key: bytes, prev_mac: bytes | None, record_bytes: bytes | memoryview) -> bytes:
    """The MAC of one audit record, chained to the MAC of the record before it.

    ``record_bytes`` are the record's stored canonical bytes; ``prev_mac`` is
    None for record 0.
    """
    raw_key = check_key(key)
    prev = _check_mac(prev_mac, "prev_mac")
    if not isinstance(record_bytes, (bytes, bytearray, memoryview)):
        raise InvalidInputError("record_bytes must be bytes", got=type(record_bytes).__name__)
    h = hashlib.blake2b(key=raw_key, digest_size=MAC_SIZE, person=_PERSON_RECORD)
    # A one-byte tag keeps "no predecessor" distinct from any 32-byte MAC.
    h.update(b"\x00" if prev is None else b"\x01" + prev)
    h.update(_LEN.pack(len(record_bytes)))
    h.update(record_bytes)
    return h.digest()


def mac_head(key: bytes, count: int, last_mac: bytes | None) -> bytes:
    """The MAC of the log's head: how many records there are and the last one's MAC."""
    raw_key = check_key(key)
    last = _check_mac(last_mac, "last_mac")
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise InvalidInputError("count must be a non-negative int", got=count)
    if (count == 0) != (last is None):
        raise InvalidInputError(
            "last_mac must be None exactly when count is 0", got=(count, last_mac)
        )
    h = hashlib.blake2b(key=raw_key, digest_size=MAC_SIZE, person=_PERSON_HEAD)
    h.update(_LEN.pack(count))
    h.update(b"" if last is None else last)
    return h.digest()


def check_record_mac(
    key: bytes, prev_mac: bytes | None, record_bytes: bytes | memoryview, mac: bytes | None
) -> bool:
    """True when ``mac`` is the MAC of this record after ``prev_mac`` (constant time)."""
    if mac is None:
        return False
    return hmac.compare_digest(mac_record(key, prev_mac, record_bytes), bytes(mac))


def chain_macs(key: bytes, records: Iterable[bytes | memoryview]) -> list[bytes]:
    """The MAC of every record of a log from record 0, in order."""
    out: list[bytes] = []
    prev: bytes | None = None
    for raw in records:
        prev = mac_record(key, prev, raw)
        out.append(prev)
    return out


def verify_macs(
    records: Iterable[tuple[int, bytes | memoryview, bytes | None]],
    key: bytes,
    *,
    head: tuple[int, bytes | None] | None = None,
) -> list[Problem]:
    """Every record (and the head) whose MAC does not verify, as :class:`Problem` s.

    ``records`` are ``(index, stored record bytes, stored MAC or None)`` from
    index 0 in order. Each record is checked against the *stored* MAC of the
    one before it, so one forged record is reported once, at its own index,
    and the records after it still verify. ``head`` is the stored
    ``(count, head MAC)``; when given, a head that does not match the last
    record (a cut or extended tail) is reported at ``audit_mac/head``.
    """
    raw_key = check_key(key)
    problems: list[Problem] = []
    prev: bytes | None = None
    count = 0
    for index, raw, mac in records:
        where = f"audit/{index}"
        if index != count:
            problems.append(Problem("audit MAC walk has a gap", where, expected=count, got=index))
        stored = None if mac is None else bytes(mac)
        if stored is None:
            problems.append(Problem("audit record has no MAC", where))
        elif len(stored) != MAC_SIZE or not check_record_mac(raw_key, prev, raw, stored):
            problems.append(
                Problem(
                    "audit record MAC does not verify (forged or altered)",
                    where,
                    got=stored.hex(),
                )
            )
        # Chain on what is stored: the next record is judged on its own MAC.
        prev = stored if stored is not None and len(stored) == MAC_SIZE else None
        count = index + 1
    if head is not None:
        head_count, head_mac = head
        ok = (
            head_mac is not None
            and len(head_mac) == MAC_SIZE
            and head_count == count
            and (count == 0) == (prev is None)
            and hmac.compare_digest(mac_head(raw_key, count, prev), bytes(head_mac))
        )
        if not ok:
            problems.append(
                Problem(
                    "audit MAC head does not match the log (records cut, added or rolled back?)",
                    "audit_mac/head",
                    expected=count,
                    got=_show_head(head),
                )
            )
    return problems


def _show_head(head: tuple[int, Any]) -> Any:
    count, mac = head
    return [count, None if mac is None else bytes(mac).hex()]
