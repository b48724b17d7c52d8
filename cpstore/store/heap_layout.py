"""The layout-5 heap's entries (content.py's docstring describes them): their kinds, the
bytes an entry starts with, a checkpoint record's entry, and the next free location.
"""

from __future__ import annotations

from typing import Any

from cpstore.errors import IntegrityError
from cpstore.store.record_codec import KIND_COMPACT, compress_record

__all__ = [
    "HEADS",
    "KIND_OBJECT",
    "KIND_RECORD",
    "SEQ_SIZE",
    "ZERO4",
    "entry_header",
    "next_seq",
    "record_entry",
]

#: Heap entry kinds.
KIND_OBJECT = 0x6F  # "o"
KIND_RECORD = 0x63  # "c"
#: The size of a heap location (its key): an 8-byte big-endian seq.
SEQ_SIZE = 8
ZERO4 = bytes(4)
#: kind -> key length -> the two bytes an entry of that kind and key length starts with
HEADS = {
    kind: [bytes((kind, n)) for n in range(256)]
    for kind in (KIND_OBJECT, KIND_RECORD, KIND_COMPACT)
}


def entry_header(kind: int, key: bytes) -> bytes:
    """The bytes a heap entry of ``kind`` for ``key`` starts with."""
    return bytes((kind, len(key))) + bytes(key)


def record_entry(key: bytes, hints: bytes, record: bytes | memoryview) -> bytes:
    """A checkpoint record's heap entry (layout 6): compact (``r``, record_codec) when
    the record's frame is smaller, else ``c`` with the record as it is."""
    frame = compress_record(record)
    if frame is None:
        return HEADS[KIND_RECORD][len(key)] + key + (hints or ZERO4) + record
    return HEADS[KIND_COMPACT][len(key)] + key + (hints or ZERO4) + frame


def next_seq(txn: Any, heap: Any) -> bytes:
    """The next free heap key in a write txn: the last one + 1 (1 for an empty heap)."""
    with txn.cursor(heap) as cur:  # positional: py-lmdb's (db=None) without the keyword
        if not cur.last():
            return (1).to_bytes(SEQ_SIZE, "big")
        last = bytes(cur.key())
    if len(last) != SEQ_SIZE or last == b"\xff" * SEQ_SIZE:
        # A stray key (damage) sorts last: an append after it would be refused.
        raise IntegrityError(
            "the heap's last key is not a location a next entry can follow",
            where=f"heap/{last.hex()}",
            expected=f"an {SEQ_SIZE}-byte location below the largest",
            got=len(last),
        )
    return (int.from_bytes(last, "big") + 1).to_bytes(SEQ_SIZE, "big")
