"""audit58: retention in one process beside gates and recorders of another.

A checkpoint with a standing QUARANTINE (released by a sign-off and a resume permit)
is swept by an operator's reset, release and gc while another process holds a recorder
made with that permit, or holds the permit itself, or a rollback certificate for a
checkpoint the sweep takes: every later step is refused with a cpstore error naming
what happened (ConflictError for a branch moved or a fork parent pruned, NotFoundError
"pruned" for a checkpoint gone), nothing is written on a branch that was refused, the
sweep's report and its ``gc`` audit record name the decided checkpoint it removed, a
permit a refused recorder did not get to use stays unused, and the store verifies.
Real processes (``spawn``), on LMDB and PostgreSQL.
"""

from __future__ import annotations

import multiprocessing
from typing import Any

from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures
from test_decision_support import stored_replay

import cpstore
from cpstore.decision.gates import certify_rollback, resume_gate, sign_off
from cpstore.decision.table import Verdict
from cpstore.decision.validate import validate
from cpstore.errors import CpstoreError, NotFoundError
from cpstore.run.model import ReplayMode
from cpstore.store.facade import Store

WAIT = 120


def _record_three(store: Store, run: str = "r") -> list[str]:
    """Three checkpoints on ``run``/main (one token, so stored_replay can replay each)."""
    rec = store.recorder(run)
    ids = []
    for step in range(3):
        rec.observe(step, "clock", f"t{step}".encode(), pinned_at=1.0)
        if step == 0:
            rec.token("rng", 7)
        ids.append(rec.checkpoint(step, f"state{step}".encode()))
    rec.close()
    return ids


def _quarantine_with_permit(store: Store, cid: str) -> str:
    """A QUARANTINE about ``cid``, signed off, and the resume permit it gives (digest)."""
    replay = stored_replay(store, cid, mode=ReplayMode.BEST_EFFORT)
    decision = validate(cid, replay, store=store)
    assert decision.verdict is Verdict.QUARANTINE
    released = sign_off(store, decision, operator="op", reason="reviewed")
    return resume_gate(store, cid, decision, sign_off=released).audit_digest


def _outcome(exc: CpstoreError) -> str:
    return f"{type(exc).__name__}: {exc.what} got={exc.got}"


def _hold_recorder(url: str, branch: str, parent: str | None, permit: str, sync: Any) -> None:
    """In its own process: a recorder made with ``permit``; once told, one checkpoint.
    ``sync``: (made, go, out)."""
    made, go, out = sync
    try:
        with cpstore.open(url) as store:
            rec = store.recorder("r", branch=branch, parent=parent, permit=permit)
            made.set()
            if not go.wait(WAIT):
                out.put("error: never told to go")
                return
            try:
                out.put(f"landed {rec.checkpoint(10, b'after the sweep')}")
            except CpstoreError as exc:
                out.put(_outcome(exc))
    except BaseException as exc:
        made.set()
        out.put(f"error: {exc!r}")


def _run_holder(url: str, branch: str, parent: str | None, permit: str, sweep: Any) -> str:
    """Run :func:`_hold_recorder`; ``sweep()`` runs here once its recorder is made."""
    ctx = multiprocessing.get_context("spawn")
    made, go, out = ctx.Event(), ctx.Event(), ctx.Queue()
    child = ctx.Process(target=_hold_recorder, args=(url, branch, parent, permit, (made, go, out)))
    child.start()
    try:
        assert made.wait(WAIT)
        sweep()
        go.set()
        told: str = out.get(timeout=WAIT)
    finally:
        go.set()
        child.join(timeout=WAIT)
    assert child.exitcode == 0
    return told


def _kinds(store: Store) -> list[str]:
    return [r.kind for r in store.audit_records()]


def test_a_resumed_head_reset_away_and_swept_refuses_the_holders_checkpoint(url: str) -> None:
    with cpstore.open(url) as store:
        ids = _record_three(store)
        head = ids[-1]
        permit = _quarantine_with_permit(store, head)
    reports = []

    def sweep() -> None:
        # The operator, in this process, while the child holds the permitted recorder.
        with cpstore.open(url) as op:
            op.reset_ref("r", "main", ids[0], expected_old=head, operator="op", reason="back")
            op.release_retained(head, operator="op", reason="drop it")
            reports.append(op.gc(keep_last=1))

    told = _run_holder(url, "main", None, permit, sweep)
    assert told.startswith("ConflictError: the branch moved"), told
    (report,) = reports
    assert head in report.checkpoints and head in report.decided
    with cpstore.open(url) as store:
        assert store.ref("r") == ids[0]  # nothing landed over the reset
        try:
            store.manifest(head)
        except NotFoundError as exc:
            assert "pruned" in exc.what
        else:
            raise AssertionError("the swept head still reads")
        kinds = _kinds(store)
        assert kinds.count("resume") == 1  # the permit was used by the recorder's making
        gc_records = [r for r in store.audit_records() if r.kind == "gc"]
        assert [head in r.body["decided"] for r in gc_records] == [True]
        result = store.verify()
        assert result.ok, result.problems


def test_a_forking_recorder_whose_quarantined_parent_is_swept_writes_nothing(url: str) -> None:
    with cpstore.open(url) as store:
        ids = _record_three(store)
        fork_point = ids[0]
        permit = _quarantine_with_permit(store, fork_point)
    reports = []

    def sweep() -> None:
        with cpstore.open(url) as op:
            reports.append(op.gc(keep_last=1))

    told = _run_holder(url, "b", fork_point, permit, sweep)
    assert told.startswith("ConflictError: the parent checkpoint was pruned"), told
    assert told.endswith("got=pruned"), told
    (report,) = reports
    assert fork_point in report.decided
    with cpstore.open(url) as store:
        assert store.ref("r", "b") is None  # the refused fork made no branch
        assert store.ref("r") == ids[-1]
        with store.read(ids[-1]) as view:
            assert view.manifest.step == 2
        result = store.verify()
        assert result.ok, result.problems


def _use_permit_later(url: str, fork_point: str, permit: str, out: Any) -> None:
    """In its own process: fork from ``fork_point`` with ``permit`` (swept meanwhile)."""
    try:
        with cpstore.open(url) as store:
            store.recorder("r", branch="b", parent=fork_point, permit=permit)
            out.put("made")
    except CpstoreError as exc:
        out.put(_outcome(exc))
    except BaseException as exc:
        out.put(f"error: {exc!r}")


def test_a_permit_for_a_swept_checkpoint_is_refused_not_used_up(url: str) -> None:
    """A gate decides from the log alone, so a permit for a checkpoint retention took
    is given; the recorder it is for is refused "pruned" and the permit is not used."""
    with cpstore.open(url) as store:
        ids = _record_three(store)
        fork_point = ids[0]
        permit = _quarantine_with_permit(store, fork_point)
        assert fork_point in store.gc(keep_last=1).decided
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    child = ctx.Process(target=_use_permit_later, args=(url, fork_point, permit, out))
    child.start()
    try:
        told = out.get(timeout=WAIT)
    finally:
        child.join(timeout=WAIT)
    assert child.exitcode == 0
    assert told.startswith("NotFoundError: checkpoint was pruned"), told
    with cpstore.open(url) as store:
        assert "resume" not in _kinds(store)
        assert store.ref("r", "b") is None
        result = store.verify()
        assert result.ok, result.problems


def _certify_then_roll_back(url: str, target: str, head: str, sync: Any) -> None:
    """In its own process: certify rolling back to ``target``; once told, reset to it.
    ``sync``: (certified, go, out)."""
    certified, go, out = sync
    try:
        with cpstore.open(url) as store:
            decision = validate(target, stored_replay(store, target), store=store)
            certify_rollback(store, target, decision)
            certified.set()
            if not go.wait(WAIT):
                out.put("error: never told to go")
                return
            try:
                store.reset_ref(
                    "r", "main", target, expected_old=head, operator="op", reason="rollback"
                )
                out.put("rolled back")
            except CpstoreError as exc:
                out.put(_outcome(exc))
    except BaseException as exc:
        certified.set()
        out.put(f"error: {exc!r}")


def test_a_rollback_certified_for_a_checkpoint_then_swept_is_refused_and_moves_nothing(
    url: str,
) -> None:
    with cpstore.open(url) as store:
        ids = _record_three(store)
    ctx = multiprocessing.get_context("spawn")
    certified, go, out = ctx.Event(), ctx.Event(), ctx.Queue()
    child = ctx.Process(
        target=_certify_then_roll_back, args=(url, ids[0], ids[-1], (certified, go, out))
    )
    child.start()
    try:
        assert certified.wait(WAIT)
        with cpstore.open(url) as op:
            removed = op.gc(keep_last=1)
        go.set()
        told = out.get(timeout=WAIT)
    finally:
        go.set()
        child.join(timeout=WAIT)
    assert child.exitcode == 0
    assert ids[0] in removed.decided  # the certificate's checkpoint, named in the log
    assert told.startswith("NotFoundError: checkpoint was pruned"), told
    with cpstore.open(url) as store:
        assert store.ref("r") == ids[-1]  # the refused reset moved nothing
        assert store.retained() == {}
        assert "ref_reset" not in _kinds(store)
        result = store.verify()
        assert result.ok, result.problems
