"""The chaos worker (tests/chaos_worker.py) never acknowledges a checkpoint the store said
was dropped, whichever of its calls the drop was reported to."""

from __future__ import annotations

import random
from pathlib import Path

from chaos_worker import Log, Worker

import cpstore
from cpstore.errors import ConflictError


def test_a_drop_reported_to_a_tmp_checkpoint_is_never_acknowledged_later(
    tmp_path: Path,
) -> None:
    """Batched: the worker queues a checkpoint of its own run, then a stale one of run "c"
    is queued; op_tmp's checkpoint (a direct call, not Worker.checkpoint) fills the batch,
    whose commit fails the stale compare-and-set and drops the whole batch; the later
    flush must not acknowledge the dropped checkpoint (the CI failure of 2026-12-02: an
    "acknowledged checkpoint lost" the store had said was not stored)."""
    path = tmp_path / "s"
    with cpstore.open(path, durability="batched", batch_size=3) as st:
        w = Worker(st, Log(str(tmp_path / "w0.log"), 0, 0), random.Random(1), "w0")
        stale = st.recorder("c")  # head None: made before another handle records "c"
        with cpstore.open(path) as other:
            other.recorder("c").checkpoint(1, {"moved": True})
        w.checkpoint(w.main, w.run, "main", flush=False)
        assert len(w.main_pending) == 1
        dropped = w.main_pending[0]
        stale.checkpoint(2, {"stale": True})  # queued: the batch now holds two
        try:
            w.op_tmp()  # its checkpoint fills the batch; the commit fails on "c"
            raise AssertionError("the batch with the stale compare-and-set was committed")
        except ConflictError:
            pass
        w.flush()
        lines = (tmp_path / "w0.log").read_text().splitlines()
        mine = [line for line in lines if f'"id": "{dropped["oid"]}"' in line]
        assert mine and not [line for line in mine if '"ev": "a"' in line], mine
        assert st.ref(w.run) != dropped["cid"]
