"""The keyed audit option: the store side of :mod:`cpstore.store.audit_mac`.

A store opened with ``audit_key=`` keeps, beside every audit record ``i``, a
BLAKE2b MAC chained to record ``i - 1``'s MAC (named database ``audit_mac``,
same 8-byte key as ``audit``), and a MAC of the head (count, last MAC) under
meta ``audit_mac_head``. The key never enters the store; meta ``audit_key_id``
holds its public fingerprint so a wrong key is told apart from tampering.

A log is keyed from its first record or never: a key cannot be added to a
log that already has unkeyed records (they could have been forged before).
A handle without the key can read and verify the plain chain of a keyed
store but cannot append to it.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

from cpstore.errors import AuditChainError, StoreError
from cpstore.native.canonical import decode_value, encode_value
from cpstore.store.audit_mac import check_record_mac, key_id, mac_head, mac_record, verify_macs
from cpstore.store.backend import Backend, Txn
from cpstore.store.model import Problem

__all__ = [
    "KEY_ID",
    "MAC_HEAD",
    "adopt_key",
    "check_can_append",
    "check_mac",
    "check_macs",
    "keyed_in",
    "mac_append",
]

KEY_ID = b"audit_key_id"
MAC_HEAD = b"audit_mac_head"
_INDEX = struct.Struct(">Q")


def adopt_key(
    txn: Txn[memoryview], dbs: Mapping[str, Any], key: bytes | None, *, write: bool = True
) -> bool:
    """Check ``key`` against the store (writing its id on a fresh log when ``write``);
    True if keyed.

    Raises :class:`StoreError` for a wrong key, for a key offered to a log that
    already holds unkeyed records, or for one offered to an unkeyed log by a
    read-only handle (which cannot key it: there are no MACs to check).
    """
    stored = txn.get(KEY_ID, db=dbs["meta"])
    stored_id = None if stored is None else str(decode_value(stored))
    if key is None:
        return stored_id is not None
    want = key_id(key)
    if stored_id is not None:
        if stored_id != want:
            raise StoreError(
                "wrong audit key for this store",
                where="meta/audit_key_id",
                expected=stored_id,
                got=want,
            )
        return True
    if txn.stat(dbs["audit"])["entries"]:
        raise StoreError(
            "the audit log already has unkeyed records; a key can only be set on an empty log",
            where="audit",
        )
    if not write:
        raise StoreError(
            "an audit key was given but this store's audit log is not keyed (a read-only "
            "handle does not key it; there are no MACs to check)",
            where="meta/audit_key_id",
            expected="a keyed audit log",
            got="no audit key id",
        )
    txn.put(KEY_ID, encode_value(want), db=dbs["meta"])
    return True


def mac_append(
    txn: Txn[memoryview], dbs: Mapping[str, Any], key: bytes, index: int, raw: bytes
) -> None:
    """Store record ``index``'s MAC and the new head MAC, in the append's txn."""
    prev = None if index == 0 else txn.get(_INDEX.pack(index - 1), db=dbs["audit_mac"])
    mac = mac_record(key, None if prev is None else bytes(prev), raw)
    txn.put(_INDEX.pack(index), mac, db=dbs["audit_mac"])
    txn.put(MAC_HEAD, encode_value([index + 1, mac_head(key, index + 1, mac)]), db=dbs["meta"])


def check_mac(txn: Txn[memoryview], dbs: Mapping[str, Any], key: bytes, index: int) -> None:
    """Raise :class:`AuditChainError` unless record ``index`` carries its true MAC."""
    raw = txn.get(_INDEX.pack(index), db=dbs["audit"])
    mac = txn.get(_INDEX.pack(index), db=dbs["audit_mac"])
    prev = None if index == 0 else txn.get(_INDEX.pack(index - 1), db=dbs["audit_mac"])
    if raw is None or mac is None or (index and prev is None):
        raise AuditChainError("audit record or its MAC is missing", where=f"audit/{index}")
    if not check_record_mac(key, None if prev is None else bytes(prev), raw, bytes(mac)):
        raise AuditChainError(
            "audit record MAC does not verify (forged or altered)", where=f"audit/{index}"
        )


def check_macs(txn: Txn[memoryview], dbs: Mapping[str, Any], key: bytes) -> list[Problem]:
    """Every record and the head whose MAC fails, for :meth:`Store.verify`."""
    records = []
    with txn.cursor(db=dbs["audit"]) as cur:
        for k, raw in cur:
            (index,) = _INDEX.unpack(k)
            mac = txn.get(k, db=dbs["audit_mac"])
            records.append((index, bytes(raw), None if mac is None else bytes(mac)))
    head_raw = txn.get(MAC_HEAD, db=dbs["meta"])
    head: tuple[int, bytes | None] = (0, None)
    if head_raw is not None:
        try:
            count, head_mac = decode_value(head_raw)
            head = (int(count), bytes(head_mac))
        except (ValueError, TypeError) as exc:
            return [
                *verify_macs(records, key),
                Problem("audit MAC head is damaged", "meta/audit_mac_head", got=str(exc)),
            ]
    return verify_macs(records, key, head=head)


def keyed_in(store: Backend, txn: Txn[memoryview]) -> bool:
    """Whether the log is keyed, as ``txn`` sees it: a handle opened without a key on the
    empty log stays unkeyed at open, but another process may key the log since (audit55:
    the stale handle appended records with no MAC to a keyed log and trusted any record)."""
    return store.audit_keyed or txn.get(KEY_ID, db=store.dbs["meta"]) is not None


def check_can_append(store: Backend, txn: Txn[memoryview]) -> None:
    """StoreError when this handle may not append to the log in ``txn`` (a keyed log, no
    key)."""
    if store.audit_key is None and keyed_in(store, txn):
        raise StoreError(
            "this store's audit log is keyed; open it with audit_key= to append",
            where=store.path,
        )
