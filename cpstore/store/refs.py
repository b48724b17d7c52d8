"""Refs on a txn: each value carries a check, and ``meta`` a digest of the whole table.

Store layout 2 (docs/store.md, "Refs"). A ref value is the checkpoint id
(16 B), an origin byte and an 8-byte check: the first 8 bytes of
XXH3-128(id || origin || key). A flipped bit in the key or the value fails
the check, so a ref never silently names another run's (or branch's)
checkpoint. ``meta/refs_digest`` holds the XOR of the full XXH3-128 of every
ref plus the ref count, updated in the write txn of every ref change
(constant cost per move); ``ref_table.check_refs`` recomputes it, which tells a
vanished (or smuggled-in) ref from an intact table.

Origin: ``RECORDED`` for a head moved by a checkpoint recorded on this
branch (the manifest's branch must equal the key's), ``SET`` for a head set
by ``fork``/``set_ref``/``reset_ref`` (it may name a checkpoint recorded on
another branch of the same run, as a fork does). Every ref must name a
checkpoint of its key's run.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

from cpstore.errors import CpstoreError, IntegrityError, InvalidInputError
from cpstore.native.binding import digest_small
from cpstore.native.records import DIGEST_SIZE
from cpstore.store.content import records_of
from cpstore.store.manifest import decode_manifest
from cpstore.store.model import ref_where, split_ref_key, unpack_checkpoint_value
from cpstore.store.ref_neighbours import refuse_damaged_neighbours

__all__ = [
    "PINNED_PREFIX",
    "RECORDED",
    "REFS_DIGEST_KEY",
    "REF_SIZE",
    "SET",
    "check_ref_target",
    "commit_ref",
    "delete_ref",
    "digest_row",
    "digest_state",
    "pack_ref",
    "pinned_key",
    "pinned_objects",
    "read_ref",
    "read_ref_hashed",
    "ref_hash",
    "stored_hash",
    "unpack_hashed",
    "unpack_ref",
    "upgrade_refs_v1",
    "write_ref",
]

RECORDED = 0
SET = 1
_CHECK = 8
REF_SIZE = DIGEST_SIZE + 1 + _CHECK
REFS_DIGEST_KEY = b"refs_digest"
_COUNT = struct.Struct("<Q")
_ROW_SIZE = DIGEST_SIZE + _COUNT.size  # meta/refs_digest: the refs' hashes XORed, their count
_ZERO = bytes(DIGEST_SIZE)


#: An origin's stored byte (``bytes((origin,))``, without the tuple and the call).
_ORIGIN_BYTE = tuple(bytes((i,)) for i in range(256))


def stored_hash(key: bytes, cid: bytes, origin: int) -> bytes:
    """The full hash of ref ``key`` naming ``cid`` with ``origin`` as stored (unchecked:
    any byte, so a damaged value is hashed as it is; :func:`ref_hash` checks it)."""
    return digest_small(b"".join((cid, _ORIGIN_BYTE[origin], key)))  # digest()'s bytes


#: (key, value, full hash) of the ref this process wrote last: a read of that very
#: value (bytes equal: the check it carries is the one computed here) takes its
#: hash from here instead of hashing it again. One slot, replaced whole.
_WRITTEN: list[tuple[bytes, bytes, bytes] | None] = [None]


def pack_ref(key: bytes, cid: bytes, origin: int) -> bytes:
    """The stored value of ref ``key`` naming ``cid``, its origin checked (_checked_origin)."""
    origin = _checked_origin(key, origin)
    return bytes(cid) + _ORIGIN_BYTE[origin] + stored_hash(key, cid, origin)[:_CHECK]


def _checked_origin(key: bytes | memoryview, origin: object) -> int:
    """``origin`` when it is RECORDED or SET (an int, not a bool), else InvalidInputError
    before anything is written (a negative one indexed ``_ORIGIN_BYTE`` from its end). No
    public call takes one: each is a constant, ``ref_target``'s or a stored checked byte."""
    if type(origin) is not int or not RECORDED <= origin <= SET:
        raise InvalidInputError(
            "a ref's origin must be RECORDED or SET",
            where=ref_where(key),
            expected=f"an int, {RECORDED} (RECORDED) or {SET} (SET)",
            got=origin,
        )
    return origin


def unpack_ref(key: bytes | memoryview, value: bytes | memoryview) -> tuple[bytes, int]:
    """(checkpoint id, origin) of a stored ref; IntegrityError when its check fails."""
    cid, origin, _ = unpack_hashed(key, value)
    return cid, origin


def unpack_hashed(key: bytes | memoryview, value: bytes | memoryview) -> tuple[bytes, int, bytes]:
    """:func:`unpack_ref` and the ref's full hash (what the table digest XORs in)."""
    raw = bytes(value)
    if len(raw) != REF_SIZE or raw[DIGEST_SIZE] not in (RECORDED, SET):
        raise IntegrityError(
            "ref value is malformed", where=ref_where(key), expected=f"{REF_SIZE} bytes", got=raw
        )
    cid, origin = raw[:DIGEST_SIZE], raw[DIGEST_SIZE]
    full = stored_hash(bytes(key), cid, origin)
    if full[:_CHECK] != raw[DIGEST_SIZE + 1 :]:
        raise IntegrityError(
            "ref does not match its check (key or value damaged)",
            where=ref_where(key),
            expected=full[:_CHECK].hex(),
            got=raw[DIGEST_SIZE + 1 :].hex(),
        )
    return cid, origin, full


def read_ref(
    txn: Any, dbs: Mapping[str, Any], key: bytes, *, layout: int
) -> tuple[bytes, int] | None:
    """(checkpoint id, origin) of ref ``key``, or None; a layout-1 value has no check.

    ``layout`` is the one the handle saw at open: a read-only handle on a
    layout-1 store may meet layout-2 values once another process upgraded
    the store (one txn, so a txn sees one layout whole). So the value's
    length decides there: a bare id (layout 1, unchecked) or a checked
    value; a layout-2 handle accepts only checked values.
    """
    found = read_ref_hashed(txn, dbs, key, layout=layout)
    return None if found is None else (found[0], found[1])


def read_ref_hashed(
    txn: Any, dbs: Mapping[str, Any], key: bytes, *, layout: int
) -> tuple[bytes, int, bytes] | None:
    """:func:`read_ref` and the ref's full hash, for :func:`write_ref`'s ``old``
    (a compare-and-set then hashes the old ref once, not twice)."""
    value = txn.get(key, None, dbs["refs"])
    if value is None:
        return None
    written = _WRITTEN[0]
    if written is not None and written[1] == value and written[0] == key:
        raw = written[1]
        return raw[:DIGEST_SIZE], raw[DIGEST_SIZE], written[2]
    if layout == 1 and len(value) == DIGEST_SIZE:
        cid = bytes(value)  # a layout-1 store read as it is: no check stored
        return cid, SET, stored_hash(key, cid, SET)
    return unpack_hashed(key, value)


def check_ref_target(key: bytes, origin: int, run_id: object, branch: object) -> None:
    """IntegrityError unless a manifest's run (and branch, if RECORDED) fit the ref key."""
    run, name = split_ref_key(key)
    if run_id != run or (origin == RECORDED and branch != name):
        raise IntegrityError(
            "ref names a checkpoint of another run or branch",
            where=f"refs/{run}/{name}",
            expected=f"run {run}" + (f" branch {name}" if origin == RECORDED else ""),
            got=f"run {run_id} branch {branch}",
        )


def digest_state(txn: Any, meta: Any, raw: Any = False) -> tuple[bytes, int]:
    raw = txn.get(REFS_DIGEST_KEY, None, meta) if raw is False else raw  # False: unread
    if raw is None:
        return _ZERO, 0
    raw = bytes(raw)
    if len(raw) != DIGEST_SIZE + _COUNT.size:
        raise IntegrityError(
            "refs digest is malformed", where="meta/refs_digest", expected=24, got=raw
        )
    return raw[:DIGEST_SIZE], _COUNT.unpack_from(raw, DIGEST_SIZE)[0]


def digest_row(acc: bytes, count: int) -> bytes:
    """The stored value of ``meta/refs_digest``: the refs' hashes XORed, their count."""
    return acc + _COUNT.pack(count)


def _xor(a: bytes, b: bytes) -> bytes:
    return (int.from_bytes(a, "little") ^ int.from_bytes(b, "little")).to_bytes(
        DIGEST_SIZE, "little"
    )


def _update_digest(
    txn: Any,
    meta: Any,
    out: bytes | None,
    into: bytes | None,
    state: tuple[bytes, int] | None = None,
) -> None:
    acc, count = digest_state(txn, meta) if state is None else state
    x = int.from_bytes(acc, "little")
    if out is not None:
        x, count = x ^ int.from_bytes(out, "little"), count - 1
    if into is not None:
        x, count = x ^ int.from_bytes(into, "little"), count + 1
    # Modulo its 8 bytes, as the XOR is: a count damaged below the refs a move deletes
    # stays damaged (still reported) instead of ending the move in struct.error (review68).
    count %= 1 << (8 * _COUNT.size)
    row = x.to_bytes(DIGEST_SIZE, "little") + _COUNT.pack(count)
    txn.put(REFS_DIGEST_KEY, row, True, True, False, meta)  # positional, as commit_ref's


_Old = tuple[bytes, int] | tuple[bytes, int, bytes] | None  # write_ref's ``old``: read in the txn


def write_ref(
    txn: Any, dbs: Mapping[str, Any], key: bytes, cid: bytes, origin: int, *, old: _Old
) -> None:
    """Point ref ``key`` at ``cid``; the table digest moves in this same txn.

    ``old`` is the ref as :func:`read_ref` (or :func:`read_ref_hashed`, whose
    hash is used as it is) gave it earlier in this txn: every caller reads it
    first for its compare-and-set, so it is not read again.

    A ref created from nothing (``old`` None) is refused with :class:`IntegrityError` while
    the refs table holds fewer refs than ``meta/refs_digest`` counts (:func:`_refuse_short`),
    or while a ref row beside ``key`` fails its check (``ref_neighbours``: a damaged key).
    Its ``origin`` is checked before the txn is read or written (:func:`_checked_origin`).
    """
    commit_ref(txn, dbs, key, cid, _checked_origin(key, origin), old=old)


def commit_ref(
    txn: Any, dbs: Mapping[str, Any], key: bytes, cid: bytes, origin: int, *, old: _Old
) -> None:
    """:func:`write_ref` without its origin check: a commit's own ref (``commit.py``), its
    origin the constant RECORDED (no check on the put path). Every other writer of a ref
    goes through :func:`write_ref`."""
    into = stored_hash(key, cid, origin)
    value = (cid if type(cid) is bytes else bytes(cid)) + _ORIGIN_BYTE[origin] + into[:_CHECK]
    raw = txn.get(REFS_DIGEST_KEY, None, dbs["meta"])
    if old is not None and len(old) == 3 and type(raw) is bytes and len(raw) == _ROW_SIZE:
        # A commit's move beside a sound row (put88): its XOR moved, its count kept.
        txn.put(key, value, True, True, False, dbs["refs"])  # positional: ~1k below keywords
        x = int.from_bytes(raw[:DIGEST_SIZE], "little") ^ int.from_bytes(old[2], "little")
        row = (x ^ int.from_bytes(into, "little")).to_bytes(DIGEST_SIZE, "little")
        txn.put(REFS_DIGEST_KEY, row + raw[DIGEST_SIZE:], True, True, False, dbs["meta"])
        _WRITTEN[0] = (key if type(key) is bytes else bytes(key), value, into)
        return
    out = None if old is None else old[2] if len(old) == 3 else stored_hash(key, old[0], old[1])
    state = digest_state(txn, dbs["meta"], raw)
    if old is None:  # a ref created from nothing: a vanished or damaged row may be it
        _refuse_short(txn, dbs, key, state[1])
        refuse_damaged_neighbours(txn, dbs["refs"], key, unpack_hashed)
    txn.put(key, value, True, True, False, dbs["refs"])  # positional: ~1k below keywords
    if old is None or state[1] or not _row_missing(txn, dbs):
        _update_digest(txn, dbs["meta"], out, into, state)
    _WRITTEN[0] = (key if type(key) is bytes else bytes(key), value, into)


def _row_missing(txn: Any, dbs: Mapping[str, Any]) -> bool:
    """Whether ``meta/refs_digest`` is absent. A move or a delete (a ref was there) leaves
    an absent row absent: written back, it counted from 0, the next create met no refusal
    (:func:`_refuse_short`) and a vanished ref's run started a new root (review71).
    ``repair_ref`` records the table again."""
    return txn.get(REFS_DIGEST_KEY, None, dbs["meta"]) is None


def _refuse_short(txn: Any, dbs: Mapping[str, Any], key: bytes, counted: int) -> None:
    """Refuse to create ref ``key`` from nothing while the refs table holds fewer refs
    than ``meta/refs_digest`` counts (``counted``): a ref vanished outside cpstore (or
    the count is damaged), and it may be this one. Creating it would start its run or
    branch anew (a recorder's new root, a LangGraph thread's first checkpoint) or put a
    fork or a push's head where the true one stood, its CAS "absent" met only by the
    damage (push69, refs70). One count of the table's entries (LMDB: constant time;
    PostgreSQL: a ``count(*)``), paid only when a ref is created. A ref that moves,
    one changed outside cpstore or a flipped XOR is not seen here (``verify()`` and
    retention see them): only the count is compared. A digest row missing while the table
    holds refs refuses too: its count is unknown, not 0 (review71)."""
    found = int(txn.stat(dbs["refs"])["entries"])
    if not counted and found and _row_missing(txn, dbs):
        # No intact store holds a ref without the digest row (every ref write writes it,
        # layout 1's upgrade too): deleted behind cpstore's back, its count is unknown,
        # not 0, and read as 0 it hid any ref that vanished beside it (review71).
        raise IntegrityError(
            f"meta/refs_digest is missing while the refs table holds refs (deleted outside "
            f"cpstore: how many refs it counted is unknown, and one may have vanished "
            f"too): {ref_where(key)} is not created from nothing; run verify, then repair_ref "
            "(cpstore repair-ref; docs/store.md, 'Repairing a damaged ref')",
            where="meta/refs_digest",
            expected="a recorded ref count",
            got=f"no digest row, {found} refs",
        )
    if found < counted:
        raise IntegrityError(
            f"the refs table holds fewer refs than meta/refs_digest counts (a ref vanished "
            f"outside cpstore, or the count is damaged): {ref_where(key)} is not created from "
            f"nothing, which could start anew a branch whose head vanished; run verify, then "
            f"repair_ref (cpstore repair-ref): it puts a vanished ref back at its true head "
            "(docs/store.md, 'Repairing a damaged ref')",
            where="meta/refs_digest",
            expected=f"{counted} refs",
            got=f"{found} refs",
        )


def delete_ref(txn: Any, dbs: Mapping[str, Any], key: bytes) -> None:
    """Delete ref ``key`` (a no-op when absent); the table digest moves in this txn."""
    old = txn.get(key, None, dbs["refs"])
    if old is None:
        return
    old_cid, old_origin = unpack_ref(key, old)
    txn.delete(key, db=dbs["refs"])
    if not _row_missing(txn, dbs):  # left absent, as by a move (write_ref)
        _update_digest(txn, dbs["meta"], stored_hash(key, old_cid, old_origin), None)


def ref_hash(key: bytes, cid: bytes, origin: int) -> bytes:
    """The full hash of ref ``key`` naming ``cid`` with ``origin`` (checked; the digest XORs it)."""
    return stored_hash(key, cid, _checked_origin(key, origin))


def upgrade_refs_v1(txn: Any, dbs: Mapping[str, Any]) -> int:
    """Rewrite every layout-1 ref (a bare id) with its origin and check; returns how many.

    The origin is RECORDED when the target's manifest was recorded on the
    key's branch and SET otherwise (a fork pointer). A ref whose target is
    not stored (damage layout 1 could not detect) keeps SET; verify reports it.
    """
    refs, cps = dbs["refs"], records_of(dbs)
    with txn.cursor(db=refs) as cur:
        old = [(bytes(k), bytes(v)) for k, v in cur]
    acc = _ZERO
    for key, cid in old:
        origin = SET
        value = cps.get(txn, cid) if len(cid) == DIGEST_SIZE else None
        if value is not None:
            try:
                created, data = unpack_checkpoint_value(value)
                m = decode_manifest(cid, bytes(data), created)
                if m.branch == split_ref_key(key)[1]:
                    origin = RECORDED
            except (CpstoreError, ValueError):
                pass  # damaged target: verify reports it after the upgrade
        if len(cid) != DIGEST_SIZE:
            continue  # not a ref layout 1 could have written: left for verify to report
        txn.put(key, pack_ref(key, cid, origin), db=refs)
        acc = _xor(acc, stored_hash(key, cid, origin))
    txn.put(REFS_DIGEST_KEY, digest_row(acc, len(old)), db=dbs["meta"])
    return len(old)


# -- pinned objects -------------------------------------------------------------

#: ``meta`` keys of objects stored with ``Store.put_object``: retention roots
#: until ``Store.unpin_object``, so content addressing never lets a swept
#: checkpoint that named the same bytes take the caller's object with it.
PINNED_PREFIX = b"pinned/"


def pinned_key(key: bytes) -> bytes:
    """``meta`` key of a pinned object."""
    return PINNED_PREFIX + bytes(key)


def pinned_objects(txn: Any, meta: Any) -> list[bytes]:
    """Digests of every pinned object."""
    out: list[bytes] = []
    with txn.cursor(db=meta) as cur:
        found = cur.set_range(PINNED_PREFIX)
        while found and bytes(cur.key()).startswith(PINNED_PREFIX):
            out.append(bytes(cur.key())[len(PINNED_PREFIX) :])
            found = cur.next()
    return out
