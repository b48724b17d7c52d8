"""The chaos checker's "dropped batch" excuse when the drop is logged after the conflict.

A CI run of the compaction variant (seed 78224378) once failed with "refusal not allowed:
flush ConflictError ... at refs/own-w2/main" (not reproduced by reruns; this is the one way
found for the harness and store code to log it). In batched mode the main thread queues C1 on
its own run; the second writer thread's flush takes the queue (C1 with it) and its commit
fails on the shared run, so C1 is dropped (docs/durability.md, "batched"); the main thread
queues C2 on C1 and its flush raises ConflictError at refs/own-w<N>/main (the drop itself
is told at a later flush). That conflict is excused by tests/chaos_errors.py's
``Context.dropped_before`` only when the log shows the drop first, and it looked for the
failed flush's ``x`` line: written after the writer's call returned, so when the main
thread's own ``x`` line came first (the writer thread descheduled between its commit and
its log write) the documented conflict was reported as a defect. The rule now needs the
failed operation to have *begun* before the conflict (its commit lies between its two
lines), as the rule for sweeps does. Since hunt100 the conflict is the main thread's
``checkpoint()`` of C2 itself, refused before it is queued (its recorder's head C1 was
dropped), at the same ``refs/own-w<N>/main``, and the same rule excuses it.
"""

from __future__ import annotations

import random
import threading
from pathlib import Path
from typing import Any

import pytest
from chaos_check import Model, read_logs
from chaos_errors import RELAYED, refusal_problems
from chaos_log import Log
from chaos_planted import judged, queued_ckpt, writer_of
from chaos_worker import SHARED, Worker

import cpstore
from cpstore.errors import ConflictError, CpstoreError

OWN = "the branch moved since this recorder read it; at refs/own-w0/main"
SHARED_MSG = f"the branch moved since this recorder read it; at refs/{SHARED}/main"


class _LateLog(Log):
    """A worker log whose ``x`` lines of one thread wait until :attr:`release` is set:
    that thread is descheduled between its call's return and its log write."""

    def __init__(self, path: str) -> None:
        super().__init__(path, 0, 0)
        self.late: int | None = None
        self.at_gate, self.release = threading.Event(), threading.Event()

    def write(self, ev: str, *, sync: bool, **fields: Any) -> None:
        if ev == "x" and threading.get_ident() == self.late:
            self.at_gate.set()
            if not self.release.wait(60):
                raise TimeoutError("the main thread never released the late x line")
        super().write(ev, sync=sync, **fields)


def test_a_conflict_logged_before_the_drop_that_caused_it_passes(tmp_path: Path) -> None:
    """The real store and worker code in the failing order: the writer thread's batch (the
    main thread's C1 in it) fails on the shared run; the main thread's flush of C2 (on C1)
    raises ConflictError on its own run and logs it before the writer logs its failure.
    The checker must excuse it (before: "refusal not allowed: flush ConflictError")."""
    logdir = tmp_path / "logs"
    logdir.mkdir()
    log = _LateLog(str(logdir / "w0.log"))
    got: dict[str, BaseException] = {}
    st = cpstore.open(tmp_path / "s", durability="batched", batch_size=100)
    try:
        w = Worker(st, log, random.Random(1), "w0")
        t = writer_of(w)
        w.checkpoint(w.main, w.run, "main", flush=False)  # C1, queued
        head = st.ref(SHARED)
        first, second = st.recorder(SHARED, parent=head), st.recorder(SHARED, parent=head)

        def writer() -> None:
            log.late = threading.get_ident()
            t.checkpoint(first, SHARED, "main", flush=False)
            try:
                t.checkpoint(second, SHARED, "main")  # its flush: the second loses to the first
            except CpstoreError as exc:
                got["writer"] = exc

        th = threading.Thread(target=writer)
        th.start()
        try:
            assert log.at_gate.wait(60), "the writer's flush never failed"
            with pytest.raises(ConflictError) as main_exc:
                w.checkpoint(w.main, w.run, "main", flush=False)  # C2, on the dropped C1
                w.flush()
        finally:
            log.release.set()
            th.join(60)
    finally:  # the drop of C1 is told at the main thread's next flush: the close's
        with pytest.raises(ConflictError, match=RELAYED):
            st.close()
    assert "at refs/own-w0/main" in str(main_exc.value)
    assert isinstance(got.get("writer"), ConflictError)
    assert f"at refs/{SHARED}/main" in str(got["writer"])
    lines = read_logs(logdir)
    xs = [r["msg"] for r in lines if r["ev"] == "x"]
    assert "refs/own-w0/main" in xs[0] and f"refs/{SHARED}/main" in xs[1]  # the late order
    m = Model(lines)
    assert refusal_problems(m.ops, m.errs) == []


def test_the_late_drop_excuses_only_a_failure_begun_before_the_conflict() -> None:
    """The excuse stays narrow: a failure that began only after the conflict was raised,
    a checkpoint queued only after the failure ended, or the conflicting flush itself
    (with a checkpoint queued before it) excuses nothing; the order of the CI run does."""
    flush = {"ev": "b", "op": "flush"}
    fail = {"ev": "x", "op": "flush", "err": "ConflictError", "msg": SHARED_MSG}
    own = {"ev": "x", "op": "flush", "err": "ConflictError", "msg": OWN}
    assert judged([  # the CI run's order: C1, the writer's flush begins, ours fails first
        queued_ckpt("1"), {**flush, "id": "2"}, {**flush, "id": "3"}, {**own, "id": "3"},
        {**fail, "id": "2"},
    ])  # fmt: skip
    assert not judged([  # the other flush began after the conflict was raised
        queued_ckpt("1"), {**flush, "id": "3"}, {**own, "id": "3"}, {**flush, "id": "2"},
        {**fail, "id": "2"},
    ])  # fmt: skip
    assert not judged([  # the only queued checkpoint came after the failure ended
        {**flush, "id": "2"}, {**fail, "id": "2"}, queued_ckpt("1"), {**flush, "id": "3"},
        {**own, "id": "3"},
    ])  # fmt: skip
    assert not judged([queued_ckpt("1"), {**flush, "id": "3"}, {**own, "id": "3"}])  # itself
