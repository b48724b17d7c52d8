"""The chaos checker and worker on a batched handle's ref write that commits a dropped line.

Since review100 ``fork``, ``reset_ref`` and ``set_ref`` on a batched handle, and a
``transfer()`` from one (the chaos push), commit the handle's queue first and raise what
that commit raises (docs/durability.md, "batched"), as sweeps do since retention96
(tests/test_chaosflake_batched_sweep.py). The chaos workers run all four on batched
handles: each now meets every conflict a flush meets, here the main thread's queued C1
dropped by another thread's failed commit and the operation's commit of C2 (on C1)
losing its compare-and-set. The table allowed that for a checkpoint, flush, close or
sweep only ("refusal not allowed: fork ConflictError ... refs/own-w0/main"), and the
worker kept the queued checkpoints as pending after such a failure, so its next flush,
with nothing queued, would have acknowledged checkpoints the dropped batch never stored
(a false "acknowledged checkpoint lost").
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from chaos_check import Model, read_logs
from chaos_errors import RELAYED, refusal_problems
from chaos_log import Log
from chaos_planted import drop_queued_line, excuse_is_narrow
from chaos_worker import Worker

import cpstore
from cpstore.errors import ConflictError
from cpstore.store.transfer import transfer


@pytest.mark.parametrize("op", ["fork", "reset", "set_ref", "push"])
def test_a_batched_ref_write_refused_by_its_queue_commit_passes(tmp_path: Path, op: str) -> None:
    """The real store and worker code: the writer's batch (the main thread's C1 and C2 in
    it) fails on the shared run. Before hunt100 the main thread then queued C3 on C2 and the
    ref write's commit of it lost on the own run; since hunt100 the recorder refuses C3 at
    once (its head was dropped), so the write finds nothing queued. The checker excuses
    the refusal, and the worker acknowledges none of C1, C2, C3. A ref write's commit still
    meets such a conflict when C3 is queued while the failing batch is in flight, not yet
    settled: the synthetic test below keeps that rule."""
    logdir = tmp_path / "logs"
    logdir.mkdir()
    log = Log(str(logdir / "w0.log"), 0, 0)
    st = cpstore.open(tmp_path / "s", durability="batched", batch_size=100)
    peer = cpstore.open(tmp_path / "peer")
    try:
        w = Worker(st, log, random.Random(1), "w0")
        base = w.checkpoint(w.main, w.run, "main")  # acknowledged (flushed)
        assert base is not None
        st.fork(w.run, "fb", base)  # a branch the reset moves (outside the log)
        drop_queued_line(w)  # C1, C2 dropped by the writer thread's flush; C3 refused
        calls = {
            "fork": lambda: st.fork(w.run, "fc", base),
            "reset": lambda: st.reset_ref(
                w.run, "fb", None, expected_old=base, operator="chaos", reason="r"
            ),
            "set_ref": lambda: st.set_ref(w.run, "fc", base, expected_old=None),
            "push": lambda: transfer(st.backend, peer.backend, run_id=w.run),
        }
        branch = "fb" if op == "reset" else "fc"
        try:  # the queue is empty: the write commits nothing first and runs
            w.call(op, calls[op], destructive=op == "reset", run=w.run, branch=branch)
        except ConflictError as relayed:  # the drop told at this thread's next commit
            assert RELAYED in str(relayed)
        else:
            if op == "reset":
                assert st.ref(w.run, "fb") is None
            elif op == "push":
                assert peer.ref(w.run) == base
            else:
                assert st.ref(w.run, "fc") == base
        w.flush()  # the queue is empty: acknowledges nothing
    finally:  # the drop is told at the main thread's next commit (or its close)
        peer.close()
        try:
            st.close()
        except ConflictError as raised:
            assert RELAYED in str(raised)
    lines = read_logs(logdir)
    acked = [r for r in lines if r["ev"] == "a" and r.get("op") == "ckpt"]
    assert len(acked) == 1  # the base alone
    begun = [r for r in lines if r["ev"] == "b" and r["op"] == op]
    assert begun and begun[0]["batched"] is True
    m = Model(lines)
    assert refusal_problems(m.ops, m.errs) == []


@pytest.mark.parametrize("op", ["fork", "reset", "set_ref", "push"])
def test_the_ref_write_excuse_needs_a_batched_handle_and_a_drop_before(op: str) -> None:
    """The excuse stays narrow: a ref write on a handle that is not batched commits no
    queue, and a batched one's conflict on the own run with no drop of the process before
    it (or with only a checkpoint queued after the drop) is still a defect."""
    excuse_is_narrow({"ev": "b", "op": op, "run": "own-w0", "branch": "fc", "batched": True})
