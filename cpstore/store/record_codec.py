"""Compact checkpoint-record heap entries (store layout 6, issue 12's disk target).

A layout-6 writer stores a checkpoint record (the ``checkpoints`` value: the
16-byte header and the canonical manifest) in its heap entry as one zstd frame
compressed with a fixed *raw-content dictionary* (:data:`RECORD_DICT`, version
:data:`RECORD_DICT_VERSION`), under its own entry kind::

    b"r" | key length (1) | key | hint count (4) | hints (4 each) | zstd frame

The frame is written without a dictionary id and without a checksum, and with
the content size declared. A reader accepts exactly that shape, checked before
anything is inflated (no other frame is ever decoded):

- the zstd magic (a skippable frame is refused), a frame header descriptor with
  no dictionary id, no checksum and the reserved bit clear;
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

_CHANNELS = b"".join(b"\xa8channel%d\xc4\x10" % i + bytes(16) for i in range(10))
#: The raw-content dictionary, version 1: a typical manifest's fixed byte runs in
#: manifest order (digests zeroed), 483 bytes (docs/format.md lists them in hex).
RECORD_DICT = (
    b"\x8f\xa4step\xa4tags\x90\xa5state\x84\xa4kind\xa5parts\xa5parts\x8a"
    + _CHANNELS
    + b"\xa6digest\xc4\x10"
    + bytes(16)
    + b"\xa7chunked\x80\xa6branch\xa4main\xa6parent\xc4\x10"
    + bytes(16)
    + b"\xa6run_id\xa6tokens\xc0\xa7cpstore\x01\xa7effects\xc0\xa7harness\xc0"
    + b"\xa8metadata\x80\xaacall_graph\xc0\xaatranscript\xc0\xacobservations\xc0"
    + b"\xadledger_sealed\xc3"
)

_MAGIC = b"\x28\xb5\x2f\xfd"
#: Frame header descriptor bits a compact record's frame must have clear:
#: reserved (3), content checksum (2), dictionary id flag (1-0).
_DESCRIPTOR_REFUSED = 0x0F
_BLOCK_RLE = 1
_BLOCK_RESERVED = 3

_DICT = zstandard.ZstdCompressionDict(RECORD_DICT, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
_DICT.precompute_compress(level=RECORD_LEVEL)
_frame_header_size = zstandard.frame_header_size
_frame_content_size = zstandard.frame_content_size
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


def frame_problem(frame: bytes | memoryview) -> tuple[str, object, object] | None:
    """(what, expected, got) of what makes ``frame`` not a compact record's frame; None
    when its shape is one: checked from its headers alone, before any inflating."""
    if bytes(frame[:4]) != _MAGIC:
        return "not a zstd frame", _MAGIC.hex(), bytes(frame[:4]).hex()
    if len(frame) < 6:
        return "cut short in its zstd frame header", ">= 6 bytes", len(frame)
    descriptor = frame[4]
    if descriptor & _DESCRIPTOR_REFUSED:
        return (
            "its zstd frame has a dictionary id, a checksum or a reserved bit",
            "descriptor bits 0-3 clear",
            f"{descriptor:#04x}",
        )
    try:
        start = _frame_header_size(frame)
        size = _frame_content_size(frame)
    except _ZstdError as exc:
        return "its zstd frame header does not parse", "a zstd frame header", str(exc)
    if not _MIN_RECORD_CONTENT <= size <= MAX_RECORD_CONTENT:
        return (
            "its zstd frame declares a record size out of bounds",
            f"{_MIN_RECORD_CONTENT}..{MAX_RECORD_CONTENT}",
            size,
        )
    if len(frame) < start + 3:
        return "cut short before its zstd block", f">= {start + 3} bytes", len(frame)
    block = int.from_bytes(frame[start : start + 3], "little")
    kind = block >> 1 & 3
    end = start + 3 + (1 if kind == _BLOCK_RLE else block >> 3)
    if not block & 1 or kind == _BLOCK_RESERVED:
        return "its zstd frame is not one last block", "one last block", f"{block:#08x}"
    if end != len(frame):
        return "its zstd frame does not end where the entry ends", end, len(frame)
    return None


def compress_record(record: bytes | memoryview) -> bytes | None:
    """The zstd frame of a compact entry for ``record``; None when the record is
    to be stored as it is (too large, or not made smaller)."""
    if not _MIN_RECORD_CONTENT <= len(record) <= MAX_RECORD_CONTENT:
        return None
    frame: bytes = _CONTEXTS.compressor.compress(record)
    if len(frame) >= len(record) or frame_problem(frame) is not None:
        return None  # a frame no reader would take is never written
    return frame


def inflate_record(frame: bytes | memoryview) -> tuple[bytes | None, tuple[str, object, object]]:
    """(record bytes, ("", None, None)) of a compact entry's frame, or
    (None, (what, expected, got)) when the frame is not one a writer makes
    or does not inflate to its declared size."""
    problem = frame_problem(frame)
    if problem is not None:
        return None, problem
    try:
        out: bytes = _CONTEXTS.decompressor.decompress(frame)
    except _ZstdError as exc:
        return None, ("its zstd frame does not inflate", "a record dictionary frame", str(exc))
    size = _frame_content_size(frame)
    if len(out) != size:  # zstandard refuses this already; kept as the contract
        return None, ("its zstd frame does not inflate to its declared size", size, len(out))
    return out, ("", None, None)
