"""Compact checkpoint-record heap entries (store layout 6, issue 12's disk target).

A layout-6 writer stores a checkpoint record (the ``checkpoints`` value: the
16-byte header and the canonical manifest) in its heap entry as one zstd frame
compressed with a fixed *raw-content dictionary* (:data:`RECORD_DICT`, version
:data:`RECORD_DICT_VERSION`), under its own entry kind::

    b"r" | key length (1) | key | hint count (4) | hints (4 each) | zstd frame

The frame is written without a dictionary id and without a checksum, and with
the content size declared. A reader accepts exactly that shape, checked before
anything is inflated (no other frame is ever decoded):

- the zstd magic (a skippable frame is refused), a frame header descriptor of a
  single-segment frame with its content size declared and no dictionary id, no
  checksum, no reserved bit (``0x20``, ``0x60``, ``0xa0`` or ``0xe0``);
- a declared content size from 16 bytes (a record's header) to
  :data:`MAX_RECORD_CONTENT` (a bomb's huge size is refused, never allocated);
- exactly one block, marked last, ending exactly at the entry's end (no second
  frame, no trailing bytes);
- inflated with the dictionary, to exactly the declared size.

The record's bytes are then checked against the checkpoint id by the usual
manifest hash (the readers' code path, unchanged). A record larger than
:data:`MAX_RECORD_CONTENT`, or one the frame would not make smaller, is written
as a layout-5 ``b"c"`` entry, which every layout still reads
(docs/format.md, "Compact checkpoint records").

The dictionary is part of the format: its bytes never change (a golden test
pins their digest). Another dictionary would be another entry kind.
"""

from __future__ import annotations

import struct
import threading

import zstandard

__all__ = [
    "KIND_COMPACT",
    "MAX_RECORD_CONTENT",
    "RECORD_DICT",
    "RECORD_DICT_VERSION",
    "RECORD_LEVEL",
    "compress_record",
    "inflate_record",
    "why_not",
]

#: Heap entry kind of a compact (dictionary-compressed) checkpoint record: ``r``.
KIND_COMPACT = 0x72
#: Version of :data:`RECORD_DICT`; entry kind ``r`` means version 1.
RECORD_DICT_VERSION = 1
#: zstd level of the writer (the reader does not depend on it): a negative level
#: compresses a ~500-byte record in ~1.7 us, within a few bytes of level 1's size.
RECORD_LEVEL = -5
#: Largest record content a compact entry may declare: one zstd block (128 KiB).
MAX_RECORD_CONTENT = 128 * 1024
#: Shortest: a record is at least its 16-byte header.
_MIN_RECORD_CONTENT = 16

#: The raw-content dictionary, version 1: a typical manifest's fixed byte runs in
#: manifest order (digests zeroed), 212 bytes, and nothing of any workload (no part
#: names; docs/format.md lists them in hex).
RECORD_DICT = (
    b"\x8f\xa4step\xa4tags\x90\xa5state\x84\xa4kind\xa5parts\xa5parts"
    + b"\xa6digest\xc4\x10"
    + bytes(16)
    + b"\xa7chunked\x80\xa6branch\xa4main\xa6parent\xc4\x10"
    + bytes(16)
    + b"\xa6run_id\xa6tokens\xc0\xa7cpstore\x01\xa7effects\xc0\xa7harness\xc0"
    + b"\xa8metadata\x80\xaacall_graph\xc0\xaatranscript\xc0\xacobservations\xc0"
    + b"\xadledger_sealed\xc3"
)

_MAGIC = b"\x28\xb5\x2f\xfd"
#: Frame header descriptor -> (content size field length, value offset): the only
#: descriptors a compact record's frame may have: single segment, the content size
#: declared (1, 2, 4 or 8 bytes), no checksum, no dictionary id, reserved bits clear.
_DESCRIPTORS = {0x20: (1, 0), 0x60: (2, 256), 0xA0: (4, 0), 0xE0: (8, 0)}
_MAGIC_DESCRIPTOR = struct.Struct("<IB")
_MAGIC_INT = int.from_bytes(_MAGIC, "little")
#: descriptor -> (its content size and the block header's 3 bytes + 1 in one read,
#: where the block header starts, the size's value offset)
_FIELDS = {
    d: (struct.Struct("<5x" + "BHIQ"[n.bit_length() - 1] + "I"), 5 + n, add)
    for d, (n, add) in _DESCRIPTORS.items()
}
#: Block header's low 3 bits (last block, type) -> bytes its content takes in the
#: frame (-1: the block size field's): raw or compressed (the field), RLE (1 byte).
_LAST_BLOCKS = {1: -1, 3: 1, 5: -1}
_DICT = zstandard.ZstdCompressionDict(RECORD_DICT, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
_DICT.precompute_compress(level=RECORD_LEVEL)
_ZstdError = zstandard.ZstdError


class _Contexts(threading.local):
    """One compressor and decompressor per thread (zstandard's are not thread-safe)."""

    def __init__(self) -> None:
        self.compressor = zstandard.ZstdCompressor(
            level=RECORD_LEVEL,
            dict_data=_DICT,
            write_checksum=False,
            write_content_size=True,
            write_dict_id=False,
        )
        self.decompressor = zstandard.ZstdDecompressor(dict_data=_DICT)


_CONTEXTS = _Contexts()
# The dictionary's decompression tables are made on first use: once here, at import,
# so threads never race to make them (a round trip that also checks the codec).
_SAMPLE = RECORD_DICT[:64]
if _CONTEXTS.decompressor.decompress(_CONTEXTS.compressor.compress(_SAMPLE)) != _SAMPLE:
    raise ImportError("zstandard does not round-trip the record dictionary")


def _declared(frame: bytes | memoryview) -> int:
    """The record size ``frame`` declares when its shape is a compact record's (module
    docstring: headers only, nothing inflated); -1 otherwise."""
    n = len(frame)
    if n < 10:
        return -1
    magic, descriptor = _MAGIC_DESCRIPTOR.unpack_from(frame)
    field = _FIELDS.get(descriptor)
    if field is None or magic != _MAGIC_INT or n < field[1] + 4:
        return -1
    size, block = field[0].unpack_from(frame)
    block &= 0xFFFFFF
    size += field[2]
    last = _LAST_BLOCKS.get(block & 7, 0)
    if last == 0 or not _MIN_RECORD_CONTENT <= size <= MAX_RECORD_CONTENT:
        return -1
    return size if field[1] + 3 + (last if last > 0 else block >> 3) == n else -1


def frame_problem(frame: bytes | memoryview) -> tuple[str, object, object] | None:
    """(what, expected, got) of what makes ``frame`` not a compact record's frame; None
    when its shape is one (checked from its headers alone, before any inflating)."""
    if bytes(frame[:4]) != _MAGIC:
        return "not a zstd frame", _MAGIC.hex(), bytes(frame[:4]).hex()
    if len(frame) < 9:
        return "cut short in its zstd frame header", ">= 9 bytes", len(frame)
    field = _DESCRIPTORS.get(frame[4])
    if field is None:
        return (
            "its zstd frame is not single-segment with a declared size, or has a "
            "dictionary id, a checksum or a reserved bit",
            " or ".join(f"{d:#04x}" for d in _DESCRIPTORS),
            f"{frame[4]:#04x}",
        )
    at = 5 + field[0]
    size = int.from_bytes(frame[5:at], "little") + field[1]
    if not _MIN_RECORD_CONTENT <= size <= MAX_RECORD_CONTENT:
        return (
            "its zstd frame declares a record size out of bounds",
            f"{_MIN_RECORD_CONTENT}..{MAX_RECORD_CONTENT}",
            size,
        )
    if len(frame) < at + 4:  # a block header and at least one byte: _declared's bound
        return "cut short before its zstd block", f">= {at + 4} bytes", len(frame)
    block = int.from_bytes(frame[at : at + 3], "little")
    if block & 7 not in _LAST_BLOCKS:
        return "its zstd frame is not one last block", "one last block", f"{block:#08x}"
    last = _LAST_BLOCKS[block & 7]
    end = at + 3 + (last if last > 0 else block >> 3)
    if end != len(frame):
        return "its zstd frame does not end where the entry ends", end, len(frame)
    return None


def compress_record(record: bytes | memoryview) -> bytes | None:
    """The zstd frame of a compact entry for ``record``; None when the record is
    to be stored as it is (too large, or not made smaller)."""
    if not _MIN_RECORD_CONTENT <= len(record) <= MAX_RECORD_CONTENT:
        return None
    frame: bytes = _CONTEXTS.compressor.compress(record)
    if len(frame) >= len(record) or _declared(frame) != len(record):
        return None  # a frame no reader would take is never written
    return frame


def inflate_record(frame: bytes | memoryview) -> bytes | None:
    """The record bytes of a compact entry's frame; None when the frame is not one a
    writer makes or does not inflate to its declared size (:func:`why_not` says why).
    The read path's one call per compact record; the shape is :func:`_declared`'s.
    A view is copied first: what is checked is what is inflated, even where the bytes
    under it can change (a read-only open without the lock file beside a writer: the
    declared size zstd allocates is then never one the check did not see)."""
    if type(frame) is not bytes:
        frame = bytes(frame)
    size = _declared(frame)
    if size < 0:
        return None
    try:
        out: bytes = _CONTEXTS.decompressor.decompress(frame)
    except _ZstdError:
        return None
    return out if len(out) == size else None


def why_not(frame: bytes | memoryview) -> tuple[str, object, object]:
    """(what, expected, got) of why :func:`inflate_record` refused ``frame``."""
    frame = bytes(frame)  # checked and inflated: the same bytes (inflate_record says why)
    problem = frame_problem(frame)
    if problem is not None:
        return problem
    try:
        out = zstandard.ZstdDecompressor(dict_data=_DICT).decompress(frame)
    except _ZstdError as exc:
        return "its zstd frame does not inflate", "a record dictionary frame", str(exc)
    return "its zstd frame does not inflate to its declared size", _declared(frame), len(out)
