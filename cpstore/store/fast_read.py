"""The whole-state read path shared by the reader, ``history_states`` and the LangGraph saver.

A whole-state read of a parts state (not chunked) with verification on does,
per part, one heap get (the record's location hint, content.py) or the
index's get and kind-and-key compare, one XXH3-128 check of the bytes against
the part's digest, and one decode. This module does it in one loop with
nothing but those steps, and returns None at the first thing that is not the
common case (a part missing, failing its hash, not exactly one msgpack value,
a damaged location): the caller then takes the part-by-part path, which
raises naming the part. Nothing here is cached across calls but the
:class:`~cpstore.store.content.Content` table handles (stateless, never
handed out).
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Mapping
from typing import Any

from cpstore.errors import IntegrityError
from cpstore.native.binding import digest_small as _digest
from cpstore.store.backend import Txn
from cpstore.store.content import Content, objects_of, records_of
from cpstore.store.decode import (
    ALIKE_SCALARS,
    DECODE_ERRORS,
    MSGSPEC_SAFE_LIMIT,
    decode_part,
    decoded_alike,
)

_recursion_limit = sys.getrecursionlimit

#: Where an object's bytes start in its heap entry (kind, key length 16, the digest).
_PART_AT = 18

__all__ = ["checked_part", "contents", "hint_seqs", "part_views", "read_parts"]

#: id(dbs) -> (dbs, its heap handle, (objects, records)). The dbs dict is kept so
#: its id cannot be reused while cached; an entry is used only while the dict
#: still holds the heap handle it was built with (a read-only handle adopts the
#: heap tables in place). The pair is the one tuple every hit returns (immutable,
#: and its two handles stateless: perf99, no tuple built per call).
_CONTENTS: dict[int, tuple[Mapping[str, Any], Any, tuple[Content, Content]]] = {}
_MAX_CACHED = 64


def contents(dbs: Mapping[str, Any]) -> tuple[Content, Content]:
    """(objects, records) :class:`Content` of the tables ``dbs``, built once per table set."""
    hit = _CONTENTS.get(id(dbs))
    if hit is not None and hit[0] is dbs and hit[1] is dbs.get("heap"):
        return hit[2]
    pair = objects_of(dbs), records_of(dbs)
    if len(_CONTENTS) >= _MAX_CACHED:
        _CONTENTS.clear()
    _CONTENTS[id(dbs)] = (dbs, dbs.get("heap"), pair)
    return pair


def hint_seqs(objects: Content, hints: bytes, n: int) -> list[bytes | None]:
    """The heap keys a record's hint block names for its ``n`` parts (None: no hint)."""
    if objects.heap is None or len(hints) != 4 * n:
        return [None] * n
    return [s.to_bytes(8, "big") if s else None for s in _seqs_of(n)(hints)]


def checked_part(
    txn: Txn[memoryview], objects: Content, key: bytes, seq: bytes | None
) -> memoryview | None:
    """The bytes of object ``key``, hash-checked: at the hinted heap entry ``seq`` once
    they hash to ``key``, else through the index (:meth:`Content.part`); None when it is
    missing or fails its hash. IntegrityError: a damaged location."""
    if seq is not None:
        view = txn.get(seq, None, objects.heap)
        if view is not None:
            view = view[_PART_AT:]  # an object entry: kind, 16, the digest, bytes
            if _digest(view) == key:
                return view
    found: memoryview | None = objects.part(txn, key, b"", 0)
    return found


def read_parts(
    txn: Txn[memoryview], objects: Content, parts: dict[str, bytes], hints: bytes
) -> dict[str, Any] | None:
    """Every part of ``parts`` (name -> digest) hash-checked and decoded, or None.

    ``hints``: the record's hint block (content.py; b"" for none). A hinted heap
    entry is kept only once its bytes (past the object entry's kind, key length
    and key) hash to the part's digest; any other part goes through
    :meth:`Content.part` (the index and its kind-and-key compare, then the
    hash). None when any part is missing, fails its hash, does not decode as
    one msgpack value, or sits at a damaged location: the caller's
    part-by-part path names it; and when msgspec may not decode
    (:func:`~cpstore.store.decode.msgspec_safe`).
    """
    if _recursion_limit() > MSGSPEC_SAFE_LIMIT:  # not msgspec_safe(), inline
        return None  # a raised recursion limit: the part-by-part path (msgpack) decodes
    heap = objects.heap
    n = len(parts)
    if heap is not None and len(hints) == 4 * n:
        # Every part hinted and found at its hint (what a writer of this layout
        # leaves): each step over all parts at once, in C-level loops. A 0 seq
        # (no hint) names no entry (heap keys start at 1): the loop below then.
        get: Any = txn.get  # None for a missing entry: the TypeError below
        try:
            found = [get(key, None, heap)[_PART_AT:] for key in _keys_of(n)(hints)]
        except TypeError:
            pass  # a hint named no entry (None is not subscriptable)
        else:
            keys = list(parts.values())
            if list(map(_digest, found)) == keys:
                try:
                    values = list(map(decode_part, found))
                except DECODE_ERRORS:
                    return None
                if ALIKE_SCALARS.issuperset(map(type, values)) or all(map(decoded_alike, values)):
                    return dict(zip(parts, values))  # noqa: B905 - equal lengths
                return None  # msgpack would decode one otherwise: the slow path does
    return _read_parts_one_by_one(txn, objects, parts, hints)


def part_views(
    txn: Txn[memoryview], objects: Content, parts: dict[str, bytes], hints: bytes
) -> list[memoryview] | None:
    """The bytes of every part of ``parts``, in its order, each hash-checked against its
    digest, when every part is at its hinted heap entry (what a writer of this layout
    leaves); None for anything else (the caller then takes :func:`read_parts`' way).
    :func:`read_parts`' first steps without the decode: views into the txn's pages, which
    a caller decodes before the txn ends and never hands out. None too where
    :func:`read_parts` gives None without looking (a raised recursion limit): a caller
    then reads as it would have (the part-by-part path, through the index)."""
    heap = objects.heap
    n = len(parts)
    if heap is None or len(hints) != 4 * n or _recursion_limit() > MSGSPEC_SAFE_LIMIT:
        return None
    get: Any = txn.get  # None for a missing entry: the TypeError below
    try:
        found = [get(key, None, heap)[_PART_AT:] for key in _keys_of(n)(hints)]
    except TypeError:
        return None  # a hint named no entry (None is not subscriptable)
    return found if list(map(_digest, found)) == list(parts.values()) else None


def _read_parts_one_by_one(
    txn: Txn[memoryview], objects: Content, parts: dict[str, bytes], hints: bytes
) -> dict[str, Any] | None:
    """:func:`read_parts` part by part: each hint tried, then the index."""
    heap = objects.heap
    get = txn.get
    out: dict[str, Any] = {}
    try:
        seqs = hint_seqs(objects, hints, len(parts))
        for name, key, seq in zip(parts, parts.values(), seqs):  # noqa: B905 - equal lengths
            # checked_part inline (one call less per part on every read)
            view = None if seq is None else get(seq, None, heap)
            if view is not None:
                view = view[_PART_AT:]
                if _digest(view) != key:
                    view = None
            if view is None:
                view = objects.part(txn, key, b"", 0)  # the index, compared, then hashed
                if view is None:
                    return None
            value = decode_part(view)
            if type(value) not in ALIKE_SCALARS and not decoded_alike(value):
                return None  # msgpack would decode it otherwise: the slow path does
            out[name] = value
    except DECODE_ERRORS:
        return None
    except IntegrityError:
        return None  # a damaged location: the part-by-part path names it
    return out


#: part count -> the unpacker of a hint block's seqs (4-byte big-endian each).
_SEQS: dict[int, Any] = {}
#: part count -> the maker of a hint block's heap keys (see _keys_of).
_KEYS: dict[int, Any] = {}


def _keys_of(n: int) -> Any:
    """The function from a hint block of ``n`` seqs to their ``n`` 8-byte big-endian heap
    keys (0 gives the zero key, which names no entry), in three C calls: the seqs
    unpacked, packed as 8-byte ints, split into 8-byte strings (kept for 256 counts)."""
    keys = _KEYS.get(n)
    if keys is None:
        seqs = _seqs_of(n)
        pack = struct.Struct(f">{n}Q").pack
        split = struct.Struct("8s" * n).unpack  # n == 0: "" unpacks b"" to ()

        def keys(hints: bytes) -> tuple[bytes, ...]:
            result: tuple[bytes, ...] = split(pack(*seqs(hints)))
            return result

        if len(_KEYS) < 256:
            _KEYS[n] = keys
    return keys


def _seqs_of(n: int) -> Any:
    """The unpacker of a hint block of ``n`` seqs (kept for at most 256 part counts)."""
    unpack = _SEQS.get(n)
    if unpack is None:
        unpack = struct.Struct(f">{n}I").unpack
        if len(_SEQS) < 256:
            _SEQS[n] = unpack
    return unpack
