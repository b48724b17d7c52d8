"""What store layout 6's compact checkpoint records cost a put and a read.

Layout 6 writes a checkpoint record as a compact ``r`` heap entry (zstd with the
fixed record dictionary, cpstore/store/record_codec.py) instead of a ``c``
entry holding it as it is; a read checks the frame's shape and inflates it.
This interleaves the two on the bench_store.py workload (10 channels x 1 KB,
one changing per step): ``c`` entries are written by the same build with the
compression turned off (``compress_record`` -> None: the writer's fallback, the
entry a layout-5 build wrote), so only the record entry differs.

- put, ``durability="none"`` (no fsync hides the difference), per put;
- get by id (``read(cid).state()``, every object hash-checked), per get;
- the record lookup alone (``Content.hinted``), per record.

Run: ``.venv/bin/python -m pytest benchmarks/bench_compact_records.py --benchmark-only -s``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from bench_store import Comparison, Workload, _timed, interleave, make_workload
from pytest_benchmark.fixture import BenchmarkFixture

import cpstore
from cpstore.store import heap_layout
from cpstore.store.content import records_of
from cpstore.store.record_codec import compress_record


@pytest.fixture(scope="module")
def repeats(size: str) -> int:
    """Interleaved repeats per figure (at least 5)."""
    return max(5, int(os.environ.get("CPSTORE_BENCH_REPEATS", "5" if size == "quick" else "11")))


@pytest.fixture(scope="module")
def workload(size: str) -> Workload:
    """bench_store.py's workload, generated once (not per repeat)."""
    steps = int(os.environ.get("CPSTORE_BENCH_STEPS", "300" if size == "quick" else "2000"))
    return make_workload(steps)


def _record(path: Path, wl: Workload, compact: bool, mp: pytest.MonkeyPatch) -> float:
    """Record the workload into a new store at ``path``; seconds of the puts.

    ``compact=False`` turns the record compression off (``compress_record`` ->
    None: the writer's fallback, a ``c`` entry); ``mp`` restores it at teardown.
    """
    # heap_layout.record_entry is the caller (content.py had it once; patching content
    # then raised AttributeError and the benchmark never ran)
    mp.setattr(heap_layout, "compress_record", compress_record if compact else lambda record: None)
    with cpstore.open(path, durability="none") as st:
        rec = st.recorder("r")
        return _timed(lambda: [rec.checkpoint(i, s) for i, s in enumerate(wl.states)])


def test_put_compact_record(
    benchmark: BenchmarkFixture,
    repeats: int,
    workload: Workload,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Per-put time writing r entries (ours) against c entries."""
    n = [0]

    def put_all(compact: bool) -> float:
        n[0] += 1
        return _record(tmp_path / str(n[0]), workload, compact, monkeypatch)

    interleave(
        benchmark,
        "put, durability=none",
        {"r entries": lambda: put_all(True), "c entries": lambda: put_all(False)},
        repeats,
        [Comparison("r entries", "c entries", note="ratio < 1: compressing costs")],
        items=workload.steps,
    )


def test_get_compact_record(
    benchmark: BenchmarkFixture,
    repeats: int,
    workload: Workload,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Per-get time of a whole verified state, and per-record hinted(), r against c."""
    stores = {}
    for name, compact in (("r entries", True), ("c entries", False)):
        _record(tmp_path / name, workload, compact, monkeypatch)
        stores[name] = cpstore.open(tmp_path / name, readonly=True)
    try:
        ids = stores["r entries"].history("r")
        cids = [m.id for m in ids][:100]

        def get_all(name: str) -> Callable[[], float]:
            st = stores[name]

            def run() -> float:
                def gets() -> None:
                    for cid in cids:
                        with st.read(cid) as cp:
                            cp.state()

                return _timed(gets)

            return run

        def hinted_all(name: str) -> Callable[[], float]:
            st = stores[name]
            keys = [bytes.fromhex(c) for c in cids]

            def run() -> float:
                with st.backend.read_txn() as txn:
                    records = records_of(st.backend.dbs)
                    return _timed(lambda: [records.hinted(txn, k) for k in keys])

            return run

        interleave(
            benchmark,
            "get by id / hinted record",
            {
                "get, r entries": get_all("r entries"),
                "get, c entries": get_all("c entries"),
                "hinted, r entries": hinted_all("r entries"),
                "hinted, c entries": hinted_all("c entries"),
            },
            repeats,
            [
                Comparison("get, r entries", "get, c entries", note="< 1: inflating costs"),
                Comparison("hinted, r entries", "hinted, c entries", note="< 1: inflating costs"),
            ],
            items=len(cids),
        )
    finally:
        for st in stores.values():
            st.close()
