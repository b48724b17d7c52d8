"""The refs table as a whole against ``meta/refs_digest``: the walks that vouch for it.

``refs.py`` keeps one ref on a txn (its value, its check, its create, move and delete,
each moving the digest in constant time). What needs the whole table is here: the
digest recomputed over every row (:func:`_table_digest`), ``verify()``'s check of every
ref and the digest (:func:`check_refs`), retention's checked heads
(:func:`checked_heads`), push and pull's refusal of a table they cannot vouch for
(:func:`refs_damage`), and what ``repair_ref`` reads and writes (:func:`refs_state`,
:func:`replace_damaged_ref`, :func:`record_refs_digest`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from cpstore.errors import CpstoreError, IntegrityError
from cpstore.native.records import DIGEST_SIZE
from cpstore.store.content import records_of
from cpstore.store.manifest import decode_manifest
from cpstore.store.model import Problem, ref_where, unpack_checkpoint_value
from cpstore.store.ref_neighbours import flipped_from
from cpstore.store.refs import (
    REF_SIZE,
    REFS_DIGEST_KEY,
    check_ref_target,
    digest_row,
    digest_state,
    pack_ref,
    stored_hash,
    unpack_hashed,
    unpack_ref,
)

__all__ = [
    "RefsState",
    "check_refs",
    "checked_heads",
    "record_refs_digest",
    "refs_damage",
    "refs_state",
    "replace_damaged_ref",
]


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
    hashed, from_bytes = stored_hash, int.from_bytes
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
    txn.put(REFS_DIGEST_KEY, digest_row(acc, count), db=dbs["meta"])
    return acc, found


def record_refs_digest(txn: Any, dbs: Mapping[str, Any], acc: bytes, count: int) -> None:
    """Write ``meta/refs_digest`` as (``acc``, ``count``): a repair keeping the XOR that
    still names a ref missing from the table (``ref_repair``, review73)."""
    txn.put(REFS_DIGEST_KEY, digest_row(acc, count), db=dbs["meta"])


def check_refs(txn: Any, dbs: Mapping[str, Any], problems: list[Problem]) -> int:
    """Check every ref (its check, its target's run and branch) and the table digest."""
    cps = records_of(dbs)

    def check(key: bytes, stored: bytes | memoryview) -> bytes | None:
        try:
            cid, origin, full = unpack_hashed(key, stored)
        except CpstoreError as exc:  # hashed as stored, when REF_SIZE bytes
            true = flipped_from(key, bytes(stored), unpack_ref)
            what = (
                exc.what
                if true is None
                else f"{exc.what}; its value passes the check under {ref_where(true)}, one bit "
                f"of its key flipped: the row is that ref, stored under a damaged key "
                f"(repair_ref names {ref_where(true)}; docs/store.md, 'Out of the blind spot')"
            )
            problems.append(Problem(what, exc.where or "refs", exc.expected, exc.got))
            return None
        try:
            value = cps.get(txn, cid)
        except IntegrityError:
            value = None  # a damaged location: heap_problems names it
        if value is None:
            problems.append(Problem("ref does not resolve", ref_where(key), expected=cid.hex()))
            return full
        try:
            created, data = unpack_checkpoint_value(value)
            m = decode_manifest(cid, bytes(data), created)
            check_ref_target(key, origin, m.run_id, m.branch)
        except CpstoreError as exc:
            problems.append(Problem(exc.what, exc.where or ref_where(key), exc.expected, exc.got))
        return full

    acc, count = _table_digest(txn, dbs, check)
    try:
        want_acc, want_count = digest_state(txn, dbs["meta"])
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
    unpack, keep = unpack_hashed, out.append

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
        return unpack_hashed(key, stored)[2]  # IntegrityError at a ref failing its check

    try:
        return _digest_damage(txn, dbs, check)
    except IntegrityError as exc:
        return exc


def _digest_damage(txn: Any, dbs: Mapping[str, Any], check: _OnRef) -> IntegrityError | None:
    """Walk the table through ``check`` (which may raise at a ref failing its own check)
    and compare it with ``meta/refs_digest`` (IntegrityError when malformed): the
    mismatch, or None when the table is what the digest records."""
    acc, count = _table_digest(txn, dbs, check)
    want_acc, want_count = digest_state(txn, dbs["meta"])
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
        recorded: tuple[bytes, int] | None = digest_state(txn, dbs["meta"])
    except IntegrityError:
        recorded = None
    if count and txn.get(REFS_DIGEST_KEY, None, dbs["meta"]) is None:
        recorded = None  # a missing row beside refs: unknown, as a malformed one (review71)
    return RefsState(recorded, acc, count)
