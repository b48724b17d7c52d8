"""What a durable put writes, and how the data file's tail is filled (issue 12).

``test_pages_per_durable_put``: bytes and pages a durable put writes, cpstore
beside raw LMDB and LMDBSaver. ``test_tail_fill``: cpstore's durable put with
the tail filled as it is (``lmdb_pages.TailCover``: zeros a 1 MiB step ahead)
against the two alternatives it replaced, interleaved as in bench_store.py.

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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from bench_store import (
    HAVE_PEERS,
    Comparison,
    CpstoreSide,
    RawLmdb,
    Side,
    Workload,
    _timed,
    interleave,
    lmdb_saver,
    make_workload,
)
from pytest_benchmark.fixture import BenchmarkFixture

from cpstore.store import lmdb_pages
from cpstore.store.lmdb_pages import TailCover

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


def _workload(size: str) -> Workload:
    return make_workload(
        int(os.environ.get("CPSTORE_BENCH_STEPS", "300" if size == "quick" else "2000"))
    )


def test_pages_per_durable_put(
    benchmark: BenchmarkFixture, tmp_path_factory: pytest.TempPathFactory, size: str
) -> None:
    """Bytes, pages and write calls per durable put for each store (reported, not timed)."""
    workload = _workload(size)
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


def _fallocate_cover(step: int) -> Callable[[TailCover, int], None]:
    """TailCover.cover as it was (step = page: exactly to last_pgno) or with an fallocate step."""

    def cover(self: TailCover, last_pgno: int) -> None:
        need = (last_pgno + 1) * self.psize
        if need <= self.covered:
            return
        try:
            if self.fd is None:
                self.fd = os.open(self.data, os.O_WRONLY)
            size = os.fstat(self.fd).st_size
            target = -(-need // step) * step if self.ahead else need
            if size < target:
                os.posix_fallocate(self.fd, size, target - size)
                size = target
            self.covered = size
        except OSError:
            pass

    return cover


@contextmanager
def _cover(fn: Callable[[TailCover, int], None] | None) -> Iterator[None]:
    real = TailCover.cover
    if fn is not None:
        TailCover.cover = fn  # type: ignore[method-assign, assignment]
    try:
        yield
    finally:
        TailCover.cover = real  # type: ignore[method-assign]


def test_tail_fill(
    benchmark: BenchmarkFixture, tmp_path_factory: pytest.TempPathFactory, size: str
) -> None:
    """Durable put per item: zeros a step ahead (as built) vs fallocate ahead vs exactly."""
    workload = _workload(size)
    repeats = max(5, int(os.environ.get("CPSTORE_BENCH_REPEATS", "9" if size == "quick" else "11")))
    variants: dict[str, Callable[[TailCover, int], None] | None] = {
        "zeros 1 MiB ahead": None,
        "fallocate 1 MiB ahead": _fallocate_cover(lmdb_pages.TAIL_STEP),
        "fallocate to last_pgno": _fallocate_cover(PAGE),
    }

    def contender(fn: Callable[[TailCover, int], None] | None) -> Callable[[], float]:
        def run() -> float:
            with _cover(fn):
                side = CpstoreSide(tmp_path_factory.mktemp("tail"), "sync")
                try:
                    return _timed(lambda: side.record(workload))
                finally:
                    side.close()

        return run

    interleave(
        benchmark,
        "durable put, tail fill",
        {name: contender(fn) for name, fn in variants.items()},
        repeats,
        [
            Comparison("zeros 1 MiB ahead", "fallocate to last_pgno", None, True),
            Comparison("zeros 1 MiB ahead", "fallocate 1 MiB ahead", None, True),
        ],
        items=workload.steps,
    )
