"""audit58: a sweep between two steps of another process, on LMDB and PostgreSQL.

* A dry run is a report, not a plan: a checkpoint it listed that another process then
  names (a fork at it, a reset that retains it) is kept by the real sweep, whole.
* A recorder made before a keep-last-1 sweep (its head kept, everything older swept)
  records on from the head: the new checkpoint carries the inherited logs and every
  payload they name reads back, although the checkpoints that first recorded those
  payloads are gone.
"""

from __future__ import annotations

import multiprocessing
from typing import Any

from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures

import cpstore
from cpstore.store.facade import Store

WAIT = 120


def _record(store: Store, run: str, steps: int) -> list[str]:
    rec = store.recorder(run)
    ids = []
    for step in range(steps):
        rec.observe(step, "tool", f"{run} payload {step}".encode(), pinned_at=float(step))
        ids.append(rec.checkpoint(step, {"run": run, "step": step}))
    rec.close()
    return ids


def _name_them(url: str, fork_at: str, reset_to: str, head: str, out: Any) -> None:
    """In its own process: fork ``b`` at ``fork_at``; reset main back to ``reset_to``."""
    try:
        with cpstore.open(url) as store:
            store.fork("r", "b", fork_at)
            store.reset_ref("r", "main", reset_to, expected_old=head, operator="op", reason="x")
        out.put("done")
    except BaseException as exc:
        out.put(f"error: {exc!r}")


def test_what_a_dry_run_listed_and_another_process_then_named_is_kept(url: str) -> None:
    with cpstore.open(url) as store:
        ids = _record(store, "r", 6)
        planned = store.gc(keep_last=1, dry_run=True)
        assert set(planned.checkpoints) == set(ids[:-1])
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    # ids[1] gets a branch; main goes back to ids[3], so the old head is retained and
    # its whole lineage with it.
    child = ctx.Process(target=_name_them, args=(url, ids[1], ids[3], ids[-1], out))
    child.start()
    try:
        told = out.get(timeout=WAIT)
    finally:
        child.join(timeout=WAIT)
    assert child.exitcode == 0
    assert told == "done", told
    with cpstore.open(url) as store:
        report = store.gc(keep_last=1)
        assert report.checkpoints == ()  # the retained old head keeps its whole lineage
        for cid in ids:
            with store.read(cid) as view:
                assert view.payload(view.manifest.step, "tool") is not None
        assert store.ref("r", "b") == ids[1]
        store.release_retained(ids[-1], operator="op", reason="done with it")
        report = store.gc(keep_last=1)
        # Now main (ids[3]) and b (ids[1]) keep one each; the rest goes.
        assert set(report.checkpoints) == set(ids) - {ids[1], ids[3]}
        for cid in (ids[1], ids[3]):
            with store.read(cid) as view:
                assert view.payload(0, "tool") == b"r payload 0"
        result = store.verify()
        assert result.ok, result.problems


def _record_on_after_sweep(url: str, made: Any, go: Any, out: Any) -> None:
    """In its own process: a recorder on r/main made now; once told, two checkpoints."""
    try:
        with cpstore.open(url) as store:
            rec = store.recorder("r")
            made.set()
            if not go.wait(WAIT):
                out.put("error: never told to go")
                return
            rec.observe(10, "tool", b"after the sweep", pinned_at=10.0)
            first = rec.checkpoint(10, {"after": 1})
            second = rec.checkpoint(11, {"after": 2})
            rec.close()
            out.put([first, second])
    except BaseException as exc:
        made.set()
        out.put(f"error: {exc!r}")


def test_a_recorder_made_before_a_keep_last_one_sweep_records_on_with_its_logs(
    url: str,
) -> None:
    with cpstore.open(url) as store:
        ids = _record(store, "r", 5)
    ctx = multiprocessing.get_context("spawn")
    made, go, out = ctx.Event(), ctx.Event(), ctx.Queue()
    child = ctx.Process(target=_record_on_after_sweep, args=(url, made, go, out))
    child.start()
    try:
        assert made.wait(WAIT)
        with cpstore.open(url) as op:
            removed = op.gc(keep_last=1)
        go.set()
        told = out.get(timeout=WAIT)
    finally:
        go.set()
        child.join(timeout=WAIT)
    assert child.exitcode == 0
    assert isinstance(told, list), told
    assert set(removed.checkpoints) == set(ids[:-1])
    first, second = told
    with cpstore.open(url) as store:
        assert store.ref("r") == second
        with store.read(second) as view:
            assert view.manifest.parent == first
            payloads = [view.payload(step, "tool") for step in (0, 1, 2, 3, 4, 10)]
        assert payloads == [f"r payload {s}".encode() for s in range(5)] + [b"after the sweep"]
        with store.read(first) as view:
            assert view.manifest.parent == ids[-1]
        result = store.verify()
        assert result.ok, result.problems
