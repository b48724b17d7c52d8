"""Content-defined chunking: the gear table, the parameters, and the reference chunker.

A FastCDC-style chunker (Xia et al., USENIX ATC 2016) with normalized
chunking, level 2. For each chunk starting at ``s`` with ``n`` bytes left:

- ``n <= min_size``: the rest is one chunk;
- otherwise a 64-bit gear hash ``h = (h << 1) + GEAR[byte]`` (mod 2**64)
  runs from ``s + min_size`` (the first ``min_size`` bytes are skipped, not
  hashed), starting at 0. Before ``avg_size`` bytes it cuts after the first
  byte where ``h & MASK_S == 0`` (``bits + 2`` high bits, ``bits =
  log2(avg_size)``: harder to hit); from ``avg_size`` on, where ``h & MASK_L
  == 0`` (``bits - 2`` high bits: easier); at ``max_size`` (or the end of the
  data) it cuts anyway.

The high bits are tested because, with the shift left, bit k of ``h``
depends on the last k + 1 bytes: the top bits see a 64-byte window. The
result is a list of chunk end offsets (exclusive), the last one ``len(data)``.

``GEAR`` is 256 outputs of SplitMix64 seeded with the ASCII bytes
``cpstore1`` read big-endian (``0x637073746f726531``); ``csrc/cp_gear.inc``
is generated from it by ``python -m cpstore.native.chunking > csrc/cp_gear.inc``
and a golden test checks the two agree. :func:`cut_points` is the executable
spec of ``cp_chunk_cuts`` (csrc/cp_chunk.c); property tests prove they agree.
"""

from __future__ import annotations

from dataclasses import dataclass

from cpstore.errors import InvalidInputError
from cpstore.native.args import Buffer, as_bytes_view

__all__ = [
    "CHUNK_AVG",
    "CHUNK_MAX",
    "CHUNK_MIN",
    "GEAR",
    "GEAR_SEED",
    "ChunkParams",
    "check_params",
    "cut_points",
    "gear_table_c",
]

_M64 = (1 << 64) - 1
#: SplitMix64 seed of the gear table: b"cpstore1" big-endian.
GEAR_SEED = int.from_bytes(b"cpstore1", "big")


def _splitmix64(seed: int, count: int) -> tuple[int, ...]:
    out = []
    state = seed
    for _ in range(count):
        state = (state + 0x9E3779B97F4A7C15) & _M64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
        out.append(z ^ (z >> 31))
    return tuple(out)


#: The gear table: one pseudo-random 64-bit value per byte value.
GEAR: tuple[int, ...] = _splitmix64(GEAR_SEED, 256)

#: Store defaults (docs/format.md, "Content-defined chunks"), chosen by
#: benchmarks/bench_chunk.py: on a bytes state growing by ~1 KB of real text a
#: step, stored bytes per appended byte (compressed, per-chunk costs included)
#: are 1.40x at 512/2K/16K, 2.00x here, 3.00x at 2K/8K/64K; smaller chunks
#: also cost more chunks per MiB (227 here), slower reads and a chunker below
#: 0.1x of XXH3's speed, so this is the knee.
CHUNK_MIN = 1024
CHUNK_AVG = 4 * 1024
CHUNK_MAX = 32 * 1024
#: Bounds any parameter set must keep (the C checks the same).
_LIMIT_MIN_AVG = 64
_LIMIT_MAX = 1 << 30


@dataclass(frozen=True)
class ChunkParams:
    """Chunk size bounds: every chunk but the last is ``min_size..max_size`` bytes."""

    min_size: int = CHUNK_MIN
    """Smallest chunk (except the last); these bytes are skipped, not hashed."""
    avg_size: int = CHUNK_AVG
    """Target average, a power of two from 64: sets the two masks."""
    max_size: int = CHUNK_MAX
    """A cut is forced here."""


def _size(value: object, name: str) -> int:
    if type(value) is not int:
        raise InvalidInputError(f"chunk {name} must be an int", got=type(value).__name__)
    return value


def check_params(min_size: object, avg_size: object, max_size: object) -> tuple[int, int, int]:
    """The three sizes as ints, or :class:`InvalidInputError` naming the bound broken."""
    lo, avg, hi = (
        _size(min_size, "min_size"),
        _size(avg_size, "avg_size"),
        _size(max_size, "max_size"),
    )
    if not 1 <= lo <= avg <= hi <= _LIMIT_MAX:
        raise InvalidInputError(
            "chunk sizes must satisfy 1 <= min <= avg <= max <= 2**30",
            expected="1 <= min <= avg <= max <= 2**30",
            got=(lo, avg, hi),
        )
    if avg < _LIMIT_MIN_AVG or avg & (avg - 1):
        raise InvalidInputError(
            "chunk avg_size must be a power of two from 64", expected=">= 64, 2**k", got=avg
        )
    return lo, avg, hi


def masks(avg_size: int) -> tuple[int, int]:
    """(MASK_S, MASK_L) for ``avg_size``: the top ``bits + 2`` and ``bits - 2`` bits."""
    bits = avg_size.bit_length() - 1
    return (_M64 << (64 - bits - 2)) & _M64, (_M64 << (64 - bits + 2)) & _M64


def cut_points(
    data: Buffer,
    min_size: int = CHUNK_MIN,
    avg_size: int = CHUNK_AVG,
    max_size: int = CHUNK_MAX,
) -> list[int]:
    """End offsets of the content-defined chunks of ``data`` (``[]`` for empty data)."""
    lo, avg, hi = check_params(min_size, avg_size, max_size)
    view = as_bytes_view(data, "data")
    mask_s, mask_l = masks(avg)
    gear = GEAR
    cuts: list[int] = []
    start, size = 0, len(view)
    while start < size:
        left = size - start
        if left <= lo:
            cut = left
        else:
            limit = min(left, hi)
            normal = min(avg, limit)
            h = 0
            cut = limit
            i = lo
            while i < limit:
                h = ((h << 1) + gear[view[start + i]]) & _M64
                if not h & (mask_s if i < normal else mask_l):
                    cut = i + 1
                    break
                i += 1
        start += cut
        cuts.append(start)
    return cuts


def gear_table_c() -> str:
    """``csrc/cp_gear.inc``: the gear table as a C initialiser."""
    lines = [
        "/* Generated by `python -m cpstore.native.chunking > csrc/cp_gear.inc`; do not edit.",
        ' * 256 outputs of SplitMix64 seeded with b"cpstore1" (cpstore/native/chunking.py). */',
        "static const uint64_t CP_GEAR[256] = {",
    ]
    for i in range(0, 256, 4):
        lines.append("    " + ", ".join(f"0x{v:016x}u" for v in GEAR[i : i + 4]) + ",")
    lines.append("};")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(gear_table_c(), end="")
