"""Test helper: read and damage stored entries behind the store's back, in any layout.

Objects and checkpoint records live in the heap (layouts 5 and 6) or in the legacy
``objects``/``checkpoints`` tables (older layouts, PostgreSQL): the tests that
simulate damage name the key and the table, and these find where it lives
(cpstore/store/content.py). A compact record entry (layout 6, ``r``) is read
inflated and rewritten compressed again: the damage these simulate is to the
record itself (tests of damaged frames edit the heap entry directly).
Every other table is written as it is.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import lmdb

from cpstore.native.binding import digest
from cpstore.native.canonical import encode_value
from cpstore.store.content import (
    KIND_COMPACT,
    KIND_RECORD,
    Content,
    entry_header,
    objects_of,
    records_of,
)
from cpstore.store.lmdb_env import LMDB_TABLES
from cpstore.store.manifest import encode_manifest
from cpstore.store.model import pack_checkpoint_value
from cpstore.store.record_codec import compress_record, inflate_record, why_not

__all__ = [
    "content_of",
    "damage",
    "edit_raw",
    "flip_byte",
    "forge_checkpoint",
    "raw_dbs",
    "raw_delete",
    "raw_get",
    "raw_items",
    "raw_put",
    "record_entry",
    "seq_of",
    "to_layout_4",
    "to_layout_5",
]

_NAMES = LMDB_TABLES


def content_of(dbs: Mapping[str, Any], table: str) -> Content | None:
    """The content accessor for ``table`` ("objects"/"checkpoints"), None for other tables."""
    if table == "objects":
        return objects_of(dbs)
    if table == "checkpoints":
        return records_of(dbs)
    return None


def raw_dbs(env: Any, txn: Any = None) -> dict[str, Any]:
    """Handles of a raw ``lmdb`` environment's store tables (the heap ones when present)."""
    out: dict[str, Any] = {}
    for name in _NAMES:
        try:
            out[name] = (
                env.open_db(name.encode(), txn=txn, create=False)
                if txn is not None
                else env.open_db(name.encode(), create=False)
            )
        except Exception:
            continue
    return out


def seq_of(txn: Any, content: Content, key: bytes) -> bytes | None:
    """The heap location of ``key`` (None when it is in a legacy table, or missing)."""
    if content.index is None:
        return None
    seq = txn.get(key, db=content.index)
    return None if seq is None else bytes(seq)


def _prefix(content: Content, key: bytes, entry: Any) -> bytes:
    """What precedes the stored bytes in ``key``'s heap entry: the kind-and-key header,
    and a record's hint block (kept as stored)."""
    head = entry_header(content.kind, key)
    if content.kind != KIND_RECORD or entry is None:
        return head
    head = entry_header(entry[0], key)  # b"c" or the compact b"r"
    n = len(head)
    count = int.from_bytes(bytes(entry[n : n + 4]), "big")
    return head + bytes(entry[n : n + 4 + 4 * count])


def raw_get(txn: Any, dbs: Mapping[str, Any], table: str, key: bytes) -> bytes | None:
    """The stored bytes under ``key`` (no check at all), or None."""
    content = content_of(dbs, table)
    if content is None:
        value = txn.get(key, db=dbs[table])
        return None if value is None else bytes(value)
    seq = seq_of(txn, content, key)
    if seq is not None:
        entry = txn.get(seq, db=content.heap)
        if entry is None:
            return None
        stored = bytes(entry)[len(_prefix(content, key, entry)) :]
        if content.kind == KIND_RECORD and entry[0] == KIND_COMPACT:
            record = inflate_record(stored)
            assert record is not None, why_not(stored)
            return record
        return stored
    value = txn.get(key, db=content.legacy)
    return None if value is None else bytes(value)


def raw_put(txn: Any, dbs: Mapping[str, Any], table: str, key: bytes, value: bytes) -> None:
    """Overwrite (or forge) the stored bytes under ``key`` in place."""
    content = content_of(dbs, table)
    if content is None:
        txn.put(key, value, db=dbs[table])
        return
    seq = seq_of(txn, content, key)
    if seq is not None:
        entry = txn.get(seq, db=content.heap)
        prefix = _prefix(content, key, entry)
        if content.kind == KIND_RECORD and entry is not None and entry[0] == KIND_COMPACT:
            frame = compress_record(value)
            if frame is not None:
                txn.put(seq, prefix + frame, db=content.heap)
                return
            prefix = entry_header(KIND_RECORD, key) + prefix[len(key) + 2 :]
        txn.put(seq, prefix + value, db=content.heap)
    elif content.index is not None and txn.get(key, db=content.legacy) is None:
        content.add(txn, key, value)
    else:
        txn.put(key, value, db=content.legacy)


def raw_delete(txn: Any, dbs: Mapping[str, Any], table: str, key: bytes) -> None:
    """Remove ``key``'s entry (heap entry and location, or the legacy row)."""
    content = content_of(dbs, table)
    if content is None:
        txn.delete(key, db=dbs[table])
    else:
        content.delete(txn, key)


def raw_items(txn: Any, dbs: Mapping[str, Any], table: str) -> Iterator[tuple[bytes, bytes]]:
    """(key, stored bytes) of every entry of ``table`` (copied)."""
    content = content_of(dbs, table)
    if content is None:
        for k, v in txn.cursor(db=dbs[table]):
            yield bytes(k), bytes(v)
        return
    for k, v in list(content.items(txn)):
        if v is not None:
            yield k, bytes(v)


def record_entry(store: Any, cid: str) -> tuple[bytes, bytes]:
    """(heap seq, entry bytes) of checkpoint ``cid``'s record in an open layout-5/6 store."""
    with store.backend.read_txn() as txn:
        seq = bytes(txn.get(bytes.fromhex(cid), db=store.backend.db("cloc")))
        return seq, bytes(txn.get(seq, db=store.backend.db("heap")))


def damage(store: Any, fn: Any) -> None:
    """Run ``fn(txn, dbs)`` in a raw write txn on an open store's environment (damage
    behind the store's back: no group commit, no checks)."""
    with store.backend.env.env.begin(write=True) as txn:
        fn(txn, store.backend.dbs)


def edit_raw(path: Any, table: str, key: bytes, change: Any) -> None:
    """Replace ``key``'s stored bytes by ``change(old)`` (None deletes) in a closed store's
    files, through a raw ``lmdb`` environment (as damage from outside cpstore would)."""
    env = lmdb.open(str(path), max_dbs=32, subdir=True)
    try:
        dbs = raw_dbs(env)  # before the write txn: open_db inside it would wait on itself
        with env.begin(write=True) as txn:
            new = change(raw_get(txn, dbs, table, key))
            if new is None:
                raw_delete(txn, dbs, table, key)
            else:
                raw_put(txn, dbs, table, key, bytes(new))
    finally:
        env.close()


def flip_byte(at: int) -> Any:
    """A ``change`` for :func:`edit_raw`: the byte at ``at`` xor 0xFF."""

    def change(old: bytes | None) -> bytes:
        data = bytearray(old or b"")
        data[at] ^= 0xFF
        return bytes(data)

    return change


def to_layout_4(path: Any) -> None:
    """Rewrite a closed layout-5 store as a layout-4 build would have written it: every
    object and checkpoint record in the ``objects``/``checkpoints`` tables, no heap tables."""
    env = lmdb.open(str(path), max_dbs=32, subdir=True)
    try:
        dbs = raw_dbs(env)
        with env.begin(write=True) as txn:
            for table in ("objects", "checkpoints"):
                content = content_of(dbs, table)
                assert content is not None
                for key, value in list(raw_items(txn, dbs, table)):
                    txn.put(key, value, db=content.legacy)
            for name in ("heap", "oloc", "cloc"):
                if name in dbs:
                    txn.drop(dbs[name], delete=True)
            fmt = {"layout": "cpstore", "version": 4, "digest": "xxh3-128"}
            txn.put(b"format", encode_value(fmt), db=dbs["meta"])
    finally:
        env.close()


def to_layout_5(path: Any) -> int:
    """Rewrite a closed layout-6 store as a layout-5 build would have written it: every
    compact (``r``) record entry as a ``c`` entry carrying the record as it is, and the
    format record at version 5. Returns how many entries were rewritten."""
    env = lmdb.open(str(path), max_dbs=32, subdir=True)
    n = 0
    try:
        dbs = raw_dbs(env)
        with env.begin(write=True) as txn:
            for seq, value in list(txn.cursor(db=dbs["heap"])):
                entry = bytes(value)
                if entry[0] != KIND_COMPACT:
                    continue
                at = entry[1] + 2
                count = int.from_bytes(entry[at : at + 4], "big")
                start = at + 4 + 4 * count
                record = inflate_record(entry[start:])
                assert record is not None, why_not(entry[start:])
                txn.put(bytes(seq), bytes([KIND_RECORD]) + entry[1:start] + record, db=dbs["heap"])
                n += 1
            fmt = {"layout": "cpstore", "version": 5, "digest": "xxh3-128"}
            txn.put(b"format", encode_value(fmt), db=dbs["meta"])
    finally:
        env.close()
    return n


def forge_checkpoint(store: Any, manifest_map: dict[str, Any], extra: bytes = b"") -> bytes:
    """Store ``manifest_map`` as a checkpoint record behind the store's back (hash-valid:
    its id is its manifest's digest) and return the id; no ref names it. ``extra``: one
    more raw (key, value) pair appended to the manifest map's bytes."""
    manifest = encode_manifest(manifest_map)
    if extra:
        pairs = b"".join(encode_value(k) + encode_value(v) for k, v in manifest_map.items())
        manifest = b"\xde" + (len(manifest_map) + 1).to_bytes(2, "big") + pairs + extra
    forged = digest(manifest)
    value = pack_checkpoint_value(1.0, manifest)
    store.backend.write_txn(
        lambda txn: raw_put(txn, store.backend.dbs, "checkpoints", forged, value)
    )
    return forged
