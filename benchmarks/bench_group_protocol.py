"""Group commit's protocol alone, against the leanest group Python offers (issue 12).

4 writer threads commit through :class:`~cpstore.store.group_commit.GroupCommit`
a write whose group "txn" is a GIL-free sleep standing in for the fsync pair
(:data:`SYNC_STAND_IN`), with no build and no txn work: what is left is the
protocol (queue, who takes the group, waking each writer to its outcome) and the
GIL hand-offs between the threads. Beside it the same writers through a
:class:`threading.Barrier` whose action sleeps as long: no failure isolation, no
interrupt handling, no timer, the least a group of threads can do. Their ratio
says how far cpstore's protocol is from the floor of Python's thread primitives on
this machine; the sleep itself (``time.sleep`` overshoots) is in both.

Run: ``.venv/bin/python -m pytest benchmarks/bench_group_protocol.py --benchmark-only -s``
(``CPSTORE_GC_WRITES`` puts per writer, default 500; ``CPSTORE_BENCH_REPEATS``).
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable

import pytest
from bench_group_commit import timed_threads
from bench_store import Comparison, interleave
from pytest_benchmark.fixture import BenchmarkFixture

from cpstore.store.group_commit import GroupCommit

WRITERS = 4

#: Seconds the stand-in for a group's fsync pair sleeps (GIL released).
SYNC_STAND_IN = 0.0002


def run(kind: str, puts: int) -> float:
    """Seconds for ``WRITERS`` threads to make ``puts`` commits each through ``kind``."""
    if kind == "GroupCommit":
        group: GroupCommit[int] = GroupCommit(lambda writes: time.sleep(SYNC_STAND_IN))
        commit: Callable[[int], object] = group.commit
    else:
        barrier = threading.Barrier(WRITERS, action=lambda: time.sleep(SYNC_STAND_IN), timeout=120)
        commit = lambda _: barrier.wait()  # noqa: E731

    def writer() -> None:
        for i in range(puts):
            commit(i)

    return timed_threads([writer] * WRITERS)


@pytest.fixture(scope="module")
def puts() -> int:
    """Commits per writer."""
    return int(os.environ.get("CPSTORE_GC_WRITES", "500"))


def test_group_protocol_floor(benchmark: BenchmarkFixture, puts: int) -> None:
    """GroupCommit and a Barrier group, 4 threads, interleaved."""
    repeats = max(5, int(os.environ.get("CPSTORE_BENCH_REPEATS", "7")))
    interleave(
        benchmark,
        f"group protocol alone, {WRITERS} threads, {SYNC_STAND_IN * 1e6:.0f} us sleep as sync",
        {kind: functools.partial(run, kind, puts) for kind in ("GroupCommit", "Barrier")},
        repeats,
        [Comparison("GroupCommit", "Barrier", None, None, "cpstore's protocol vs the floor")],
        items=WRITERS * puts,
    )
