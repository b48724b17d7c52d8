"""audit58: a retention sweep SIGKILLed inside its txn, beside a process waiting to write.

The sweep (prune, delete_run, gc) is one write txn: its process is killed after it
deleted the checkpoint records, objects and refs it sweeps and before it commits (the
kill lands in the txn's last step, the audit-index catch-up). Nothing of it may
commit: every checkpoint it would have removed still reads back, the writer that waited
for the store's writer lock (LMDB's robust mutex, PostgreSQL's advisory lock, both
released by the kill) gets its checkpoint acknowledged and readable, and the next
sweep removes exactly what a dry run before the kill said it would (plus nothing the
writer added). Real processes (``spawn``) on LMDB and PostgreSQL.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from typing import Any

import pytest
from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures

import cpstore
from cpstore.store import retention
from cpstore.store.facade import Store

WAIT = 120


def _sweep_and_die(url: str, op: str, writer_ready: Any, in_sweep: Any, writing: Any) -> None:
    """In its own process: start ``op``, and SIGKILL this process inside its txn."""

    def die(*_args: object, **_kwargs: object) -> None:
        in_sweep.set()
        writing.wait(WAIT)
        time.sleep(0.2)  # let the writer reach the lock (not asserted: either order holds)
        os.kill(os.getpid(), signal.SIGKILL)

    setattr(retention, "catch_up_indexes", die)  # noqa: B010 - the sweep's last step
    if not writer_ready.wait(WAIT):
        return
    with cpstore.open(url) as store:
        if op == "prune":
            store.prune(keep_last=1)
        elif op == "delete_run":
            store.delete_run("old")
        else:
            store.gc(keep_last=1, run_id="old")


def _write_when_swept(url: str, writer_ready: Any, in_sweep: Any, writing: Any, out: Any) -> None:
    """In its own process: a recorder made before the sweep; one checkpoint once the sweep
    is inside its txn (it waits for the writer lock the sweep holds)."""
    try:
        with cpstore.open(url) as store:
            rec = store.recorder("live")
            writer_ready.set()
            if not in_sweep.wait(WAIT):
                out.put("error: the sweep never started")
                return
            writing.set()
            cid = rec.checkpoint(99, {"after": "the killed sweep"})
            rec.close()
            out.put(cid)
    except BaseException as exc:
        out.put(f"error: {exc!r}")


def _seed(store: Store) -> dict[str, list[str]]:
    ids: dict[str, list[str]] = {}
    for run in ("old", "live"):
        rec = store.recorder(run)
        ids[run] = []
        for step in range(4):
            rec.observe(step, "clock", f"{run}-{step}".encode(), pinned_at=1.0)
            ids[run].append(rec.checkpoint(step, {"run": run, "step": step}))
        rec.close()
    return ids


@pytest.mark.parametrize("op", ["prune", "delete_run", "gc"])
def test_a_sweep_killed_in_its_txn_removes_nothing_and_the_waiting_writer_lands(
    url: str, op: str
) -> None:
    with cpstore.open(url) as store:
        ids = _seed(store)
        if op == "delete_run":
            planned = store.gc(delete_run="old", dry_run=True)
        elif op == "gc":
            planned = store.gc(keep_last=1, run_id="old", dry_run=True)
        else:
            planned = store.gc(keep_last=1, dry_run=True)
        assert planned.checkpoints  # the killed sweep had something to remove
    ctx = multiprocessing.get_context("spawn")
    ready, in_sweep, writing, out = ctx.Event(), ctx.Event(), ctx.Event(), ctx.Queue()
    sweeper = ctx.Process(target=_sweep_and_die, args=(url, op, ready, in_sweep, writing))
    writer = ctx.Process(target=_write_when_swept, args=(url, ready, in_sweep, writing, out))
    sweeper.start()
    writer.start()
    try:
        got = out.get(timeout=WAIT)
    finally:
        sweeper.join(timeout=WAIT)
        writer.join(timeout=WAIT)
    assert sweeper.exitcode == -signal.SIGKILL  # killed in the txn, as planned
    assert writer.exitcode == 0
    assert not got.startswith("error"), got
    with cpstore.open(url) as store:
        # Nothing of the killed sweep committed: every checkpoint reads back, the
        # refs are where they were, and no tombstone was left.
        for run, cids in ids.items():
            for cid in cids:
                with store.read(cid) as view:
                    assert view.manifest.run_id == run
        assert store.ref("old") == ids["old"][-1]
        assert store.ref("live") == got
        with store.read(got) as view:
            assert view.manifest.parent == ids["live"][-1]
        report = store.verify()
        assert report.ok, report.problems
        # The sweep runs again, whole: what the dry run planned (the writer's new head
        # keeps "live"'s older checkpoints out of a keep-last-1 prune of every run).
        if op == "delete_run":
            again = store.gc(delete_run="old")
        elif op == "gc":
            again = store.gc(keep_last=1, run_id="old")
        else:
            again = store.gc(keep_last=1)
        expected = set(planned.checkpoints)
        if op == "prune":
            expected.add(ids["live"][-1])  # no longer the head: the writer moved past it
        assert set(again.checkpoints) == expected
        assert store.ref("live") == got
        with store.read(got) as view:
            assert view.manifest.step == 99
        report = store.verify()
        assert report.ok, report.problems
