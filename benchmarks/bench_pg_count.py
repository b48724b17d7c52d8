"""refs70's create check on PostgreSQL: the kept refs count (pgcount72) against
``count(*)``, in the same run, store and process.

The work and both paths are ``pgcount72_forks.measure`` (its docstring says how): forks
into a store of N refs, the kept-count handle and a handle counting with ``count(*)``
(the path before pgcount72) alternating per repeat. The figures printed are per-fork
medians (min-max over the repeats) and the paired ratio ``count(*)`` / kept (higher:
the kept count is faster); then the triggers' cost on a checkpoint that only moves its
branch's ref (enabled / disabled, interleaved). ``quick`` (the default) uses 1,000 and
10,000 refs and 5 repeats; ``CPSTORE_BENCH_SIZE=full`` adds 50,000 and uses 7.

Run: ``./dev bench -k bench_pg_count -s`` (one throwaway cluster; under a minute quick).
"""

from __future__ import annotations

import statistics

from pgcount72_forks import measure, measure_moves
from pytest_benchmark.fixture import BenchmarkFixture

FORKS = 20


def _median_range(values: list[float], scale: float = 1e3) -> str:
    return (
        f"{statistics.median(values) * scale:.2f} "
        f"({min(values) * scale:.2f}-{max(values) * scale:.2f})"
    )


def test_fork_with_the_kept_count_against_count_star(
    benchmark: BenchmarkFixture, size: str
) -> None:
    sizes = [1_000, 10_000] if size == "quick" else [1_000, 10_000, 50_000]
    repeats = 5 if size == "quick" else 7
    got: dict[int, dict[str, list[float]]] = {}
    moved: dict[str, list[float]] = {}

    def once() -> None:
        got.update(measure(sizes, repeats, FORKS))
        moved.update(measure_moves(repeats, 50))

    benchmark.pedantic(once, rounds=1, iterations=1)
    print(f"\nper-fork ms, median (min-max) of {repeats} interleaved repeats of {FORKS} forks")
    for n, paths in got.items():
        kept, star = paths["kept"], paths["count(*)"]
        ratios = [s / k for s, k in zip(star, kept, strict=True)]
        benchmark.extra_info[f"fork_{n}_refs"] = {
            "kept_ms": statistics.median(kept) * 1e3,
            "count_star_ms": statistics.median(star) * 1e3,
            "ratio": statistics.median(ratios),
        }
        print(
            f"{n:>7,} refs: kept {_median_range(kept)}; count(*) {_median_range(star)}; "
            f"count(*)/kept {_median_range(ratios, 1)}x"
        )
    on, off = moved["triggers"], moved["no triggers"]
    ratios = [a / b for a, b in zip(on, off, strict=True)]
    benchmark.extra_info["move_trigger_ratio"] = statistics.median(ratios)
    print(
        f"a checkpoint moving its ref: triggers {_median_range(on)} ms, none "
        f"{_median_range(off)} ms, triggers/none {_median_range(ratios, 1)}x"
    )
