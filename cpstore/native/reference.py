"""Pure-Python twins of every native function: the executable spec.

Each function here has the same signature and result as its namesake in
:mod:`cpstore.native.binding`; the property tests prove they agree byte for byte and
the benchmarks use these as the baseline. They are plain loops on purpose.
The XXH3-128 primitive itself comes from python-xxhash (the raw limit the
native core is measured against); everything built on it is written out here.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

import xxhash

from cpstore.native.args import (
    Buffer,
    ByteOrder,
    as_bytes_view,
    as_offsets,
    check_offsets,
    field_mask,
    writable_view,
)
from cpstore.native.chunking import CHUNK_AVG, CHUNK_MAX, CHUNK_MIN
from cpstore.native.chunking import cut_points as chunk_cuts
from cpstore.native.records import (
    NONE,
    RECORD_FIELDS,
    RECORD_SIZE,
    Digest,
    Divergence,
    DivergenceKind,
    Provenance,
    RecordType,
    TokenScan,
    field_names,
    record_count,
    record_type,
    seq_prefix,
    seq_trailer,
)

__all__ = [
    "SequenceHasher",
    "chunk_cuts",
    "chunk_digests",
    "digest",
    "digest_batch",
    "digest_batch_into",
    "first_divergence",
    "scan_tokens",
    "sequence_digest",
]


def digest(data: Buffer) -> Digest:
    """XXH3-128 of ``data`` (16 bytes, big-endian)."""
    return Digest(xxhash.xxh3_128_digest(as_bytes_view(data, "data")))


def digest_batch(
    data: Buffer, offsets: Iterable[int] | Buffer, *, byteorder: ByteOrder = "native"
) -> bytes:
    """Digests of ``data[offsets[i]:offsets[i+1]]`` for each i, concatenated."""
    view = as_bytes_view(data, "data")
    offs = as_offsets(offsets, byteorder)
    check_offsets(offs, len(view))
    return b"".join(
        xxhash.xxh3_128_digest(view[offs[i] : offs[i + 1]]) for i in range(len(offs) - 1)
    )


def digest_batch_into(
    data: Buffer,
    offsets: Iterable[int] | Buffer,
    out: bytearray | memoryview,
    *,
    byteorder: ByteOrder = "native",
) -> int:
    """Write the batch digests into the caller's writable ``out``; returns n."""
    view = as_bytes_view(data, "data")
    offs = as_offsets(offsets, byteorder)
    n = len(offs) - 1
    target = writable_view(out, 16 * n, "out")
    target[: 16 * n] = digest_batch(view, offs)
    return n


class SequenceHasher:
    """Streaming sequence digest: feed record bytes in any chunks."""

    def __init__(self, rtype: RecordType | int) -> None:
        self._type = record_type(rtype)
        self._size = RECORD_SIZE[self._type]
        self._hash = xxhash.xxh3_128(seq_prefix(self._type))
        self._bytes = 0

    @property
    def record_type(self) -> RecordType:
        """The record type being hashed."""
        return self._type

    @property
    def count(self) -> int:
        """Complete records hashed so far."""
        return self._bytes // self._size

    def update(self, data: Buffer) -> None:
        """Hash more record bytes; a record may be split across calls."""
        view = as_bytes_view(data, "data")
        self._hash.update(view)
        self._bytes += len(view)

    def digest(self) -> Digest:
        """The digest of the records so far; hashing may go on afterwards."""
        count = record_count(self._type, self._bytes, where="sequence so far")
        final = self._hash.copy()
        final.update(seq_trailer(count))
        return Digest(final.digest())


def sequence_digest(rtype: RecordType | int, records: Buffer) -> Digest:
    """Sequence digest of a whole packed record array."""
    rt = record_type(rtype)
    view = as_bytes_view(records, "records")
    record_count(rt, len(view), where="records")
    hasher = SequenceHasher(rt)
    hasher.update(view)
    return hasher.digest()


def first_divergence(
    rtype: RecordType | int,
    a: Buffer,
    b: Buffer,
    *,
    fields: Iterable[str] | None = None,
) -> Divergence:
    """Where packed arrays ``a`` and ``b`` first differ in the named fields."""
    rt = record_type(rtype)
    mask = field_mask(rt, fields)
    va, vb = as_bytes_view(a, "a"), as_bytes_view(b, "b")
    na = record_count(rt, len(va), where="a")
    nb = record_count(rt, len(vb), where="b")
    size = RECORD_SIZE[rt]
    layout = RECORD_FIELDS[rt]
    for i in range(min(na, nb)):
        ra = va[i * size : (i + 1) * size]
        rb = vb[i * size : (i + 1) * size]
        differ = 0
        for bit, (_, off, width) in enumerate(layout):
            if mask >> bit & 1 and ra[off : off + width] != rb[off : off + width]:
                differ |= 1 << bit
        if differ:
            return Divergence(DivergenceKind.RECORD, i, field_names(rt, differ), na, nb)
    if na != nb:
        return Divergence(DivergenceKind.COUNT, min(na, nb), (), na, nb)
    return Divergence(DivergenceKind.EQUAL, None, (), na, nb)


_TOKEN_HEAD = struct.Struct("<QIB3s")


def scan_tokens(records: Buffer) -> TokenScan:
    """One pass over a packed token log (see :class:`TokenScan`)."""
    view = as_bytes_view(records, "records")
    count = record_count(RecordType.TOKEN, len(view), where="records")
    size = RECORD_SIZE[RecordType.TOKEN]
    first_live = first_break = first_bad = NONE
    live = 0
    for i in range(count):
        seq, kind, prov, reserved = _TOKEN_HEAD.unpack_from(view, i * size)
        if prov != Provenance.RECORDED:
            live += 1
            if first_live == NONE:
                first_live = i
        if seq != i and first_break == NONE:
            first_break = i
        if first_bad == NONE and (kind == 0 or prov not in (1, 2) or reserved != b"\0\0\0"):
            first_bad = i
    return TokenScan(
        count=count,
        first_live=None if first_live == NONE else first_live,
        live_count=live,
        first_seq_break=None if first_break == NONE else first_break,
        first_malformed=None if first_bad == NONE else first_bad,
    )


def chunk_digests(
    data: Buffer,
    min_size: int = CHUNK_MIN,
    avg_size: int = CHUNK_AVG,
    max_size: int = CHUNK_MAX,
) -> tuple[list[int], bytes]:
    """(chunk end offsets, their digests concatenated); ``chunk_cuts`` is chunking.cut_points."""
    view = as_bytes_view(data, "data")
    cuts = chunk_cuts(view, min_size, avg_size, max_size)
    starts = [0, *cuts][: len(cuts)]  # no chunks (and no digests) for empty data
    return cuts, b"".join(digest(view[a:b]) for a, b in zip(starts, cuts, strict=True))
