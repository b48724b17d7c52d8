"""The chaos checker and worker on a batched handle's sweep that commits a dropped line.

CI (stop 52, server-crash variant, seed 522991484) failed with "refusal not allowed: prune
ConflictError: the branch moved since this recorder read it; at refs/own-w2/main". Since
retention96 a sweep on a batched handle commits the handle's queue first and raises what
that commit raises (docs/durability.md, "batched"), so a prune meets every conflict a
flush meets: here the main thread's queued C1 was dropped by another thread's failed
commit and the prune's commit of C2 (on C1) lost its compare-and-set. The table allowed
that for a checkpoint, flush or close only. The worker also kept the queued checkpoints
as pending after such a failure, so a later flush with nothing queued would have
acknowledged checkpoints the dropped batch never stored.
"""

from __future__ import annotations

import random
from pathlib import Path

from chaos_check import Model, read_logs
from chaos_errors import RELAYED, refusal_problems
from chaos_log import Log
from chaos_planted import drop_queued_line, excuse_is_narrow
from chaos_worker import Worker

import cpstore
from cpstore.errors import ConflictError


def test_a_checkpoint_on_a_dropped_queued_line_is_refused_and_passes(tmp_path: Path) -> None:
    """The real store and worker code: the writer's batch (the main thread's C1 and C2 in
    it) fails on the shared run. Before hunt100 the main thread then queued C3 on C2 and a
    sweep's commit of it lost on the own run (the CI run above); since hunt100 the recorder
    refuses C3 at once (its head was dropped: docs/durability.md, "batched"), with the
    compare-and-set's place. The checker excuses it, and the worker acknowledges none of
    C1, C2, C3. A sweep's commit still meets such a conflict when C3 is queued while the
    failing batch is in flight, not yet settled: the synthetic test below keeps that rule."""
    logdir = tmp_path / "logs"
    logdir.mkdir()
    log = Log(str(logdir / "w0.log"), 0, 0)
    st = cpstore.open(tmp_path / "s", durability="batched", batch_size=100)
    try:
        w = Worker(st, log, random.Random(1), "w0")
        drop_queued_line(w)  # C1, C2 dropped by the writer thread's flush; C3 refused
    finally:  # the drop is told at the main thread's next commit (or its close)
        try:
            st.close()
        except ConflictError as exc:
            assert RELAYED in str(exc)
    lines = read_logs(logdir)
    assert not [r for r in lines if r["ev"] == "a" and r.get("op") == "ckpt"]
    m = Model(lines)
    assert refusal_problems(m.ops, m.errs) == []


def test_the_sweep_excuse_needs_a_batched_handle_and_a_drop_before() -> None:
    """The excuse stays narrow: a sweep on a handle that is not batched commits no queue, and
    a batched sweep's conflict on the own run with no drop of the process before it (or
    with only a checkpoint queued after the drop) is still a defect."""
    excuse_is_narrow({"ev": "b", "op": "prune", "keep": 3, "run": None, "batched": True})
