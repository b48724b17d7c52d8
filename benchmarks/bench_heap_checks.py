"""What checking an inherited object's heap location (not just its index row) costs a put.

A checkpoint's commit txn reads every object it names but does not write
(``commit.objects_to_check``). In store layout 5 that read follows the index
row to the heap entry and compares its kind and key (``Content.stored``), so a
row naming a missing or reused entry refuses the commit (audit6). Before, it
only asked whether the index row existed (``Content.exists``). This interleaves
the two on the bench_store.py workload (10 channels x 1 KB, one changing per
step: nine inherited parts to check per put) in ``durability="none"``, where
no fsync hides the difference.

Run: ``.venv/bin/python -m pytest benchmarks/bench_heap_checks.py --benchmark-only -s``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from bench_store import Comparison, _timed, interleave, make_workload
from pytest_benchmark.fixture import BenchmarkFixture

import cpstore
from cpstore.store.content import Content


@pytest.fixture(scope="module")
def repeats(size: str) -> int:
    """Interleaved repeats per figure (at least 5)."""
    return max(5, int(os.environ.get("CPSTORE_BENCH_REPEATS", "5" if size == "quick" else "11")))


def test_put_with_location_checked_must_exist(
    benchmark: BenchmarkFixture, repeats: int, size: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Per-put time, location-checked must-exist (ours) against the index-row check."""
    steps = int(os.environ.get("CPSTORE_BENCH_STEPS", "300" if size == "quick" else "2000"))
    wl = make_workload(steps)
    stored = Content.stored
    tmp = Path(tempfile.mkdtemp(prefix="cpstore-bench-heap-"))
    rounds = [0]

    def put_all(check: object) -> float:
        monkeypatch.setattr(Content, "stored", check)
        rounds[0] += 1
        with cpstore.open(tmp / str(rounds[0]), durability="none") as st:
            rec = st.recorder("r")
            return _timed(lambda: [rec.checkpoint(i, state) for i, state in enumerate(wl.states)])

    def index_row(self: Content, txn: object, key: bytes) -> bool:
        return self.exists(txn, key)

    fig = interleave(
        benchmark,
        "put, durability=none",
        {"location": lambda: put_all(stored), "index row": lambda: put_all(index_row)},
        repeats,
        [Comparison("location", "index row", note="ratio < 1: the location check costs")],
        items=steps,
    )
    for name, runs in fig.runs.items():
        print(f"\nHEAP {name}: median {sorted(runs)[len(runs) // 2] * 1e6:.1f} us/put", flush=True)
