"""The native content-defined chunker cuts exactly where its Python spec does.

``cp_chunk_cuts`` (csrc/cp_chunk.c) against ``cpstore.native.chunking.cut_points``
on empty, tiny, huge and adversarial inputs (long runs of one byte, data
that ends right at a size bound, forced cuts at max_size), plus golden cut
points and the generated gear table. ``CPSTORE_NATIVE_QUICK=1`` shrinks the
example counts and the huge cases (``make valgrind``).
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cpstore.errors import InvalidInputError
from cpstore.native import binding, chunking, reference
from cpstore.native.chunking import CHUNK_AVG, CHUNK_MAX, CHUNK_MIN, cut_points

QUICK = os.environ.get("CPSTORE_NATIVE_QUICK") == "1"
EXAMPLES = 5 if QUICK else 150
HUGE = (96 << 10) if QUICK else (3 << 20)
ROOT = Path(__file__).resolve().parents[1]

PROPERTY = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

#: Small parameter sets so short examples cross every branch (min, normal, max).
SMALL_PARAMS = [(1, 64, 64), (16, 64, 256), (32, 128, 128), (64, 64, 1000), (100, 256, 300)]


@st.composite
def params(draw: st.DrawFn) -> tuple[int, int, int]:
    """A valid (min, avg, max): avg a power of two from 64, min <= avg <= max."""
    avg = 1 << draw(st.integers(6, 12))
    lo = draw(st.integers(1, avg))
    hi = draw(st.integers(avg, 4 * avg))
    return lo, avg, hi


def _random(n: int, seed: int = 0) -> bytes:
    return random.Random(seed * 7919 + n).randbytes(n)


def _agree(data: bytes, p: tuple[int, int, int]) -> list[int]:
    want = cut_points(data, *p)
    assert binding.chunk_cuts(data, *p) == want
    return want


@PROPERTY
@given(data=st.binary(max_size=4096), p=params())
@example(data=b"", p=(1, 64, 64))
@example(data=b"x", p=(1, 64, 64))
@example(data=b"\0" * 4096, p=(16, 64, 256))
def test_native_cuts_equal_reference_for_any_bytes_and_params(
    data: bytes, p: tuple[int, int, int]
) -> None:
    """For any bytes and any valid sizes, native and reference give the same cuts."""
    cuts = _agree(data, p)
    assert (cuts[-1] if cuts else 0) == len(data)
    sizes = [b - a for a, b in zip([0, *cuts], cuts, strict=False)]
    assert all(p[0] <= s <= p[2] for s in sizes[:-1])
    assert all(0 < s <= p[2] for s in sizes)


@PROPERTY
@given(byte=st.integers(0, 255), n=st.integers(0, 20_000), p=st.sampled_from(SMALL_PARAMS))
def test_long_runs_of_one_byte_cut_identically(byte: int, n: int, p: tuple[int, int, int]) -> None:
    """A run of one byte value (a hash that never or always hits) cuts the same both sides."""
    _agree(bytes([byte]) * n, p)


@pytest.mark.parametrize("p", SMALL_PARAMS)
def test_data_ending_at_every_size_bound_cuts_identically(p: tuple[int, int, int]) -> None:
    """Data whose length is min, avg or max give or take one byte cuts the same both sides."""
    lo, avg, hi = p
    for n in {0, 1, lo - 1, lo, lo + 1, avg - 1, avg, avg + 1, hi - 1, hi, hi + 1, 2 * hi + 1}:
        if n >= 0:
            _agree(_random(n, 1), p)
            _agree(b"\xff" * n, p)


def test_run_that_never_matches_is_forced_at_max_size() -> None:
    """Where the hash never hits (a run of 0x00), every chunk is cut at exactly max_size."""
    data = b"\0" * 2560
    cuts = _agree(data, (16, 64, 256))
    assert cuts == list(range(256, 2561, 256))
    # Byte values whose runs hit somewhere cut earlier, and identically.
    hits = [b for b in range(256) if cut_points(bytes([b]) * 2560, 16, 64, 256) != cuts]
    assert hits
    for b in hits[:20]:
        _agree(bytes([b]) * 2560, (16, 64, 256))


@pytest.mark.parametrize("p", [(1, 64, 128), (3, 64, 200), (64, 64, 1000)])
def test_cuts_on_every_lane_of_the_unrolled_scan_match_reference(p: tuple[int, int, int]) -> None:
    """The native scan tests eight positions per step: cuts land on every one of the eight
    lanes (and in the byte-at-a-time tail) in both hash phases, identically to the reference."""
    data = _random(60_000, 5)
    cuts = _agree(data, p)
    lo, avg, _ = p
    starts = [0, *cuts[:-1]]
    sizes = [b - a for a, b in zip(starts, cuts[:-1], strict=False)]
    # Lane of each cut's last byte: phase 1 scans from min_size, phase 2 from avg_size.
    early = {(s - 1 - lo) % 8 for s in sizes if s <= avg}
    late = {(s - 1 - avg) % 8 for s in sizes if s > avg}
    assert early == (set(range(8)) if avg > lo else set())
    assert late == set(range(8))


def test_huge_buffer_cuts_identically_with_store_defaults() -> None:
    """A multi-megabyte buffer cuts the same at the store's default sizes."""
    data = _random(HUGE, 2)
    cuts = _agree(data, (CHUNK_MIN, CHUNK_AVG, CHUNK_MAX))
    assert len(cuts) > 4


def test_chunk_digests_are_the_digests_of_the_cut_chunks() -> None:
    """chunk_digests returns the cuts and the XXH3-128 of each chunk they bound."""
    data = _random(300_000, 3)
    cuts, digests = binding.chunk_digests(data)
    assert cuts == cut_points(data)
    assert (cuts, digests) == reference.chunk_digests(data)
    starts = [0, *cuts[:-1]]
    want = b"".join(binding.digest(data[a:b]) for a, b in zip(starts, cuts, strict=True))
    assert digests == want
    assert binding.chunk_digests(b"") == ([], b"")


@PROPERTY
@given(data=st.binary(max_size=6000), p=params())
@example(data=b"", p=(1, 64, 64))
@example(data=b"\0" * 5000, p=(16, 64, 256))
def test_native_chunk_digests_equal_reference_for_any_bytes_and_params(
    data: bytes, p: tuple[int, int, int]
) -> None:
    """The one-pass native cut-and-hash gives the reference's cuts and per-chunk digests."""
    assert binding.chunk_digests(data, *p) == reference.chunk_digests(data, *p)
    assert binding.chunk_digests(memoryview(data), *p)[0] == cut_points(data, *p)


def test_insert_changes_only_nearby_chunks() -> None:
    """Inserting bytes in the middle leaves the chunks far before and after unchanged."""
    data = _random(400_000, 4)
    edited = data[:200_000] + b"inserted" + data[200_000:]

    def chunks(buf: bytes) -> set[bytes]:
        cuts = binding.chunk_cuts(buf)
        return {buf[a:b] for a, b in zip([0, *cuts[:-1]], cuts, strict=True)}

    before, after = chunks(data), chunks(edited)
    assert len(before - after) <= 2
    assert len(after - before) <= 2


@pytest.mark.parametrize(
    "bad",
    [(0, 64, 64), (65, 64, 64), (64, 64, 63), (1, 96, 200), (1, 32, 64), (1, 64, (1 << 30) + 1)],
)
def test_bad_sizes_are_refused_with_invalid_input_both_sides(bad: tuple[int, int, int]) -> None:
    """Out-of-bounds sizes raise InvalidInputError (a ValueError) in native and reference."""
    with pytest.raises(InvalidInputError):
        binding.chunk_cuts(b"abc", *bad)
    with pytest.raises(InvalidInputError):
        cut_points(b"abc", *bad)
    with pytest.raises(ValueError):
        binding.chunk_digests(b"abc", *bad)


def test_non_int_sizes_are_refused() -> None:
    """A size that is not an int (a float, a bool) is InvalidInputError, never a C call."""
    with pytest.raises(InvalidInputError):
        binding.chunk_cuts(b"abc", 1.0, 64, 64)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        binding.chunk_cuts(b"abc", True, 64, 64)


def test_golden_cut_points_of_fixed_input() -> None:
    """The cuts of a fixed input never drift (the chunk layout is a stored format)."""
    data = b"".join(f"message {i}: the quick brown fox {i * i}\n".encode() for i in range(3000))
    assert len(data) == 123_427
    assert binding.chunk_cuts(data) == GOLDEN_DEFAULT
    assert binding.chunk_cuts(data, 64, 256, 1024)[:12] == GOLDEN_SMALL


def test_gear_table_file_is_generated_from_the_spec() -> None:
    """csrc/cp_gear.inc is exactly what chunking.gear_table_c() generates."""
    assert (ROOT / "csrc" / "cp_gear.inc").read_text() == chunking.gear_table_c()
    assert chunking.GEAR[0] == 0x0AC65D68C87D779A
    assert chunking.GEAR[255] == 0x7B4B9288E4BC96A7


GOLDEN_DEFAULT = [
    5683,
    10458,
    16005,
    19581,
    23672,
    29875,
    31470,
    35854,
    37208,
    41633,
    46004,
    47545,
    49079,
    54031,
    58314,
    64189,
    68386,
    75975,
    84414,
    86377,
    89195,
    93312,
    95025,
    96774,
    97908,
    102630,
    107126,
    111483,
    116435,
    121236,
    123427,
]
GOLDEN_SMALL = [301, 407, 514, 829, 1102, 1222, 1511, 1742, 2000, 2309, 2454, 2717]
