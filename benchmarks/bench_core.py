"""Native core benchmarks (issue 2), each beside a baseline timed in the same run.

Run: ``CPSTORE_BENCH_SIZE=quick|full .venv/bin/python -m pytest benchmarks/bench_core.py``
(quick is the default). The ratio table at the end compares time per record:

- first divergence of two token logs (10 M records full, 1 M quick), equal and
  differing in the last record, vs ``bytes ==`` on the same buffers (target
  >= 0.9x) and vs the pure-Python reference, which is timed on the first
  20 000 records and scaled per record;
- batch digest of 1 M 32-byte values vs a python-xxhash loop (target >= 5x
  and <= 15 ns/record; the table shows both);
- sequence digest of 64 MiB vs ``xxhash.xxh3_128_digest`` one-shot (target
  >= 0.8x), under every SIMD kernel the CPU has.

- one 1 KiB digest through `digest()` and through the cffi call, vs python-xxhash
  (why `digest()` sends buffers below 64 KiB to python-xxhash).

No timing is asserted; the table says what was met.
"""

from __future__ import annotations

import os
import random
from array import array
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import xxhash
from pytest_benchmark.fixture import BenchmarkFixture

import cpstore
from cpstore.native import RecordType, reference
from cpstore.native.binding import native_digest

COMPARE_RECORDS = {"quick": 1_000_000, "full": 10_000_000}
REFERENCE_RECORDS = 20_000
BATCH_VALUES = 1_000_000
SEQ_BYTES = 64 << 20
ROUNDS = {"quick": 5, "full": 10}


def _run(
    benchmark: BenchmarkFixture,
    fn: Callable[[], Any],
    *,
    rounds: int,
    label: str,
    items: int,
    baseline: str | list[str] | None = None,
    target: float | None = None,
) -> Any:
    benchmark.extra_info.update(label=label, items=items)
    if baseline is not None:
        benchmark.extra_info.update(baseline=baseline)
    if target is not None:
        benchmark.extra_info.update(target=target)
    return benchmark.pedantic(fn, rounds=rounds, iterations=1, warmup_rounds=1)


# ---- first divergence -------------------------------------------------------


@pytest.fixture(scope="module")
def token_logs(size: str) -> Iterator[tuple[bytes, bytes, bytes]]:
    """(a, an equal copy of a, a copy differing in the last record's value)."""
    count = COMPARE_RECORDS[size]
    record = random.Random(1).randbytes(32 * 4096)
    a = (record * (count // 4096 + 1))[: 32 * count]
    equal = bytes(bytearray(a))  # a distinct object: `==` must not short-cut on identity
    last = bytearray(a)
    last[-1] ^= 1
    yield a, equal, bytes(last)


@pytest.mark.benchmark(group="core-compare-equal")
def test_compare_equal_bytes_eq(
    benchmark: BenchmarkFixture, token_logs: tuple[bytes, bytes, bytes], size: str
) -> None:
    """Baseline: ``bytes ==`` on two equal token logs."""
    a, b, _ = token_logs
    assert _run(
        benchmark,
        lambda: a == b,
        rounds=ROUNDS[size],
        label="compare equal: bytes ==",
        items=len(a) // 32,
    )


@pytest.mark.benchmark(group="core-compare-equal")
def test_compare_equal_native(
    benchmark: BenchmarkFixture, token_logs: tuple[bytes, bytes, bytes], size: str
) -> None:
    """first_divergence on two equal token logs."""
    a, b, _ = token_logs
    result = _run(
        benchmark,
        lambda: cpstore.native.first_divergence(RecordType.TOKEN, a, b),
        rounds=ROUNDS[size],
        label=f"compare equal {len(a) // 32:,} tokens",
        items=len(a) // 32,
        target=0.9,
        baseline=["compare equal: bytes ==", "compare equal: reference"],
    )
    assert result.equal


@pytest.mark.benchmark(group="core-compare-equal")
def test_compare_equal_reference(
    benchmark: BenchmarkFixture, token_logs: tuple[bytes, bytes, bytes], size: str
) -> None:
    """The reference on the first 20 000 records (scaled per record in the table)."""
    a, b, _ = token_logs
    sa, sb = a[: 32 * REFERENCE_RECORDS], b[: 32 * REFERENCE_RECORDS]
    _run(
        benchmark,
        lambda: reference.first_divergence(RecordType.TOKEN, sa, sb),
        rounds=3,
        label="compare equal: reference",
        items=REFERENCE_RECORDS,
    )
    benchmark.extra_info["note"] = "reference timed on a slice"


@pytest.mark.benchmark(group="core-compare-last")
def test_compare_last_bytes_eq(
    benchmark: BenchmarkFixture, token_logs: tuple[bytes, bytes, bytes], size: str
) -> None:
    """Baseline: ``bytes ==`` on logs that differ in the last record."""
    a, _, c = token_logs
    assert not _run(
        benchmark,
        lambda: a == c,
        rounds=ROUNDS[size],
        label="compare last: bytes ==",
        items=len(a) // 32,
    )


@pytest.mark.benchmark(group="core-compare-last")
def test_compare_last_native(
    benchmark: BenchmarkFixture, token_logs: tuple[bytes, bytes, bytes], size: str
) -> None:
    """first_divergence on logs that differ in the last record (returns the index)."""
    a, _, c = token_logs
    result = _run(
        benchmark,
        lambda: cpstore.native.first_divergence(RecordType.TOKEN, a, c),
        rounds=ROUNDS[size],
        label=f"compare last {len(a) // 32:,} tokens",
        items=len(a) // 32,
        target=0.9,
        baseline=["compare last: bytes ==", "compare last: reference"],
    )
    assert result.index == len(a) // 32 - 1


@pytest.mark.benchmark(group="core-compare-last")
def test_compare_last_reference(
    benchmark: BenchmarkFixture, token_logs: tuple[bytes, bytes, bytes], size: str
) -> None:
    """The reference on the last 20 000 records (scaled per record in the table)."""
    a, _, c = token_logs
    sa, sc = a[-32 * REFERENCE_RECORDS :], c[-32 * REFERENCE_RECORDS :]
    _run(
        benchmark,
        lambda: reference.first_divergence(RecordType.TOKEN, sa, sc),
        rounds=3,
        label="compare last: reference",
        items=REFERENCE_RECORDS,
    )


# ---- batch digest -----------------------------------------------------------


@pytest.fixture(scope="module")
def batch() -> tuple[bytes, bytes]:
    """1 M 32-byte values and their offsets as a uint64 buffer."""
    values = os.urandom(32 * BATCH_VALUES)
    return values, array("Q", range(0, 32 * BATCH_VALUES + 1, 32)).tobytes()


@pytest.mark.benchmark(group="core-batch")
def test_batch_xxhash_loop(benchmark: BenchmarkFixture, batch: tuple[bytes, bytes]) -> None:
    """Baseline: python-xxhash called once per value."""
    values, _ = batch
    view = memoryview(values)
    digest = xxhash.xxh3_128_digest
    out = _run(
        benchmark,
        lambda: b"".join([digest(view[i : i + 32]) for i in range(0, len(view), 32)]),
        rounds=3,
        label="batch: python-xxhash loop",
        items=BATCH_VALUES,
    )
    assert len(out) == 16 * BATCH_VALUES


@pytest.mark.benchmark(group="core-batch")
def test_batch_native(benchmark: BenchmarkFixture, batch: tuple[bytes, bytes], size: str) -> None:
    """digest_batch of 1 M 32-byte values (offsets as a uint64 buffer)."""
    values, offsets = batch
    out = _run(
        benchmark,
        lambda: cpstore.native.digest_batch(values, offsets),
        rounds=ROUNDS[size],
        label="batch digest 1 M x 32 B",
        items=BATCH_VALUES,
        baseline="batch: python-xxhash loop",
        target=5.0,
    )
    assert out[:16] == xxhash.xxh3_128_digest(values[:32])


@pytest.mark.benchmark(group="core-batch")
def test_batch_native_into(
    benchmark: BenchmarkFixture, batch: tuple[bytes, bytes], size: str
) -> None:
    """digest_batch_into a reused caller-owned buffer (no allocation per call)."""
    values, offsets = batch
    out = bytearray(16 * BATCH_VALUES)
    _run(
        benchmark,
        lambda: cpstore.native.digest_batch_into(values, offsets, out),
        rounds=ROUNDS[size],
        label="batch digest into reused buffer",
        items=BATCH_VALUES,
        baseline="batch: python-xxhash loop",
        target=5.0,
    )
    assert bytes(out[:16]) == xxhash.xxh3_128_digest(values[:32])


@pytest.mark.benchmark(group="core-batch")
def test_batch_native_offsets_list(
    benchmark: BenchmarkFixture, batch: tuple[bytes, bytes], size: str
) -> None:
    """digest_batch with offsets as a Python list (pays the list-to-uint64 conversion)."""
    values, offsets = batch
    offs = array("Q")
    offs.frombytes(offsets)
    listed = offs.tolist()
    _run(
        benchmark,
        lambda: cpstore.native.digest_batch(values, listed),
        rounds=3,
        label="batch digest, offsets as list",
        items=BATCH_VALUES,
        baseline="batch: python-xxhash loop",
        target=5.0,
    )


# ---- sequence digest --------------------------------------------------------


@pytest.fixture(scope="module")
def big_log() -> bytes:
    """64 MiB of token records."""
    return random.Random(3).randbytes(SEQ_BYTES)


@pytest.mark.benchmark(group="core-seqdigest")
def test_seq_xxh3_one_shot(benchmark: BenchmarkFixture, big_log: bytes, size: str) -> None:
    """Baseline: xxhash.xxh3_128_digest of the whole 64 MiB."""
    _run(
        benchmark,
        lambda: xxhash.xxh3_128_digest(big_log),
        rounds=ROUNDS[size],
        label="seq: xxh3_128_digest one-shot",
        items=len(big_log) // 32,
    )


@pytest.mark.benchmark(group="core-seqdigest")
@pytest.mark.parametrize("kernel", ["auto", "baseline", "avx2", "avx512"])
def test_seq_native(benchmark: BenchmarkFixture, big_log: bytes, size: str, kernel: str) -> None:
    """sequence_digest of 64 MiB under one SIMD kernel."""
    try:
        cpstore.native.select_simd(kernel)
    except cpstore.InvalidInputError:
        pytest.skip(f"CPU lacks {kernel}")
    try:
        name = cpstore.native.simd_path()
        _run(
            benchmark,
            lambda: cpstore.native.sequence_digest(RecordType.TOKEN, big_log),
            rounds=ROUNDS[size],
            label=f"seq digest 64 MiB [{kernel}: {name}]",
            items=len(big_log) // 32,
            baseline="seq: xxh3_128_digest one-shot",
            target=0.8,
        )
    finally:
        cpstore.native.select_simd("auto")


# ---- one small digest (why digest() hands small buffers to python-xxhash) --------

SMALL_OBJECTS = 10_000


@pytest.fixture(scope="module")
def small_objects() -> list[memoryview]:
    """1 KiB buffers as a store read hands them out (memoryviews)."""
    rng = random.Random(5)
    return [memoryview(rng.randbytes(1024)) for _ in range(SMALL_OBJECTS)]


@pytest.mark.benchmark(group="core-digest-small")
def test_digest_small_xxhash(
    benchmark: BenchmarkFixture, small_objects: list[memoryview], size: str
) -> None:
    """Baseline: python-xxhash one-shot over 10 000 views of 1 KiB."""
    h = xxhash.xxh3_128_digest
    _run(
        benchmark,
        lambda: [h(v) for v in small_objects],
        rounds=ROUNDS[size],
        label="digest 1 KiB: python-xxhash",
        items=SMALL_OBJECTS,
    )


@pytest.mark.benchmark(group="core-digest-small")
def test_digest_small_dispatch(
    benchmark: BenchmarkFixture, small_objects: list[memoryview], size: str
) -> None:
    """cpstore.native.digest(): below 64 KiB it is python-xxhash behind a type check."""
    got = _run(
        benchmark,
        lambda: [cpstore.native.digest(v) for v in small_objects],
        rounds=ROUNDS[size],
        label="digest 1 KiB: digest()",
        items=SMALL_OBJECTS,
        baseline="digest 1 KiB: python-xxhash",
    )
    assert got[0] == xxhash.xxh3_128_digest(small_objects[0])


@pytest.mark.benchmark(group="core-digest-small")
def test_digest_small_native(
    benchmark: BenchmarkFixture, small_objects: list[memoryview], size: str
) -> None:
    """native_digest(): the cffi call into the C kernel, per object."""
    got = _run(
        benchmark,
        lambda: [native_digest(v) for v in small_objects],
        rounds=ROUNDS[size],
        label="digest 1 KiB: native (cffi)",
        items=SMALL_OBJECTS,
        baseline="digest 1 KiB: python-xxhash",
    )
    assert got[0] == xxhash.xxh3_128_digest(small_objects[0])
