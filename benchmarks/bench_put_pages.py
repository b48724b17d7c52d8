"""Bytes and pages a durable put writes: cpstore beside raw LMDB and LMDBSaver (issue 12).

The same workload as ``bench_store.py`` (10 channels x 1 KB, one changing per
step), each side recording it in ``durability="sync"`` (LMDB sync + metasync
for the others). Per put: the bytes this process handed to write system calls
(``/proc/self/io`` ``wchar``; LMDB writes each dirty page and the meta page
with ``pwrite``), that divided by the page size, and the write calls. A count,
not a timing: it says how many B-tree pages a commit dirties, which the fsync
then has to carry. Linux only (``/proc/self/io``).

Run: ``.venv/bin/python -m pytest benchmarks/bench_put_pages.py --benchmark-only -s``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from bench_store import HAVE_PEERS, CpstoreSide, RawLmdb, Side, Workload, lmdb_saver, make_workload
from pytest_benchmark.fixture import BenchmarkFixture

PAGE = 4096

pytestmark = pytest.mark.skipif(
    not os.path.exists("/proc/self/io"), reason="needs Linux /proc/self/io"
)


def _io() -> tuple[int, int]:
    with open("/proc/self/io", encoding="ascii") as f:
        fields = dict(line.split(": ") for line in f.read().splitlines())
    return int(fields["wchar"]), int(fields["syscw"])


def _written(open_side: Callable[[Path], Side], path: Path, wl: Workload) -> dict[str, float]:
    side = open_side(path)
    try:
        before = _io()
        side.record(wl)
        after = _io()
    finally:
        side.close()
    steps = wl.steps
    per_put = (after[0] - before[0]) / steps
    return {
        "bytes": round(per_put),
        "pages": round(per_put / PAGE, 2),
        "writes": round((after[1] - before[1]) / steps, 2),
    }


def test_pages_per_durable_put(
    benchmark: BenchmarkFixture, tmp_path_factory: pytest.TempPathFactory, size: str
) -> None:
    """Bytes, pages and write calls per durable put for each store (reported, not timed)."""
    steps = int(os.environ.get("CPSTORE_BENCH_STEPS", "300" if size == "quick" else "2000"))
    workload = make_workload(steps)
    sides: dict[str, Callable[[Path], Side]] = {
        "cpstore durable": lambda p: CpstoreSide(p, "sync"),
        "raw LMDB durable": lambda p: RawLmdb(p, sync=True),
    }
    if HAVE_PEERS:
        sides["LMDBSaver durable"] = lambda p: lmdb_saver(p, sync=True)
    figures = {
        name: _written(opener, tmp_path_factory.mktemp("pages"), workload)
        for name, opener in sides.items()
    }
    benchmark.extra_info.update(pages_per_durable_put=figures)
    print(f"\nwritten per durable put ({workload.steps} puts):")
    for name, fig in figures.items():
        print(
            f"  {name:<20} {fig['bytes']:>7} B  {fig['pages']:>5} pages  "
            f"{fig['writes']:>5} write calls"
        )
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
