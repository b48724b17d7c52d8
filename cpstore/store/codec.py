"""Framed objects: the chunks of chunk trees, stored compressed when it saves space.

A *frame* holds one chunk of a chunked value (docs/format.md, "Framed
objects"). It is an object (in the heap, or ``objects``) under a 17-byte key, the
XXH3-128 of the chunk's *uncompressed* bytes followed by :data:`FRAME_TAG`,
so ids never depend on compression and a frame never shares a key with a
plain object (whose key is the 16-byte digest of its stored bytes).

Frame value, first byte the codec:

- ``0x00`` *stored*: the chunk bytes follow as they are;
- ``0x01`` *zstd*: the chunk's size as 4 bytes little-endian, then one zstd
  frame (RFC 8878) that inflates to exactly that many bytes.

Reads refuse a declared size above :data:`MAX_FRAME_CONTENT` before
inflating anything, inflate exactly the declared size, ignore bytes after the
zstd frame (a decompression bomb is an :class:`IntegrityError`, never
an allocation); verified reads then hash the inflated bytes against the key.
Engine-neutral: every backend stores these like any other object.

zstd comes from ``zstandard`` (python-zstandard): its compressor and
decompressor contexts are reusable, which makes a 1 KB chunk ~5x faster to
inflate than with ``compression.zstd``/``backports.zstd``, whose one-shot
calls build a context each time (benchmarks/bench_chunk.py, the codec row).
Contexts are per thread (they are not thread-safe) and survive ``fork()``.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable, Sequence
from itertools import repeat
from operator import getitem
from typing import Any

import zstandard

from cpstore.errors import IntegrityError
from cpstore.native.binding import digest, digest_small
from cpstore.native.records import DIGEST_SIZE

__all__ = [
    "CODEC_STORED",
    "CODEC_ZSTD",
    "FRAME_KEY_SIZE",
    "FRAME_TAG",
    "MAX_FRAME_CONTENT",
    "ZSTD_LEVEL",
    "check_frame",
    "decode_frame",
    "decoder",
    "encode_frame",
    "frame_content_size",
    "frame_key",
    "frame_sizes",
    "inflate_frames",
    "is_frame_key",
    "read_frame",
    "stored_key",
]

#: Last byte of a frame's key (after the 16-byte digest of its content).
FRAME_TAG = b"\x01"
FRAME_KEY_SIZE = DIGEST_SIZE + 1
CODEC_STORED = 0
CODEC_ZSTD = 1
#: Largest chunk a frame may hold; a larger declared size is refused unread.
#: cpstore writes chunks of at most 64 KiB (chunking.CHUNK_MAX).
MAX_FRAME_CONTENT = 1 << 20
#: zstd level: 3 is zstd's default, ~300 MB/s to compress a 1 KB text chunk here
#: and within a few percent of level 9's size on such chunks (benchmarks/bench_chunk.py).
ZSTD_LEVEL = 3
#: Chunks shorter than this are stored as they are: zstd's frame header and
#: our size field eat what it could save.
_MIN_TRY = 64
_SIZE_BYTES = 4
#: A zstd frame's stored header: the codec byte and the declared size.
_HEADER = struct.Struct("<BI")
_ZSTD_HEAD = _HEADER.size
_zstd_content_size = zstandard.frame_content_size
_ZstdError = zstandard.ZstdError
Decompressor = zstandard.ZstdDecompressor
#: Slices of a frame value: its codec byte, declared size, zstd frame, stored bytes.
_CODEC_AT = 0
_SIZE_FIELD = slice(1, _ZSTD_HEAD)
_ZSTD_BODY = slice(_ZSTD_HEAD, None)
_STORED_BODY = slice(1, None)
#: ``value[i]`` for ``map`` over frames of several buffer types (typed loosely for it).
_item: Callable[[Any, Any], Any] = getitem
_content_size: Callable[[Any], int] = _zstd_content_size


class _Contexts(threading.local):
    """One zstd compressor and decompressor per thread."""

    def __init__(self) -> None:
        self.compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
        self.decompressor = zstandard.ZstdDecompressor()


_CONTEXTS = _Contexts()


def frame_key(content_digest: bytes) -> bytes:
    """The ``objects`` key of the frame holding the chunk with this digest."""
    return bytes(content_digest) + FRAME_TAG


def is_frame_key(key: bytes | memoryview) -> bool:
    """True for a frame's 17-byte key (a plain object's key has 16 bytes)."""
    return len(key) == FRAME_KEY_SIZE and key[DIGEST_SIZE] == FRAME_TAG[0]


def encode_frame(content: bytes | memoryview, *, compress: bool = True) -> bytes:
    """The stored value of a chunk: zstd when that is smaller, else the bytes as they are."""
    raw = bytes(content)
    if len(raw) > MAX_FRAME_CONTENT:
        raise ValueError(f"chunk of {len(raw)} bytes exceeds the frame bound")
    if compress and len(raw) >= _MIN_TRY:
        packed = _CONTEXTS.compressor.compress(raw)
        if len(packed) + _SIZE_BYTES < len(raw):
            return bytes((CODEC_ZSTD,)) + len(raw).to_bytes(_SIZE_BYTES, "little") + packed
    return bytes((CODEC_STORED,)) + raw


def _bad(what: str, where: str, expected: object = None, got: object = None) -> IntegrityError:
    return IntegrityError(what, where=where, expected=expected, got=got)


def frame_content_size(value: bytes | memoryview, where: str) -> int:
    """Size of the chunk a frame holds, read from its header (nothing is inflated)."""
    if len(value) < 1:
        raise _bad("framed object is empty", where)
    codec = value[0]
    if codec == CODEC_STORED:
        return len(value) - 1
    if codec != CODEC_ZSTD:
        raise _bad("framed object has an unknown codec", where, expected=(0, 1), got=codec)
    if len(value) < _ZSTD_HEAD:
        raise _bad("framed object is shorter than its header", where, got=len(value))
    size: int = _HEADER.unpack_from(value)[1]
    if size > MAX_FRAME_CONTENT:
        raise _bad(
            "framed object declares more bytes than a frame may hold (refused before inflating)",
            where,
            expected=f"<= {MAX_FRAME_CONTENT}",
            got=size,
        )
    return size


def read_frame(
    key: bytes | None, value: bytes | memoryview, where: str, dctx: Decompressor | None = None
) -> bytes:
    """The chunk bytes of a frame, hash-checked against ``key`` unless ``key`` is None.

    The read path's one call per chunk (chunk trees call it once per frame
    with the thread's :func:`decompressor`): the codec and declared size are
    read with one ``struct`` call, the size is bounded and must equal the zstd
    header's before anything is inflated, and the output must be that size.
    """
    if len(value) >= _ZSTD_HEAD and value[0] == CODEC_ZSTD:
        size: int = _HEADER.unpack_from(value)[1]
        if size > MAX_FRAME_CONTENT:
            frame_content_size(value, where)  # raises: the bound, refused before inflating
        body = memoryview(value)[_ZSTD_HEAD:]  # zstandard reads any buffer: no copy
        try:
            # The decompressor allocates what the zstd header says: it must be
            # the declared (bounded) size before the frame is inflated.
            header_size = _zstd_content_size(body)
        except zstandard.ZstdError as exc:
            raise _bad("compressed frame has no valid zstd header", where, got=str(exc)) from None
        if header_size != size:
            raise _bad(
                "compressed frame's zstd header disagrees with its declared size",
                where,
                expected=size,
                got=header_size,
            )
        try:
            out: bytes = (dctx or _CONTEXTS.decompressor).decompress(body)
        except zstandard.ZstdError as exc:
            raise _bad("compressed frame does not inflate", where, got=str(exc)) from None
        if len(out) != size:  # zstandard already refuses this; kept as the contract
            raise _bad("compressed frame does not inflate to its size", where, size, len(out))
    elif len(value) >= 1 and value[0] == CODEC_STORED:
        out = bytes(value[1:])
    else:
        frame_content_size(value, where)  # raises: empty, unknown codec or short header
        raise _bad("framed object is malformed", where)  # not reached
    if key is not None and digest_small(out) != key[:DIGEST_SIZE]:
        raise _bad(
            "framed object does not match its digest",
            where,
            expected=bytes(key[:DIGEST_SIZE]).hex(),
            got=digest_small(out).hex(),
        )
    return out


def frame_sizes(values: Sequence[bytes | memoryview | None]) -> list[int] | None:
    """Chunk sizes the frames ``values`` declare, read from their headers, nothing inflated.

    None when a frame is missing (None), a header is malformed or declares more than
    :data:`MAX_FRAME_CONTENT`: :func:`read_frame` on each frame then names
    the bad one. The batch read path's first step (:func:`inflate_frames` is
    the second): its loops run in C (``map``), not one Python call per frame.
    """
    try:
        codecs = bytes(map(_item, values, repeat(_CODEC_AT)))
    except (IndexError, TypeError):  # an empty frame, or a missing one (None)
        return None
    n = len(codecs)
    if codecs.count(CODEC_ZSTD) == n:
        fields = b"".join(map(_item, values, repeat(_SIZE_FIELD)))
        if len(fields) != _SIZE_BYTES * n:  # a frame shorter than its header
            return None
        sizes = list(struct.unpack(f"<{n}I", fields))
    elif codecs.count(CODEC_STORED) == n:
        sizes = [len(v or b"") - 1 for v in values]
    else:  # mixed codecs (a short or incompressible chunk among compressed ones)
        try:
            sizes = [frame_content_size(v or b"", "") for v in values]
        except IntegrityError:
            return None
    if sizes and max(sizes) > MAX_FRAME_CONTENT:
        return None
    return sizes


def inflate_frames(
    values: Sequence[bytes | memoryview | None],
    sizes: list[int],
    digests: bytes | None,
    dctx: Decompressor | None = None,
) -> list[bytes] | None:
    """The chunk bytes of many frames, hash-checked against ``digests`` (None: unchecked).

    ``sizes`` are :func:`frame_sizes`' (bounded before anything is inflated);
    ``digests`` the chunks' 16-byte digests joined, in order. Each zstd frame's
    own header must declare its size, is inflated to exactly that size, and
    every chunk is hashed after inflating, as :func:`read_frame` does one at a
    time; the loops run in C. None when any check fails: the caller then reads
    the frames one by one with :func:`read_frame`, whose error names the chunk.
    """
    d = dctx or _CONTEXTS.decompressor
    try:
        codecs = bytes(map(_item, values, repeat(_CODEC_AT)))
        if codecs.count(CODEC_ZSTD) == len(codecs):
            bodies = list(map(_item, values, repeat(_ZSTD_BODY)))
            # Bounded sizes only reach the decompressor: it allocates what the
            # zstd header says, so that must be the declared size.
            if list(map(_content_size, bodies)) != sizes:
                return None
            out = list(map(d.decompress, bodies))
        elif codecs.count(CODEC_STORED) == len(codecs):
            out = list(map(bytes, map(_item, values, repeat(_STORED_BODY))))
        else:
            out = [read_frame(None, v or b"", "", d) for v in values]
    except (_ZstdError, IntegrityError, IndexError, TypeError):  # TypeError: a None frame
        return None
    if list(map(len, out)) != sizes:
        return None
    if digests is not None and b"".join(map(digest_small, out)) != digests:
        return None
    return out


def decoder() -> Decompressor:
    """This thread's zstd decompression context, for a loop of :func:`read_frame` calls.

    A context is used by one thread only (zstandard's contexts are not
    thread-safe): pass it to :func:`read_frame` in the thread that got it.
    """
    return _CONTEXTS.decompressor


def decode_frame(value: bytes | memoryview, where: str) -> bytes:
    """The chunk bytes of a frame; the size is bounded and checked, the digest is not."""
    return read_frame(None, value, where)


def check_frame(key: bytes, value: bytes | memoryview, where: str) -> bytes:
    """The chunk bytes of the frame under ``key``, hash-checked against the key."""
    return read_frame(bytes(key), value, where)


def stored_key(key: bytes | memoryview, value: bytes | memoryview) -> bytes:
    """The key ``value`` belongs under: a frame's chunk digest + tag, else the digest.

    A damaged frame gives the digest of its stored bytes, which matches no
    frame key, so a whole-store check reports it like any other bad object.
    """
    if is_frame_key(key):
        try:
            return frame_key(digest(decode_frame(value, "")))
        except IntegrityError:
            return digest(value)
    return digest(value)
