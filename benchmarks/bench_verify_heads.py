"""What checking LangGraph heads costs ``verify()`` (branch lgtrust).

``verify()`` checks the framing of every layout-2 LangGraph head
(cpstore/store/lg_head.py): a string compare for a checkpoint of any other run, a
few C-level steps for a LangGraph one. This interleaves ``verify()`` with the check
and with it switched off (``head_problem`` patched to return None) on two stores of
the same size: plain checkpoints (10 parts, one changing per step) and LangGraph
checkpoints (one saver thread, one channel of ten changing per step).
``CPSTORE_BENCH_CLOCK=cpu`` times by this process's CPU time.

Run: ``.venv/bin/python -m pytest benchmarks/bench_verify_heads.py --benchmark-only -s``.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from bench_store import Comparison, interleave
from langgraph.checkpoint.base import empty_checkpoint
from pytest_benchmark.fixture import BenchmarkFixture

import cpstore
import cpstore.store.verify as verify_module
from cpstore.langgraph import CpstoreSaver
from cpstore.store.lg_head import head_problem

CLOCK: Callable[[], float] = (
    time.process_time if os.environ.get("CPSTORE_BENCH_CLOCK") == "cpu" else time.perf_counter
)


@pytest.fixture(scope="module")
def repeats(size: str) -> int:
    """Interleaved repeats per figure (at least 5)."""
    return max(5, int(os.environ.get("CPSTORE_BENCH_REPEATS", "5" if size == "quick" else "11")))


@pytest.fixture(scope="module")
def steps(size: str) -> int:
    """Checkpoints per store."""
    return int(os.environ.get("CPSTORE_BENCH_STEPS", "300" if size == "quick" else "2000"))


def _plain(path: Path, steps: int) -> None:
    with cpstore.open(path, durability="none") as st:
        rec = st.recorder("run-plain")
        for i in range(steps):
            rec.checkpoint(i, {f"c{j}": f"v{j}@{i if j == i % 10 else 0}" * 50 for j in range(10)})
        rec.close()


def _langgraph(path: Path, steps: int) -> None:
    with cpstore.open(path, durability="none") as st:
        saver = CpstoreSaver(st)
        cfg: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        for i in range(steps):
            j = i % 10
            cp = empty_checkpoint()
            cp["channel_values"] = {f"c{j}": f"v{j}@{i}" * 50}
            cp["channel_versions"] = {f"c{k}": f"{i if k == j else 0:032}.0" for k in range(10)}
            meta: Any = {"source": "loop", "step": i, "parents": {}}
            cfg = saver.put(cfg, cp, meta, {f"c{j}": f"{i:032}.0"})


@pytest.mark.parametrize("kind", ["plain", "langgraph"])
def test_verify_with_head_checks(
    benchmark: BenchmarkFixture,
    repeats: int,
    steps: int,
    kind: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Per-checkpoint verify() time with the head check against without it."""
    path = Path(tempfile.mkdtemp(prefix="cpstore-bench-verify-")) / "s"
    (_plain if kind == "plain" else _langgraph)(path, steps)
    checked = head_problem  # verify.py calls it by this name (patched below)

    def off(*_: object, **__: object) -> None:
        return None

    with cpstore.open(path) as st:

        def run(check: Any) -> float:
            monkeypatch.setattr(verify_module, "head_problem", check)
            t0 = CLOCK()
            report = st.verify()
            took = CLOCK() - t0
            assert report.ok and report.counts["checkpoints"] == steps
            return took

        fig = interleave(
            benchmark,
            f"verify, {kind} checkpoints",
            {"head checked": lambda: run(checked), "head not checked": lambda: run(off)},
            repeats,
            [Comparison("head checked", "head not checked", note="ratio < 1: the check costs")],
            items=steps,
        )
    for name, runs in fig.runs.items():
        mid = sorted(runs)[len(runs) // 2] * 1e6
        print(f"\nVERIFY {kind} {name}: median {mid:.2f} us/checkpoint", flush=True)
