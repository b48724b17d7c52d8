"""The one module that touches the compiled core (``ffi``/``lib``).

Every argument is checked here before the C call, whole buffers are passed
(never one call per record), and every status code is checked on the line
after the call. Signatures and results match :mod:`cpstore.native.reference`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from xxhash import xxh3_128_digest as _xxh3_128

from cpstore.errors import InvalidInputError, NativeError, RecordFormatError
from cpstore.native.args import (
    Buffer,
    ByteOrder,
    as_bytes_view,
    as_offsets,
    check_offsets,
    field_mask,
    split_args,
    token_columns,
    writable_view,
)
from cpstore.native.chunking import CHUNK_AVG, CHUNK_MAX, CHUNK_MIN
from cpstore.native.chunking import check_params as check_chunk_params
from cpstore.native.records import (
    NONE,
    RECORD_FIELDS,
    RECORD_SIZE,
    Digest,
    Divergence,
    DivergenceKind,
    RecordType,
    TokenScan,
    field_names,
    record_count,
    record_type,
)

try:
    from cpstore._cpstore_native import ffi, lib
except ImportError as exc:  # pragma: no cover - a packaging fault, not input
    raise ImportError(
        "cpstore's native core is not built; run `make setup` (or `pip install -e .`) "
        f"from the source tree ({exc})"
    ) from exc

__all__ = [
    "SIMD_LEVELS",
    "SequenceHasher",
    "chunk_cuts",
    "chunk_digests",
    "digest",
    "digest_batch",
    "digest_batch_into",
    "digest_small",
    "first_divergence",
    "kept_view",
    "native_digest",
    "scan_tokens",
    "select_simd",
    "sequence_digest",
    "simd_path",
]

_MESSAGES = {
    lib.CP_ERR_NULL: "a required buffer was NULL",
    lib.CP_ERR_RECORD_TYPE: "unknown record type",
    lib.CP_ERR_MISALIGNED: "length is not a whole number of records",
    lib.CP_ERR_OFFSETS: "offsets decrease or run past the data",
    lib.CP_ERR_STATE: "streaming state is not initialised or was moved",
    lib.CP_ERR_PARTIAL: "a record is incomplete",
    lib.CP_ERR_UNSUPPORTED: "this CPU lacks that instruction set",
    lib.CP_ERR_CHUNK_PARAMS: "chunk sizes are out of bounds",
    lib.CP_ERR_CHUNK_SPACE: "more chunks than the cuts array holds",
}

#: Kernel choices for :func:`select_simd` (``CP_SIMD_*``).
SIMD_LEVELS = {
    "auto": lib.CP_SIMD_AUTO,
    "baseline": lib.CP_SIMD_BASELINE,
    "avx2": lib.CP_SIMD_AVX2,
    "avx512": lib.CP_SIMD_AVX512,
}

# The C layouts must be the ones _records documents; a mismatch is a build
# fault that would silently corrupt every comparison, so refuse to load.
for _rt in RecordType:
    if lib.cp_record_size(_rt) != RECORD_SIZE[_rt] or lib.cp_record_field_count(_rt) != len(
        RECORD_FIELDS[_rt]
    ):
        raise ImportError(f"native core disagrees with _records on {_rt.name} layout")


def _check(rc: int, call: str) -> None:
    if rc != lib.CP_OK:
        raise NativeError(
            f"native {call} failed: {_MESSAGES.get(rc, 'unknown status')}",
            where=call,
            expected=lib.CP_OK,
            got=rc,
        )


def _buf(view: memoryview) -> Any:
    # from_buffer keeps a reference to the view for the lifetime of the cdata;
    # an empty view still yields a valid (non-dereferenced) pointer.
    return ffi.from_buffer("uint8_t[]", view)


def kept_view(view: memoryview, on_release: Callable[[Any], None]) -> memoryview:
    """A read-only view of ``view``'s bytes (no copy) that calls ``on_release`` once the
    last object made from it is gone: the view, every slice, ``memoryview()`` and cast of
    it and every export (``numpy.frombuffer``, ``pickle.PickleBuffer``). Python 3.11 has no
    ``__buffer__``; cffi gives one: those objects share one managed buffer, which holds
    cffi's buffer object, which holds the ``ffi.gc`` cdata, which holds the export of
    ``view`` (keeping its memory) and runs ``on_release`` when freed, on the thread that
    drops the last reference or collects it (a finalizer: it must not block). ``view``
    stays exported until then (its ``release()`` raises BufferError). The result's ``.obj``
    is cffi's buffer, which is writable: writing through it into a read-only mapping
    kills the process (SIGSEGV), as any raw pointer does."""
    tracked = ffi.gc(ffi.from_buffer(view), on_release)
    return memoryview(_buffer(tracked, len(view))).toreadonly()


def simd_path() -> str:
    """The XXH3 kernel in use: "avx512", "avx2", "sse2" or "scalar"."""
    return str(ffi.string(lib.cp_simd_path()).decode("ascii"))


def select_simd(level: str) -> None:
    """Choose the digest kernel ("auto", "baseline", "avx2", "avx512").

    Every kernel gives the same bytes; this exists for tests and benchmarks.
    """
    if level not in SIMD_LEVELS:
        raise InvalidInputError("unknown SIMD level", expected=sorted(SIMD_LEVELS), got=level)
    rc = lib.cp_simd_select(SIMD_LEVELS[level])
    if rc == lib.CP_ERR_UNSUPPORTED:
        raise InvalidInputError("this CPU lacks the asked instruction set", got=level)
    _check(rc, "cp_simd_select")


_new = ffi.new
_buffer = ffi.buffer
_cp_digest = lib.cp_digest

#: Below this size :func:`digest` hands the buffer to python-xxhash's one-shot
#: XXH3-128 (the same function, its reference twin) instead of the C core: a
#: cffi call costs ~0.6-1.2 us of argument handling, python-xxhash ~0.03 us,
#: and every store read hashes a manifest and several small objects. Above
#: it the bytes dominate and the selected native kernel is used. Measured in
#: benchmarks/bench_core.py (``test_digest_small_*``); 64 KiB is the store's chunk size.
SMALL_DIGEST = 64 * 1024


#: XXH3-128 of a C-contiguous buffer, straight to python-xxhash: for loops
#: over many small objects (store reads), where even :func:`digest`'s type
#: dispatch shows. Same bytes as :func:`digest`; raises TypeError or
#: BufferError on anything that is not a contiguous buffer.
digest_small: Callable[[Buffer], bytes] = _xxh3_128


def digest(data: Buffer) -> Digest:
    """XXH3-128 of ``data`` (16 bytes, big-endian; equals ``xxh3_128_digest``)."""
    if (type(data) is bytes or type(data) is memoryview) and len(data) < SMALL_DIGEST:
        # python-xxhash refuses a strided view with TypeError; send those on.
        try:
            return Digest(_xxh3_128(data))
        except (TypeError, BufferError):
            pass
    return native_digest(data)


def native_digest(data: Buffer) -> Digest:
    """:func:`digest` always through the C core's selected kernel (any size)."""
    # The common case (bytes) skips the view and passes the object itself:
    # cffi hands C a pointer to its immutable storage, no copy.
    out = _new("uint8_t[16]")
    if type(data) is bytes:
        rc = _cp_digest(data, len(data), out)
    else:
        view = as_bytes_view(data, "data")
        rc = _cp_digest(_buf(view), len(view), out)
    if rc:
        _check(rc, "cp_digest")
    return Digest(_buffer(out)[:])


def _batch_args(
    data: Buffer, offsets: Iterable[int] | Buffer, byteorder: ByteOrder
) -> tuple[memoryview, Any, int]:
    view = as_bytes_view(data, "data")
    offs = as_offsets(offsets, byteorder)  # native uint64s: what the C reads
    return view, offs, len(offs) - 1


def _batch(view: memoryview, offs: Any, n: int, out: Any) -> None:
    rc = lib.cp_digest_batch(_buf(view), len(view), ffi.from_buffer("uint64_t[]", offs), n, out)
    if rc == lib.CP_ERR_OFFSETS:
        check_offsets(offs, len(view))  # raises with the index and values
    _check(rc, "cp_digest_batch")


def digest_batch(
    data: Buffer, offsets: Iterable[int] | Buffer, *, byteorder: ByteOrder = "native"
) -> bytes:
    """Digests of ``data[offsets[i]:offsets[i+1]]`` for each i, concatenated (n*16 bytes).

    ``byteorder`` is the layout of an offsets *buffer*: ``"native"``, or
    ``"little"`` for offsets as cpstore stores them (converted on a
    big-endian host).
    """
    view, offs, n = _batch_args(data, offsets, byteorder)
    out = ffi.new("uint8_t[]", 16 * n) if n else ffi.NULL
    _batch(view, offs, n, out)
    return ffi.buffer(out, 16 * n)[:] if n else b""


def digest_batch_into(
    data: Buffer,
    offsets: Iterable[int] | Buffer,
    out: bytearray | memoryview,
    *,
    byteorder: ByteOrder = "native",
) -> int:
    """Write the batch digests into the caller's writable ``out``; returns n.

    The allocation-free form of :func:`digest_batch` for engines that hash
    batch after batch into one reused buffer.
    """
    view, offs, n = _batch_args(data, offsets, byteorder)
    target = writable_view(out, 16 * n, "out")
    _batch(view, offs, n, ffi.from_buffer("uint8_t[]", target, require_writable=True))
    return n


class SequenceHasher:
    """Streaming sequence digest: feed record bytes in any chunks."""

    def __init__(self, rtype: RecordType | int) -> None:
        self._type = record_type(rtype)
        self._state = ffi.new("cp_seq_state *")
        _check(lib.cp_seq_init(self._state, self._type), "cp_seq_init")

    @property
    def record_type(self) -> RecordType:
        """The record type being hashed."""
        return self._type

    @property
    def count(self) -> int:
        """Complete records hashed so far."""
        count = ffi.new("uint64_t *")
        _check(lib.cp_seq_count(self._state, count), "cp_seq_count")
        return int(count[0])

    def update(self, data: Buffer) -> None:
        """Hash more record bytes; a record may be split across calls."""
        view = as_bytes_view(data, "data")
        _check(lib.cp_seq_update(self._state, _buf(view), len(view)), "cp_seq_update")

    def digest(self) -> Digest:
        """The digest of the records so far; hashing may go on afterwards."""
        out = ffi.new("uint8_t[16]")
        rc = lib.cp_seq_final(self._state, out)
        if rc == lib.CP_ERR_PARTIAL:
            size = RECORD_SIZE[self._type]
            raise RecordFormatError(
                f"sequence ends inside a {self._type.name.lower()} record",
                where="sequence so far",
                expected=f"a multiple of {size} bytes",
                got=f"{self.count} records and a partial one",
            )
        _check(rc, "cp_seq_final")
        return Digest(ffi.buffer(out, 16)[:])


def sequence_digest(rtype: RecordType | int, records: Buffer) -> Digest:
    """Sequence digest of a whole packed record array."""
    rt = record_type(rtype)
    view = as_bytes_view(records, "records")
    record_count(rt, len(view), where="records")
    out = ffi.new("uint8_t[16]")
    _check(lib.cp_seq_digest(rt, _buf(view), len(view), out), "cp_seq_digest")
    return Digest(ffi.buffer(out, 16)[:])


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
    record_count(rt, len(va), where="a")
    record_count(rt, len(vb), where="b")
    out = ffi.new("cp_divergence *")
    rc = lib.cp_first_divergence(rt, mask, _buf(va), len(va), _buf(vb), len(vb), out)
    _check(rc, "cp_first_divergence")
    kind = DivergenceKind(out.kind)
    return Divergence(
        kind,
        None if kind is DivergenceKind.EQUAL else int(out.index),
        field_names(rt, out.fields),
        int(out.count_a),
        int(out.count_b),
    )


def _index(value: int) -> int | None:
    return None if value == NONE else int(value)


def scan_tokens(records: Buffer) -> TokenScan:
    """One pass over a packed token log (see :class:`TokenScan`)."""
    view = as_bytes_view(records, "records")
    record_count(RecordType.TOKEN, len(view), where="records")
    out = ffi.new("cp_token_scan *")
    _check(lib.cp_scan_tokens(_buf(view), len(view), out), "cp_scan_tokens")
    return TokenScan(
        count=int(out.count),
        first_live=_index(out.first_live),
        live_count=int(out.live_count),
        first_seq_break=_index(out.first_seq_break),
        first_malformed=_index(out.first_malformed),
    )


# -- issue 16: content-defined chunking (csrc/cp_chunk.c) ----------------------------


def chunk_cuts(
    data: Buffer,
    min_size: int = CHUNK_MIN,
    avg_size: int = CHUNK_AVG,
    max_size: int = CHUNK_MAX,
) -> list[int]:
    """End offsets of the content-defined chunks of ``data`` (twin of ``chunking.cut_points``)."""
    lo, avg, hi = check_chunk_params(min_size, avg_size, max_size)
    view = as_bytes_view(data, "data")
    if not view:
        return []
    cap = len(view) // lo + 1  # every chunk but the last has >= min_size bytes
    cuts = _new("uint64_t[]", cap)
    count = _new("size_t *")
    rc = lib.cp_chunk_cuts(_buf(view), len(view), lo, avg, hi, cuts, cap, count)
    _check(rc, "cp_chunk_cuts")
    return list(cuts[0 : count[0]])


def chunk_digests(
    data: Buffer,
    min_size: int = CHUNK_MIN,
    avg_size: int = CHUNK_AVG,
    max_size: int = CHUNK_MAX,
) -> tuple[list[int], bytes]:
    """(chunk end offsets, their digests concatenated: 16 bytes per chunk) in one C call
    that hashes each chunk as it is cut (twin of ``reference.chunk_digests``)."""
    lo, avg, hi = check_chunk_params(min_size, avg_size, max_size)
    view = as_bytes_view(data, "data")
    if not view:
        return [], b""
    cap = len(view) // lo + 1  # every chunk but the last has >= min_size bytes
    cuts = _new("uint64_t[]", cap)
    out = _new("uint8_t[]", 16 * cap)
    count = _new("size_t *")
    rc = lib.cp_chunk_digests(_buf(view), len(view), lo, avg, hi, cuts, out, cap, count)
    _check(rc, "cp_chunk_digests")
    n = int(count[0])
    return list(cuts[0:n]), _buffer(out, 16 * n)[:]


# -- streaming ingest (issue 13): member splitters of cp_ingest.c ---------------

from array import array  # noqa: E402

from cpstore.native.ingest_reference import NUMBER_TYPES, SplitResult  # noqa: E402

__all__ += ["SplitResult", "json_split", "msgpack_split"]

_SPLIT_ERRORS = {
    lib.CP_ERR_TRUNCATED: "input ends inside a member",
    lib.CP_ERR_SYNTAX: "a byte no msgpack item starts with",
}


def _split_args(
    data: Buffer, start: int, cap: int, expect: int, remaining: int = 0
) -> tuple[memoryview, int, Any, Any]:
    view, cap = split_args(data, start, cap, expect, remaining)
    return view, cap, ffi.new("uint64_t[]", max(cap, 1)), ffi.new("cp_split_result *")


def _split_result(rc: int, call: str, where: str, ends: Any, out: Any) -> SplitResult:
    if rc in _SPLIT_ERRORS:
        raise RecordFormatError(_SPLIT_ERRORS[rc], where=where)
    _check(rc, call)
    n = int(out.count)
    found = array("Q")
    found.frombytes(ffi.buffer(ends, 8 * n))
    return SplitResult(
        found,
        int(out.next),
        _index(out.first_odd),
        bool(out.done),
        bool(out.nested_map),
    )


def json_split(
    data: Buffer, start: int, *, first: bool, expect_members: int = 0, cap: int
) -> SplitResult:
    """Members of the JSON array/object whose body starts at ``data[start]`` (see cpstore.h)."""
    view, cap, ends, out = _split_args(data, start, cap, expect_members)
    rc = lib.cp_json_split(
        _buf(view), len(view), start, bool(first), expect_members, ends, cap, out
    )
    return _split_result(rc, "cp_json_split", "json", ends, out)


def msgpack_split(
    data: Buffer, start: int, remaining: int, *, expect_members: int = 0, cap: int
) -> SplitResult:
    """The next ``min(remaining, cap)`` msgpack items at ``data[start]`` (see cpstore.h)."""
    view, cap, ends, out = _split_args(data, start, cap, expect_members, remaining)
    rc = lib.cp_msgpack_split(
        _buf(view), len(view), start, remaining, expect_members, ends, cap, out
    )
    return _split_result(rc, "cp_msgpack_split", "msgpack", ends, out)


__all__ += ["hashed_kinds"]


def hashed_kinds(records: Buffer, cap: int = 256) -> tuple[list[int], bool]:
    """Distinct hashed kind codes of a packed token array (first seen first, at most
    ``cap``), and whether there were more."""
    view = as_bytes_view(records, "records")
    record_count(RecordType.TOKEN, len(view), where="records")
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 0:
        raise InvalidInputError("cap must be a non-negative int", got=cap)
    codes = ffi.new("uint32_t[]", max(cap, 1))
    count = ffi.new("size_t *")
    rc = lib.cp_hashed_kinds(_buf(view), len(view), codes, cap, count)
    if rc not in (lib.CP_OK, lib.CP_ERR_FULL):
        _check(rc, "cp_hashed_kinds")
    return [int(codes[i]) for i in range(count[0])], rc == lib.CP_ERR_FULL


__all__ += ["pack_tokens"]


def pack_tokens(
    kinds: Any,
    provs: bytes | bytearray,
    digests: Buffer,
    *,
    seqs: Any = None,
    first_seq: int = 0,
) -> bytearray:
    """TOKEN records from columns (``cp_pack_tokens``), one per 16-byte digest.

    ``seqs`` None numbers them on from ``first_seq``; a ``kinds`` ('I') or
    ``provs`` column of length 1 is used for every record.
    """
    kind_col, prov_col, dig, seq_col, n = token_columns(kinds, provs, digests, seqs, first_seq)
    out = bytearray(32 * n)
    if n == 0:
        return out
    rc = lib.cp_pack_tokens(
        ffi.NULL if seq_col is None else ffi.from_buffer("uint64_t[]", seq_col),
        first_seq,
        ffi.from_buffer("uint32_t[]", kind_col),
        len(kind_col),
        _buf(prov_col),
        len(prov_col),
        _buf(dig),
        n,
        ffi.from_buffer("uint8_t[]", out),
    )
    _check(rc, "cp_pack_tokens")  # token_columns checked every length first
    return out


__all__ += ["NUMBER_TYPES", "encode_numbers"]


def encode_numbers(values: array[int] | array[float]) -> tuple[bytearray, array[int]]:
    """Canonical encodings of an ``array('q'|'Q'|'d')`` joined, and n+1 offsets (natively)."""
    if not isinstance(values, array) or values.typecode not in NUMBER_TYPES:
        raise InvalidInputError(
            "numbers must be an array of 'q', 'Q' or 'd'",
            expected=sorted(NUMBER_TYPES),
            got=getattr(values, "typecode", type(values).__name__),
        )
    n = len(values)
    out = bytearray(9 * n)
    offsets = array("Q", bytes(8 * (n + 1)))
    rc = lib.cp_encode_numbers(
        NUMBER_TYPES[values.typecode],
        ffi.from_buffer("uint8_t[]", values) if n else ffi.NULL,
        n,
        ffi.from_buffer("uint8_t[]", out) if n else ffi.NULL,
        len(out),
        ffi.from_buffer("uint64_t[]", offsets, require_writable=True),
    )
    _check(rc, "cp_encode_numbers")
    del out[offsets[-1] :]
    return out, offsets


__all__ += ["CANON_REASONS", "canonical_check"]

#: What each ``CP_CANON_*`` reason of :func:`canonical_check` means.
CANON_REASONS = {
    lib.CP_CANON_TRUNCATED: "the value ends early (or is empty)",
    lib.CP_CANON_TRAILING: "bytes follow the one value",
    lib.CP_CANON_BAD_BYTE: "a byte no msgpack item starts with",
    lib.CP_CANON_LONG_FORM: "a header longer than the value needs (not the shortest form)",
    lib.CP_CANON_FLOAT: "float 32, a NaN other than the canonical one, or -0.0",
    lib.CP_CANON_UTF8: "a str that is not strict UTF-8",
    lib.CP_CANON_EXT: "an ext other than a minimal bigint outside [-2**63, 2**64)",
    lib.CP_CANON_KEY_ORDER: "map keys not strictly increasing by their encoded bytes",
    lib.CP_CANON_KEY_TYPE: "an array or map as a map key",
    lib.CP_CANON_KEY_EQUAL: "two map keys equal once read (True, 1 and 1.0)",
    lib.CP_CANON_DEPTH: "nested deeper than 256",
    lib.CP_CANON_OFFSETS: "offsets decrease or pass the end of the data",
}


def canonical_check(data: Buffer, offsets: array[int]) -> tuple[int, int, str] | None:
    """The first value ``data[offsets[i]:offsets[i+1]]`` not in canonical form, as
    (i, byte offset in data, what is wrong), or None (csrc/cp_canon.c; the spec is
    :func:`cpstore.native.ingest_reference.canonical_check`)."""
    view = as_bytes_view(data, "data")
    if not isinstance(offsets, array) or offsets.typecode != "Q" or len(offsets) < 1:
        raise InvalidInputError("offsets must be a non-empty array('Q')", got=offsets)
    out = ffi.new("cp_canon_result *")
    rc = lib.cp_canonical_check(
        _buf(view), len(view), ffi.from_buffer("uint64_t[]", offsets), len(offsets) - 1, out
    )
    _check(rc, "cp_canonical_check")
    index = _index(out.index)
    if index is None:
        return None
    return index, int(out.offset), CANON_REASONS[int(out.reason)]
