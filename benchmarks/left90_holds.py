"""What ``release_left_holds`` costs a keep_latest prune and a delete_thread beside many
retained holds of other runs (left90).

A store holding N checkpoints on one run, each a retained head with one hold (written
straight into ``meta`` by ``retained.add_hold``, no audit record: holds on other runs are
never looked up), and a LangGraph thread of three checkpoints. Timed, best of five:
``release_left_holds`` alone for the thread's runs, then three puts and a keep_latest
prune, then three puts and a delete_thread (each whole: the prune's and the delete's
sweeps walk the whole store).

Run: ``PYTHONPATH=. .venv/bin/python benchmarks/left90_holds.py 10000``.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint

import cpstore
from cpstore.langgraph import CpstoreSaver
from cpstore.langgraph._codec import thread_runs
from cpstore.langgraph._copy_delete import release_left_holds
from cpstore.store.retained import add_hold


def _best(fn: Callable[[], object], reps: int = 5) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main(n: int) -> None:
    path = Path(tempfile.mkdtemp()) / "s"
    with cpstore.open(path, durability="none") as st:
        rec = st.recorder("other")
        cids = [rec.checkpoint(i, {"i": i}) for i in range(n)]
        meta = st.backend.db("meta")

        def holds(txn: Any) -> None:
            for i, cid in enumerate(cids):
                add_hold(
                    txn, meta, bytes.fromhex(cid), run="other", branch=f"b{i}", audit=f"{i:032x}"
                )

        st.backend.write_txn(holds)
        print(f"{len(st.retained())} retained holds of run 'other'")
    with CpstoreSaver.from_conn_string(path, durability="none") as saver:
        store = saver.store
        runs = set(thread_runs("t"))

        def fill() -> None:
            cfg: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
            for i in range(3):
                cp = empty_checkpoint()
                cp["channel_values"] = {"x": i}
                cp["channel_versions"] = {"x": i + 1}
                cfg = saver.put(cfg, cp, {"step": i}, {"x": i + 1})

        def prune() -> None:
            fill()
            saver.prune(["t"])

        def delete() -> None:
            fill()
            saver.delete_thread("t")

        for label, fn in (
            ("release_left_holds", lambda: release_left_holds(store, "t", runs)),
            ("3 puts + prune keep_latest", prune),
            ("3 puts + delete_thread", delete),
        ):
            print(f"{label}: {_best(fn) * 1000:.1f} ms")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000)
