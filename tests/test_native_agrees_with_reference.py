"""The native core agrees with its pure-Python reference byte for byte.

Every native function is checked against its twin in ``cpstore.native.reference``
on empty, single, tiny, multi-megabyte and adversarial inputs; the digest
functions are checked under every SIMD kernel this CPU supports, and the
digest itself against python-xxhash's ``xxh3_128_digest``.

``CPSTORE_NATIVE_QUICK=1`` shrinks example counts and the multi-megabyte
cases (used by ``make valgrind``, where the interpreter runs ~50x slower).
"""

from __future__ import annotations

import itertools
import os
import random
import struct
from array import array
from collections.abc import Iterator
from typing import Literal

import pytest
import xxhash
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import cpstore
from cpstore.native import reference
from cpstore.native.binding import SMALL_DIGEST, native_digest
from cpstore.native.records import RECORD_FIELDS, RECORD_SIZE, RecordType

QUICK = os.environ.get("CPSTORE_NATIVE_QUICK") == "1"
EXAMPLES = 5 if QUICK else 200
#: Bytes in the "huge" fixed examples (a few MB normally).
HUGE = (64 << 10) if QUICK else (3 << 20)
#: The C compares in blocks of this many bytes (CP_BLOCK_BYTES in cpstore.c).
BLOCK_BYTES = 65536

PROPERTY = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)

RECORD_TYPES = list(RecordType)
KERNELS = ["baseline", "avx2", "avx512"]


def _bytes(n: int, seed: int = 0) -> bytes:
    return random.Random(seed * 1_000_003 + n).randbytes(n)


@pytest.fixture(params=KERNELS)
def kernel(request: pytest.FixtureRequest) -> Iterator[str]:
    """Select one digest kernel for the test, skipping ones the CPU lacks."""
    try:
        cpstore.native.select_simd(request.param)
    except cpstore.InvalidInputError:
        pytest.skip(f"CPU lacks {request.param}")
    try:
        yield request.param
    finally:
        cpstore.native.select_simd("auto")


# ---- strategies -----------------------------------------------------------


def _record(rtype: RecordType) -> st.SearchStrategy[bytes]:
    size = RECORD_SIZE[rtype]
    choices = [
        st.binary(min_size=size, max_size=size),
        st.just(b"\xff" * size),
        st.just(b"\x00" * size),
    ]
    if rtype is RecordType.TOKEN:
        choices.append(
            st.builds(
                lambda seq, kind, prov, res, value: struct.pack(
                    "<QIB3s16s", seq, kind, prov, res, value
                ),
                st.one_of(st.integers(0, 64), st.just(2**64 - 1)),
                st.one_of(st.sampled_from([0, 1, 2, 3, 4, 0xFFFFFFFF]), st.integers(0, 2**32 - 1)),
                st.sampled_from([0, 1, 2, 3, 255]),
                st.one_of(st.just(b"\0\0\0"), st.binary(min_size=3, max_size=3)),
                st.one_of(st.just(b"\xff" * 16), st.binary(min_size=16, max_size=16)),
            )
        )
    return st.one_of(*choices)


def _records(rtype: RecordType, max_size: int = 24) -> st.SearchStrategy[bytes]:
    return st.lists(_record(rtype), max_size=max_size).map(b"".join)


@st.composite
def _typed_records(draw: st.DrawFn) -> tuple[RecordType, bytes]:
    rtype = draw(st.sampled_from(RECORD_TYPES))
    return rtype, draw(_records(rtype))


def _mutate(draw: st.DrawFn, rtype: RecordType, data: bytes) -> bytes:
    """``data`` with a few single-byte changes in chosen fields (reserved included)."""
    size = RECORD_SIZE[rtype]
    count = len(data) // size
    out = bytearray(data)
    if count == 0:
        return bytes(out)
    for _ in range(draw(st.integers(0, 3))):
        index = draw(st.integers(0, count - 1))
        _, off, width = draw(st.sampled_from(RECORD_FIELDS[rtype]))
        pos = index * size + off + draw(st.integers(0, width - 1))
        out[pos] ^= draw(st.integers(1, 255))
    return bytes(out)


@st.composite
def _pairs(draw: st.DrawFn) -> tuple[RecordType, bytes, bytes, tuple[str, ...] | None]:
    rtype = draw(st.sampled_from(RECORD_TYPES))
    size = RECORD_SIZE[rtype]
    a = draw(_records(rtype))
    b = _mutate(draw, rtype, a)
    shape = draw(st.sampled_from(["same", "shorter", "longer", "swap"]))
    if shape == "shorter":
        b = b[: size * draw(st.integers(0, len(b) // size))]
    elif shape == "longer":
        b = b + draw(_records(rtype, max_size=4))
    elif shape == "swap":
        a, b = b, a
    names = [name for name, _, _ in RECORD_FIELDS[rtype]]
    fields = draw(st.one_of(st.none(), st.sets(st.sampled_from(names)).map(tuple)))
    return rtype, a, b, fields


@st.composite
def _batch(draw: st.DrawFn) -> tuple[bytes, list[int]]:
    data = draw(st.one_of(st.binary(max_size=600), st.integers(0, 5000).map(_bytes)))
    cuts = draw(st.lists(st.integers(0, len(data)), max_size=40))
    return data, sorted(cuts) or [draw(st.integers(0, len(data)))]


@st.composite
def _token_log(draw: st.DrawFn) -> bytes:
    """Mostly well-formed token logs with occasional breaks, live and bad records."""
    out = []
    for i in range(draw(st.integers(0, 40))):
        seq = i if draw(st.integers(0, 9)) else draw(st.integers(0, 2**64 - 1))
        kind = draw(st.sampled_from([1, 2, 3, 4, 0x80000001])) if draw(st.integers(0, 9)) else 0
        prov = draw(st.sampled_from([1, 1, 1, 2, 0, 3, 255]))
        res = b"\0\0\0" if draw(st.integers(0, 9)) else draw(st.binary(min_size=3, max_size=3))
        out.append(struct.pack("<QIB3s16s", seq, kind, prov, res, _bytes(16, i)))
    return b"".join(out)


# ---- digest ---------------------------------------------------------------

#: Lengths at XXH3's internal boundaries: size classes, the 64-byte stripe,
#: the 256-byte streaming buffer, the 1024-byte block, up to ~2 MB.
XXH3_BOUNDARIES = sorted(
    {
        n + d
        for n in (0, 3, 4, 8, 16, 128, 240, 256, 512, 1024, 64 * 16, 2048, 4096)
        for d in (-1, 0, 1)
        if n + d >= 0
    }
    | {k * 64 + d for k in (1, 2, 15, 16, 17, 31, 32, 33) for d in (-1, 0, 1)}
    | {(1 << p) + d for p in range(12, 22) for d in (-1, 0, 1)}
)


def test_digest_equals_xxh3_128_at_every_internal_boundary(kernel: str) -> None:
    """native digest == xxhash.xxh3_128_digest == reference at XXH3's size boundaries."""
    for n in XXH3_BOUNDARIES:
        data = _bytes(n)
        expected = xxhash.xxh3_128_digest(data)
        assert cpstore.native.digest(data) == expected, n
        assert native_digest(data) == expected, n
        assert native_digest(memoryview(data)) == expected, n
        assert reference.digest(data) == expected, n
        assert cpstore.native.digest(bytearray(data)) == expected, n
        assert cpstore.native.digest(memoryview(data)[1:] if n else b"") == xxhash.xxh3_128_digest(
            data[1:]
        ), n


@PROPERTY
@given(data=st.binary(max_size=4096))
@example(data=b"")
@example(data=b"\xff" * 241)
def test_digest_equals_xxh3_128_for_any_bytes(kernel: str, data: bytes) -> None:
    """digest(data) is xxh3_128_digest(data) and the reference's result, for any bytes."""
    got = cpstore.native.digest(data)
    assert got == native_digest(data) == xxhash.xxh3_128_digest(data) == reference.digest(data)
    assert len(got) == 16


def test_digest_of_huge_buffer_equals_xxh3_128(kernel: str) -> None:
    """A multi-megabyte buffer digests to xxh3_128_digest, also through a strided-free view."""
    data = _bytes(HUGE + 17, seed=1)
    assert cpstore.native.digest(data) == xxhash.xxh3_128_digest(data) == reference.digest(data)
    assert native_digest(memoryview(data)[: SMALL_DIGEST - 1]) == xxhash.xxh3_128_digest(
        data[: SMALL_DIGEST - 1]
    )


def test_digest_accepts_wider_formats_as_their_bytes() -> None:
    """A memoryview of another item format is hashed as its raw bytes."""
    values = array("Q", range(100))
    assert cpstore.native.digest(memoryview(values)) == xxhash.xxh3_128_digest(values.tobytes())


# ---- digest_batch ---------------------------------------------------------


@PROPERTY
@given(batch=_batch(), as_buffer=st.booleans())
@example(batch=(b"", [0]), as_buffer=False)
@example(batch=(b"", [0, 0, 0]), as_buffer=True)
@example(batch=(b"abc", [3, 3]), as_buffer=False)
def test_digest_batch_matches_reference(
    kernel: str, batch: tuple[bytes, list[int]], as_buffer: bool
) -> None:
    """digest_batch agrees with the reference for any offsets, as list or uint64 buffer."""
    data, offsets = batch
    offs: list[int] | bytes = array("Q", offsets).tobytes() if as_buffer else offsets
    got = cpstore.native.digest_batch(data, offs)
    assert got == reference.digest_batch(data, offs)
    assert got == b"".join(
        xxhash.xxh3_128_digest(data[offsets[i] : offsets[i + 1]]) for i in range(len(offsets) - 1)
    )


@PROPERTY
@given(batch=_batch(), order=st.sampled_from(["little", "big"]))
def test_digest_batch_reads_offsets_in_the_byte_order_it_is_told(
    kernel: str, batch: tuple[bytes, list[int]], order: Literal["little", "big"]
) -> None:
    """Offsets packed little- or big-endian, with that byteorder, digest as the plain ints do."""
    data, offsets = batch
    packed = struct.pack(f"{'<' if order == 'little' else '>'}{len(offsets)}Q", *offsets)
    expected = reference.digest_batch(data, offsets)
    assert cpstore.native.digest_batch(data, packed, byteorder=order) == expected
    assert reference.digest_batch(data, packed, byteorder=order) == expected


def test_digest_batch_of_huge_buffer_matches_reference(kernel: str) -> None:
    """A multi-megabyte batch of small, boundary-sized and large items agrees."""
    rng = random.Random(7)
    data = _bytes(HUGE, seed=2)
    sizes = [0, 1, 16, 17, 128, 129, 240, 241, 1024, 1025, 65536, HUGE // 4]
    offsets = [0]
    while True:
        step = rng.choice(sizes) if rng.random() < 0.5 else rng.randint(0, 64)
        if offsets[-1] + step > len(data):
            break
        offsets.append(offsets[-1] + step)
    assert cpstore.native.digest_batch(data, offsets) == reference.digest_batch(data, offsets)


# ---- sequence_digest and SequenceHasher -------------------------------------


@PROPERTY
@given(typed=_typed_records())
def test_sequence_digest_matches_reference(kernel: str, typed: tuple[RecordType, bytes]) -> None:
    """One-shot sequence digests agree for every record type and content."""
    rtype, data = typed
    assert cpstore.native.sequence_digest(rtype, data) == reference.sequence_digest(rtype, data)
    assert cpstore.native.sequence_digest(int(rtype), bytearray(data)) == reference.sequence_digest(
        rtype, data
    )


def test_sequence_digest_separates_types_and_empty_logs() -> None:
    """Empty logs of different types, and same bytes under different types, digest apart."""
    empties = {cpstore.native.sequence_digest(rt, b"") for rt in RECORD_TYPES}
    assert len(empties) == len(RECORD_TYPES)
    for rt in RECORD_TYPES:
        assert cpstore.native.sequence_digest(rt, b"") == reference.sequence_digest(rt, b"")
    raw = b"\xff" * 96  # whole records of the 32- and 48-byte types
    assert cpstore.native.sequence_digest(RecordType.TOKEN, raw) != cpstore.native.sequence_digest(
        RecordType.DECISION, raw
    )
    assert cpstore.native.sequence_digest(RecordType.EFFECT, raw) == reference.sequence_digest(
        RecordType.EFFECT, raw
    )


@PROPERTY
@given(data=st.data(), typed=_typed_records())
def test_sequence_hasher_matches_reference_for_any_chunking(
    kernel: str, data: st.DataObject, typed: tuple[RecordType, bytes]
) -> None:
    """Chunks split anywhere (mid-record too), digests taken midway, updating goes on."""
    rtype, records = typed
    size = RECORD_SIZE[rtype]
    cuts = sorted(data.draw(st.lists(st.integers(0, len(records)), max_size=10)))
    ours, theirs = cpstore.native.SequenceHasher(rtype), reference.SequenceHasher(rtype)
    start = 0
    for cut in [*cuts, len(records)]:
        chunk = records[start:cut]
        ours.update(chunk if data.draw(st.booleans()) else memoryview(chunk))
        theirs.update(chunk)
        start = cut
        assert ours.count == theirs.count == cut // size
        if cut % size == 0:
            got = ours.digest()
            assert got == theirs.digest()
            assert got == cpstore.native.sequence_digest(rtype, records[:cut])
            assert ours.digest() == got  # taking a digest changes nothing
    assert ours.digest() == reference.sequence_digest(rtype, records)
    assert ours.record_type is rtype


def test_sequence_hasher_gives_same_digest_when_kernel_changes_midstream() -> None:
    """Switching the SIMD kernel between updates does not change the digest."""
    available = []
    for level in KERNELS:
        try:
            cpstore.native.select_simd(level)
            available.append(level)
        except cpstore.InvalidInputError:
            pass
    try:
        records = _bytes(32 * 5000, seed=3)
        hasher = cpstore.native.SequenceHasher(RecordType.TOKEN)
        for i, start in enumerate(range(0, len(records), 7777)):
            cpstore.native.select_simd(available[i % len(available)])
            hasher.update(records[start : start + 7777])
        assert hasher.digest() == reference.sequence_digest(RecordType.TOKEN, records)
    finally:
        cpstore.native.select_simd("auto")


@pytest.mark.parametrize("rtype", RECORD_TYPES, ids=lambda rt: rt.name.lower())
def test_sequence_digest_of_huge_log_matches_reference(kernel: str, rtype: RecordType) -> None:
    """A multi-megabyte log agrees one-shot and streamed in odd-sized chunks."""
    size = RECORD_SIZE[rtype]
    records = _bytes(HUGE // size * size, seed=4)
    expected = reference.sequence_digest(rtype, records)
    assert cpstore.native.sequence_digest(rtype, records) == expected
    hasher = cpstore.native.SequenceHasher(rtype)
    view = memoryview(records)
    for start in range(0, len(records), 100_003):
        hasher.update(view[start : start + 100_003])
    assert hasher.digest() == expected
    assert hasher.count == len(records) // size


# ---- first_divergence ------------------------------------------------------


def _agree(
    rtype: RecordType, a: bytes, b: bytes, fields: object = None
) -> cpstore.native.Divergence:
    got = cpstore.native.first_divergence(rtype, a, b, fields=fields)  # type: ignore[arg-type]
    assert got == reference.first_divergence(rtype, a, b, fields=fields)  # type: ignore[arg-type]
    return got


@PROPERTY
@given(pair=_pairs())
def test_first_divergence_matches_reference(
    pair: tuple[RecordType, bytes, bytes, tuple[str, ...] | None],
) -> None:
    """Random arrays with few byte changes, truncations and extensions agree, any fields."""
    rtype, a, b, fields = pair
    got = _agree(rtype, a, b, fields)
    if fields is None:
        assert got.equal == (a == b)


@pytest.mark.parametrize("rtype", RECORD_TYPES, ids=lambda rt: rt.name.lower())
def test_first_divergence_matches_reference_for_every_field_subset(rtype: RecordType) -> None:
    """Every subset of fields, against a change in each single field (reserved included)."""
    size = RECORD_SIZE[rtype]
    layout = RECORD_FIELDS[rtype]
    names = [name for name, _, _ in layout]
    base = _bytes(size * 6, seed=5)
    for (_, off, width), (_, off2, _) in itertools.product(layout, layout):
        b = bytearray(base)
        b[2 * size + off + width - 1] ^= 0x01  # record 2: last byte of one field
        b[4 * size + off2] ^= 0x80  # record 4: first byte of another
        for k in range(len(names) + 1):
            for subset in itertools.combinations(names, k):
                _agree(rtype, base, bytes(b), subset)
        _agree(rtype, base, bytes(b), None)
        _agree(rtype, base, bytes(b[: 3 * size]), names[:1])


@pytest.mark.parametrize("rtype", RECORD_TYPES, ids=lambda rt: rt.name.lower())
def test_first_divergence_matches_reference_around_block_boundaries(rtype: RecordType) -> None:
    """Differences at records around the C's 64 KiB compare blocks agree."""
    size = RECORD_SIZE[rtype]
    per_block = BLOCK_BYTES // size
    count = 2 * per_block + 3
    base = _bytes(count * size, seed=6)
    layout = RECORD_FIELDS[rtype]
    first_name, first_off, _ = layout[0]
    reserved_name, reserved_off, _ = layout[-1]
    assert reserved_name == "reserved"
    for index in (0, per_block - 1, per_block, per_block + 1, 2 * per_block, count - 1):
        b = bytearray(base)
        b[index * size + first_off] ^= 0xFF
        got = _agree(rtype, base, bytes(b))
        assert (got.index, got.fields) == (index, (first_name,))
        _agree(rtype, base, bytes(b), [reserved_name])
        # Only an excluded (reserved) byte differs at `index`; the real
        # difference comes one record later, maybe in the next block.
        c = bytearray(base)
        c[index * size + reserved_off] ^= 0x01
        assert _agree(rtype, base, bytes(c), [first_name]).equal
        if index + 1 < count:
            c[(index + 1) * size + first_off] ^= 0x01
            got = _agree(rtype, base, bytes(c), [first_name])
            assert got.index == index + 1
        # Equal prefixes of different lengths across the boundary.
        got = _agree(rtype, base[: index * size], base)
        assert (got.kind, got.index) == (cpstore.native.DivergenceKind.COUNT, index)
        _agree(rtype, base, base[: (index + 1) * size])


@pytest.mark.parametrize("rtype", RECORD_TYPES, ids=lambda rt: rt.name.lower())
def test_first_divergence_of_all_ff_records_and_empty_arrays(rtype: RecordType) -> None:
    """All-0xFF records, empty arrays and single records agree."""
    size = RECORD_SIZE[rtype]
    ones = b"\xff" * size
    assert _agree(rtype, b"", b"").equal
    assert _agree(rtype, b"", ones).index == 0
    assert _agree(rtype, ones * 3, ones * 3).equal
    zero_last = ones * 2 + b"\xff" * (size - 1) + b"\x00"
    assert _agree(rtype, ones * 3, zero_last).index == 2
    assert _agree(rtype, ones, b"\x00" * size, []).equal


def test_first_divergence_of_huge_token_logs_matches_reference() -> None:
    """Multi-megabyte token logs, equal and differing in the last record, agree."""
    a = _bytes(HUGE // 32 * 32, seed=8)
    assert _agree(RecordType.TOKEN, a, a).equal
    b = bytearray(a)
    b[-1] ^= 1
    got = _agree(RecordType.TOKEN, a, bytes(b))
    assert (got.index, got.fields) == (len(a) // 32 - 1, ("value",))
    got = _agree(RecordType.TOKEN, a, bytes(b), ["seq", "kind", "provenance"])
    assert got.equal


# ---- scan_tokens -----------------------------------------------------------


@PROPERTY
@given(log=_token_log())
@example(log=b"")
@example(log=struct.pack("<QIB3s16s", 5, 1, 1, b"\0\0\0", b"\0" * 16))  # seq break at 0
@example(log=b"\xff" * 64)
def test_scan_tokens_matches_reference(log: bytes) -> None:
    """scan_tokens agrees on breaks, live records (provenance 0/3/255 too) and malformed ones."""
    assert cpstore.native.scan_tokens(log) == reference.scan_tokens(log)


@PROPERTY
@given(records=_records(RecordType.TOKEN))
def test_scan_tokens_matches_reference_on_arbitrary_bytes(records: bytes) -> None:
    """scan_tokens agrees on arbitrary (mostly malformed) token bytes."""
    assert cpstore.native.scan_tokens(records) == reference.scan_tokens(records)


def test_scan_tokens_of_huge_log_matches_reference() -> None:
    """A multi-megabyte well-formed log with one late break and one late live record agrees."""
    count = HUGE // 32
    packed = bytearray(
        b"".join(struct.pack("<QIB3x16s", i, 1, 1, b"\x5a" * 16) for i in range(count))
    )
    assert reference.scan_tokens(bytes(packed)).first_seq_break is None
    struct.pack_into("<Q", packed, (count - 2) * 32, 0)
    packed[(count - 1) * 32 + 12] = 2
    got = cpstore.native.scan_tokens(packed)
    assert got == reference.scan_tokens(bytes(packed))
    assert (got.first_seq_break, got.first_live, got.live_count) == (count - 2, count - 1, 1)
