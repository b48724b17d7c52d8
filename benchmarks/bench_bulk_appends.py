"""observe_many / effect_many against the loop of single calls they replace, same run.

The batch calls are all or nothing (every item checked before any is appended);
this measures that the check-first pass costs nothing against calling
``rec.observe`` / ``rec.effect`` once per item. Each repeat times both on fresh
recorders of one store, the order rotated (``bench_store.interleave``); a ratio
is loop time over batch time (higher = the batch call faster). Items: ``N``
reads of 64-byte payloads (half pinned), ``N`` effects of 64-byte payloads.
Run: ``.venv/bin/python -m pytest benchmarks/bench_bulk_appends.py --benchmark-only -s``.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_store import Comparison, interleave
from conftest import bench_size
from pytest_benchmark.fixture import BenchmarkFixture

from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store

N = 20_000 if bench_size() == "quick" else 200_000
REPEATS = 15

READS = [
    (i, "tool.search" if i % 3 else "clock", os.urandom(64), float(i) if i % 2 else None)
    for i in range(N)
]
EFFECTS = [("crm.update" if i % 2 else "mail", os.urandom(64)) for i in range(N)]


def _timed(store: Store, body: Callable[[Any], object]) -> Callable[[], float]:
    runs = iter(range(1 << 30))

    def run() -> float:
        rec = store.recorder(f"r{next(runs)}")
        gc.collect()  # a collection left by the last contender is not this one's cost
        started = time.perf_counter()
        body(rec)
        seconds = time.perf_counter() - started
        rec.close(discard_effects=True)
        return seconds

    return run


def _observe_loop(rec: Any) -> None:
    observe = rec.observe
    for step, source, payload, pinned in READS:
        observe(step, source, payload, pinned_at=pinned)


def _effect_loop(rec: Any) -> None:
    effect = rec.effect
    for target, payload in EFFECTS:
        effect(target, payload)


def _report(fig: Any) -> None:
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    for batch, loop in (("observe_many", "observe loop"), ("effect_many", "effect loop")):
        ratios = sorted(lp / b for b, lp in zip(fig.runs[batch], fig.runs[loop], strict=True))
        print(
            f"\n{batch} vs {loop}: {ratios[len(ratios) // 2]:.2f}x "
            f"({ratios[0]:.2f}-{ratios[-1]:.2f}), {N} items, {len(ratios)} repeats, "
            f"loadavg {load}"
        )


def test_bulk_appends_against_single_calls(benchmark: BenchmarkFixture, tmp_path: Path) -> None:
    """Per-item time of the batch calls and of the loops they replace, interleaved."""
    with open_store(tmp_path / "s") as store:
        fig = interleave(
            benchmark,
            "bulk appends: all-or-nothing batch vs loop of single calls",
            {
                "observe_many": _timed(store, lambda rec: rec.observe_many(READS)),
                "observe loop": _timed(store, _observe_loop),
                "effect_many": _timed(store, lambda rec: rec.effect_many(EFFECTS)),
                "effect loop": _timed(store, _effect_loop),
            },
            REPEATS,
            [
                Comparison("observe_many", "observe loop", target=1.0),
                Comparison("effect_many", "effect loop", target=1.0),
            ],
            items=N,
        )
        benchmark.extra_info["loadavg"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
        _report(fig)
