"""The chaos mix's ``read_write`` meeting a checkpoint retention took (tests/chaos_errors.py).

Rerunning the compaction variant with the CI seed 78224378 (worker w2 batched) failed
once here with "refusal not allowed: read_write NotFoundError (outside a logged call):
checkpoint was pruned". ``Worker.op_read_write`` opens a read view of one of the newest
three *acknowledged* checkpoints of the own run. In batched mode the main thread's queued
checkpoints are acknowledged only by its own flush, but another thread's flush commits
them (the queue is one per handle, docs/durability.md "batched"), so the branch can hold
more checkpoints than ``acked_main`` knows; a ``prune(keep_last=3)`` then sweeps all
three, as documented. The table had no row for ``read_write``: it now allows NotFoundError
saying "pruned" after a logged sweep began, as for ``validate``.
"""

from __future__ import annotations

import random
import threading
from pathlib import Path

import pytest
from chaos_check import Model, read_logs
from chaos_errors import refusal_problems
from chaos_log import Log, note_error
from chaos_worker import Worker

import cpstore
from cpstore.errors import NotFoundError


def _problems(logdir: Path) -> list[str]:
    m = Model(read_logs(logdir))
    return refusal_problems(m.ops, m.errs)


def test_a_read_write_of_an_acknowledged_checkpoint_a_logged_prune_took_passes(
    tmp_path: Path,
) -> None:
    """Three acknowledged checkpoints, three more queued and committed by another
    thread's flush (not acknowledged), a logged prune keeping three: the read view of an
    acknowledged one is refused NotFoundError "pruned", which the checker must allow."""
    logdir = tmp_path / "logs"
    logdir.mkdir()
    log = Log(str(logdir / "w0.log"), 0, 0)
    with cpstore.open(tmp_path / "s", durability="batched", batch_size=100) as st:
        w = Worker(st, log, random.Random(3), "w0")
        for _ in range(3):
            cid = w.checkpoint(w.main, w.run, "main")  # flushed: acknowledged
            assert cid is not None
            w.acked_main.append(cid)  # as op_own does
        acked = list(w.acked_main)
        for _ in range(3):
            w.checkpoint(w.main, w.run, "main", flush=False)  # queued: not acknowledged
        other = threading.Thread(target=st.flush)  # another thread's flush commits them
        other.start()
        other.join(60)
        assert st.backend.pending == 0 and len(w.main_pending) == 3
        oid, removed = w.call(
            "prune", lambda: st.prune(keep_last=3, run_id=w.run), destructive=True,
            keep=3, run=w.run,
        )  # fmt: skip
        w.ack("prune", oid, removed=removed, keep=3, run=w.run)
        assert all(st.verify_checkpoint(c) for c in acked)  # all three swept
        with pytest.raises(NotFoundError, match="pruned") as exc:
            w.op_read_write()
        note_error(log, exc.value, "read_write")  # as chaos_process._session's loop does
        w.main_pending = []  # the checker's view needs no ack of the queued three
    assert _problems(logdir) == []


def test_a_read_write_refused_with_no_sweep_logged_is_reported(tmp_path: Path) -> None:
    """The same refusal with no sweep in the log is still a defect the checker names."""
    logdir = tmp_path / "logs"
    logdir.mkdir()
    log = Log(str(logdir / "w0.log"), 0, 0)
    note_error(log, NotFoundError("checkpoint was pruned", where="checkpoints"), "read_write")
    assert [p[:45] for p in _problems(logdir)] == ["refusal not allowed: read_write NotFoundError"]
