"""Refs on a txn: each value carries a check, and ``meta`` a digest of the whole table.

Store layout 2 (docs/store.md, "Refs"). A ref value is the checkpoint id
(16 B), an origin byte and an 8-byte check: the first 8 bytes of
XXH3-128(id || origin || key). A flipped bit in the key or the value fails
the check, so a ref never silently names another run's (or branch's)
checkpoint. ``meta/refs_digest`` holds the XOR of the full XXH3-128 of every
ref plus the ref count, updated in the write txn of every ref change
(constant cost per move); :func:`check_refs` recomputes it, which tells a
vanished (or smuggled-in) ref from an intact table.

Origin: ``RECORDED`` for a head moved by a checkpoint recorded on this
branch (the manifest's branch must equal the key's), ``SET`` for a head set
by ``fork``/``set_ref``/``reset_ref`` (it may name a checkpoint recorded on
another branch of the same run, as a fork does). Every ref must name a
checkpoint of its key's run.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from cpstore.errors import CpstoreError, IntegrityError, InvalidInputError
from cpstore.native.binding import digest_small
from cpstore.native.records import DIGEST_SIZE
from cpstore.store.content import records_of
from cpstore.store.manifest import decode_manifest
from cpstore.store.model import Problem, split_ref_key, unpack_checkpoint_value
from cpstore.store.ref_neighbours import refuse_damaged_neighbours

__all__ = [
    "PINNED_PREFIX",
    "RECORDED",
    "REFS_DIGEST_KEY",
    "SET",
    "RefsState",
    "check_ref_target",
    "check_refs",
    "checked_heads",
    "commit_ref",
    "delete_ref",
    "pinned_key",
    "pinned_objects",
    "read_ref",
    "read_ref_hashed",
    "record_refs_digest",
    "ref_hash",
    "refs_damage",
    "refs_state",
    "replace_damaged_ref",
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


def _hash(key: bytes, cid: bytes, origin: int) -> bytes:
    return digest_small(b"".join((cid, _ORIGIN_BYTE[origin], key)))  # digest()'s bytes


#: (key, value, full hash) of the ref this process wrote last: a read of that very
#: value (bytes equal: the check it carries is the one computed here) takes its
#: hash from here instead of hashing it again. One slot, replaced whole.
_WRITTEN: list[tuple[bytes, bytes, bytes] | None] = [None]


def pack_ref(key: bytes, cid: bytes, origin: int) -> bytes:
    """The stored value of ref ``key`` naming ``cid``, its origin checked (_checked_origin)."""
    origin = _checked_origin(key, origin)
    return bytes(cid) + _ORIGIN_BYTE[origin] + _hash(key, cid, origin)[:_CHECK]


def _checked_origin(key: bytes | memoryview, origin: object) -> int:
    """``origin`` when it is RECORDED or SET (an int, not a bool), else InvalidInputError
    before anything is written (a negative one indexed ``_ORIGIN_BYTE`` from its end). No
    public call takes one: each is a constant, ``ref_target``'s or a stored checked byte."""
    if type(origin) is not int or not RECORDED <= origin <= SET:
        raise InvalidInputError(
            "a ref's origin must be RECORDED or SET",
            where=_where(key),
            expected=f"an int, {RECORDED} (RECORDED) or {SET} (SET)",
            got=origin,
        )
    return origin


def _where(key: bytes | memoryview) -> str:
    try:
        run, branch = split_ref_key(key)
    except IntegrityError:  # split_ref_key's for a key no name encodes to (review101)
        return f"refs/{bytes(key).hex()}"
    return f"refs/{run}/{branch}"


def unpack_ref(key: bytes | memoryview, value: bytes | memoryview) -> tuple[bytes, int]:
    """(checkpoint id, origin) of a stored ref; IntegrityError when its check fails."""
    cid, origin, _ = _unpack_hashed(key, value)
    return cid, origin


def _unpack_hashed(key: bytes | memoryview, value: bytes | memoryview) -> tuple[bytes, int, bytes]:
    """:func:`unpack_ref` and the ref's full hash (what the table digest XORs in)."""
    raw = bytes(value)
    if len(raw) != REF_SIZE or raw[DIGEST_SIZE] not in (RECORDED, SET):
        raise IntegrityError(
            "ref value is malformed", where=_where(key), expected=f"{REF_SIZE} bytes", got=raw
        )
    cid, origin = raw[:DIGEST_SIZE], raw[DIGEST_SIZE]
    full = _hash(bytes(key), cid, origin)
    if full[:_CHECK] != raw[DIGEST_SIZE + 1 :]:
        raise IntegrityError(
            "ref does not match its check (key or value damaged)",
            where=_where(key),
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
        return cid, SET, _hash(key, cid, SET)
    return _unpack_hashed(key, value)


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


def _digest_state(txn: Any, meta: Any, raw: Any = False) -> tuple[bytes, int]:
    raw = txn.get(REFS_DIGEST_KEY, None, meta) if raw is False else raw  # False: unread
    if raw is None:
        return _ZERO, 0
    raw = bytes(raw)
    if len(raw) != DIGEST_SIZE + _COUNT.size:
        raise IntegrityError(
            "refs digest is malformed", where="meta/refs_digest", expected=24, got=raw
        )
    return raw[:DIGEST_SIZE], _COUNT.unpack_from(raw, DIGEST_SIZE)[0]


def _xor(a: bytes, b: bytes) -> bytes:
    return (int.from_bytes(a, "little") ^ int.from_bytes(b, "little")).to_bytes(
        DIGEST_SIZE, "little"
    )


#: Called by :func:`_table_digest` with each ref's key and stored value (as the cursor
#: gives it); returns the ref's full hash once it has checked the ref, or None to have the
#: stored value hashed as it is.
_OnRef = Callable[[bytes, bytes | memoryview], bytes | None]


def _table_digest(
    txn: Any, dbs: Mapping[str, Any], on_ref: _OnRef | None = None
) -> tuple[bytes, int]:
    """(XOR of the full hash of every ref, ref count): what ``meta/refs_digest`` holds for
    the refs table as it is stored. A value of ``REF_SIZE`` bytes is hashed as stored,
    even when its check fails (its true hash is unknowable); another is counted, not
    hashed. ``on_ref`` sees each ref in key order (it may raise, ending the walk) and may
    give the hash it computed checking the ref (equal to the stored value's: one hash)."""
    acc = count = 0
    hashed, from_bytes = _hash, int.from_bytes
    with txn.cursor(db=dbs["refs"]) as cur:
        for count, (k, v) in enumerate(cur, 1):  # noqa: B007 - the count is the last
            key = bytes(k)
            full = None if on_ref is None else on_ref(key, v)
            if full is None and len(v) == REF_SIZE:
                raw = bytes(v)
                full = hashed(key, raw[:DIGEST_SIZE], raw[DIGEST_SIZE])
            if full is not None:
                acc ^= from_bytes(full, "little")
    return acc.to_bytes(DIGEST_SIZE, "little"), count


def _update_digest(
    txn: Any,
    meta: Any,
    out: bytes | None,
    into: bytes | None,
    state: tuple[bytes, int] | None = None,
) -> None:
    acc, count = _digest_state(txn, meta) if state is None else state
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
    into = _hash(key, cid, origin)
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
    out = None if old is None else old[2] if len(old) == 3 else _hash(key, old[0], old[1])
    state = _digest_state(txn, dbs["meta"], raw)
    if old is None:  # a ref created from nothing: a vanished or damaged row may be it
        _refuse_short(txn, dbs, key, state[1])
        refuse_damaged_neighbours(txn, dbs["refs"], key, _unpack_hashed)
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
            f"too): {_where(key)} is not created from nothing; run verify, then repair_ref "
            "(cpstore repair-ref; docs/store.md, 'Repairing a damaged ref')",
            where="meta/refs_digest",
            expected="a recorded ref count",
            got=f"no digest row, {found} refs",
        )
    if found < counted:
        raise IntegrityError(
            f"the refs table holds fewer refs than meta/refs_digest counts (a ref vanished "
            f"outside cpstore, or the count is damaged): {_where(key)} is not created from "
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
        _update_digest(txn, dbs["meta"], _hash(key, old_cid, old_origin), None)


def replace_damaged_ref(
    txn: Any,
    dbs: Mapping[str, Any],
    key: bytes,
    cid: bytes | None,
    origin: int,
    *,
    count: int,
) -> tuple[bytes, int]:
    """Overwrite, put back or (``cid=None``) delete a ref; re-derive the digest.

    For a ref whose check fails, a ref absent from a table that fails its digest, or
    a damaged digest itself: the damaged value's true hash is unknowable, so the
    table digest's XOR is recomputed over the table as it now stands (hashing what
    is stored, as :func:`check_refs` does). ``count`` is the ref count the digest
    then records, which the caller derives from :func:`refs_state` (carried by the
    change, so a ref that vanished before the repair is still reported; the table's
    own when the stored count is part of what is damaged; review66). Returns the
    table's (XOR, ref count) after the change.
    """
    refs = dbs["refs"]
    if cid is None:
        txn.delete(key, db=refs)
    else:
        txn.put(key, pack_ref(key, cid, origin), db=refs)
    acc, found = _table_digest(txn, dbs)
    txn.put(REFS_DIGEST_KEY, acc + _COUNT.pack(count), db=dbs["meta"])
    return acc, found


def record_refs_digest(txn: Any, dbs: Mapping[str, Any], acc: bytes, count: int) -> None:
    """Write ``meta/refs_digest`` as (``acc``, ``count``): a repair keeping the XOR that
    still names a ref missing from the table (``ref_repair``, review73)."""
    txn.put(REFS_DIGEST_KEY, acc + _COUNT.pack(count), db=dbs["meta"])


def check_refs(txn: Any, dbs: Mapping[str, Any], problems: list[Problem]) -> int:
    """Check every ref (its check, its target's run and branch) and the table digest."""
    cps = records_of(dbs)

    def check(key: bytes, stored: bytes | memoryview) -> bytes | None:
        try:
            cid, origin, full = _unpack_hashed(key, stored)
        except CpstoreError as exc:  # hashed as stored, when REF_SIZE bytes
            problems.append(Problem(exc.what, exc.where or "refs", exc.expected, exc.got))
            return None
        try:
            value = cps.get(txn, cid)
        except IntegrityError:
            value = None  # a damaged location: heap_problems names it
        if value is None:
            problems.append(Problem("ref does not resolve", _where(key), expected=cid.hex()))
            return full
        try:
            created, data = unpack_checkpoint_value(value)
            m = decode_manifest(cid, bytes(data), created)
            check_ref_target(key, origin, m.run_id, m.branch)
        except CpstoreError as exc:
            problems.append(Problem(exc.what, exc.where or _where(key), exc.expected, exc.got))
        return full

    acc, count = _table_digest(txn, dbs, check)
    try:
        want_acc, want_count = _digest_state(txn, dbs["meta"])
    except CpstoreError as exc:
        problems.append(Problem(exc.what, exc.where or "meta", exc.expected, exc.got))
        return count
    if want_count != count:
        problems.append(
            Problem(
                "refs table does not match its digest: " + _why(txn, dbs, count, want_count),
                "meta/refs_digest",
                expected=f"{want_count} refs",
                got=f"{count} refs",
            )
        )
    elif want_acc != acc:
        problems.append(
            Problem(
                "refs table does not match its digest: a ref was changed outside cpstore",
                "meta/refs_digest",
                expected=want_acc.hex(),
                got=acc.hex(),
            )
        )
    return count


def checked_heads(txn: Any, dbs: Mapping[str, Any]) -> list[tuple[bytes, bytes]]:
    """(key, checkpoint id) of every ref, each checked, and the table against its digest.

    For retention, which sweeps what no head reaches: a ref that fails its check, and a
    table a ref vanished from, was added to or changed in outside cpstore (a ref put
    back to an older head: its own check holds), is IntegrityError, so nothing is swept
    by a head cpstore did not set. The digest costs no more hashing than the checks.
    """
    out: list[tuple[bytes, bytes]] = []
    unpack, keep = _unpack_hashed, out.append

    def check(key: bytes, stored: bytes | memoryview) -> bytes:
        cid, _, full = unpack(key, stored)  # IntegrityError at a ref failing its check
        keep((key, cid))
        return full

    damage = _digest_damage(txn, dbs, check)
    if damage is not None:
        raise IntegrityError(
            "refs table does not match its digest (a ref vanished, was added or changed "
            "outside cpstore): retention stops, it would sweep by heads cpstore did not set; "
            "verify names the damage",
            where=damage.where,
            expected=damage.expected,
            got=damage.got,
        )
    return out


def refs_damage(txn: Any, dbs: Mapping[str, Any]) -> IntegrityError | None:
    """The refs table's first damage in the caller's txn, or None when it is whole: a ref
    failing its check (that ref named), a malformed digest, or a table that does not match
    ``meta/refs_digest`` (a ref vanished, was added or changed outside cpstore). For a
    caller that must not act on refs it cannot vouch for (push and pull, both sides)."""

    def check(key: bytes, stored: bytes | memoryview) -> bytes:
        return _unpack_hashed(key, stored)[2]  # IntegrityError at a ref failing its check

    try:
        return _digest_damage(txn, dbs, check)
    except IntegrityError as exc:
        return exc


def _digest_damage(txn: Any, dbs: Mapping[str, Any], check: _OnRef) -> IntegrityError | None:
    """Walk the table through ``check`` (which may raise at a ref failing its own check)
    and compare it with ``meta/refs_digest`` (IntegrityError when malformed): the
    mismatch, or None when the table is what the digest records."""
    acc, count = _table_digest(txn, dbs, check)
    want_acc, want_count = _digest_state(txn, dbs["meta"])
    if (want_acc, want_count) == (acc, count):
        return None
    return IntegrityError(
        "refs table does not match its digest: "
        + (
            _why(txn, dbs, count, want_count)
            if count != want_count
            else "a ref or the digest changed outside cpstore"
        ),
        where="meta/refs_digest",
        expected=f"{want_count} refs, digest {want_acc.hex()}",
        got=f"{count} refs, digest {acc.hex()}",
    )


def _why(txn: Any, dbs: Mapping[str, Any], count: int, want_count: int) -> str:
    """What a count that differs from the table's says (count != want_count)."""
    if count < want_count:
        return "a ref vanished"
    if not want_count and txn.get(REFS_DIGEST_KEY, None, dbs["meta"]) is None:
        return "meta/refs_digest is missing (deleted outside cpstore; review71)"
    return "a ref was added outside cpstore"


class RefsState(NamedTuple):
    """``meta/refs_digest`` and the refs table as stored, read together once."""

    recorded: tuple[bytes, int] | None
    """(XOR, ref count) the digest records; None when it is malformed, or missing while
    the table holds refs (its count unknown: review71)."""
    acc: bytes
    """XOR of the full hash of every ref in the table, as stored."""
    found: int
    """Refs the table holds."""

    @property
    def holds(self) -> bool:
        """Whether the digest is well formed and matches the table."""
        return self.recorded == (self.acc, self.found)


def refs_state(txn: Any, dbs: Mapping[str, Any]) -> RefsState:
    """The digest and the table it summarises, in the caller's txn: what a repair
    decides by (whether anything is damaged) and records (``ref_repair``'s ``refs``:
    a repair that accepted a table a ref had vanished from says so in the log)."""
    acc, count = _table_digest(txn, dbs)
    try:
        recorded: tuple[bytes, int] | None = _digest_state(txn, dbs["meta"])
    except IntegrityError:
        recorded = None
    if count and txn.get(REFS_DIGEST_KEY, None, dbs["meta"]) is None:
        recorded = None  # a missing row beside refs: unknown, as a malformed one (review71)
    return RefsState(recorded, acc, count)


def ref_hash(key: bytes, cid: bytes, origin: int) -> bytes:
    """The full hash of ref ``key`` naming ``cid`` with ``origin`` (checked; the digest XORs it)."""
    return _hash(key, cid, _checked_origin(key, origin))


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
        acc = _xor(acc, _hash(key, cid, origin))
    txn.put(REFS_DIGEST_KEY, acc + _COUNT.pack(len(old)), db=dbs["meta"])
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
