"""review98: a sweep on a batched handle whose queue fails to commit (3630225's flush).

A sweep first commits the handle's queue. When that commit fails (the queue holds a
checkpoint of a branch another handle moved: ConflictError), the batch is dropped, as
any failed flush drops it, the caller gets the flush's error, and the sweep does not
run: nothing is removed, and no later flush reports the drop again. The next sweep runs.
Another thread's checkpoints the commit dropped are that thread's to be told of.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures

import cpstore
from cpstore.errors import ConflictError, CpstoreError, InvalidInputError


def test_a_sweep_whose_flush_fails_raises_it_and_removes_nothing(url: str) -> None:
    with cpstore.open(url, durability="batched", batch_size=1000) as s:
        rec = s.recorder("r")
        rec.checkpoint(0, {"i": 0})
        rec.checkpoint(1, {"i": 1})
        old = s.recorder("old")
        kept = [old.checkpoint(i, {"o": i}) for i in range(3)]
        s.flush()
        rec.checkpoint(2, {"i": 2})  # queued on r/main's head as this handle saw it
        told: dict[str, Any] = {}

        def other_thread() -> None:  # queues a checkpoint of its own, then flushes
            mine = s.recorder("t").checkpoint(0, {"t": 0})
            told["id"] = mine
            go.wait(30)
            try:
                s.flush()
                told["flush"] = None
            except CpstoreError as exc:
                told["flush"] = exc

        go = threading.Event()
        t = threading.Thread(target=other_thread)
        t.start()
        while "id" not in told:
            t.join(0.01)
        with cpstore.open(url) as o:  # another handle moves r/main
            o.recorder("r").checkpoint(2, {"moved": True})
        assert s.pending == 2
        with pytest.raises(ConflictError):
            s.prune(keep_last=1)
        assert s.pending == 0  # dropped, as a failed flush drops it
        for cid in kept:  # the sweep did not run
            with s.read(cid) as cp:
                assert cp.state() in ({"o": 0}, {"o": 1}, {"o": 2})
        s.flush()  # the drop is not reported twice to the thread that was told
        go.set()
        t.join(30)
        assert isinstance(told["flush"], CpstoreError)  # the other thread is told its loss
        assert s.prune(keep_last=1) >= 2  # the next sweep runs
        assert s.verify().ok


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.delete_run(""),
        lambda s: s.delete_run(5),
        lambda s: s.prune(keep_last=1, run_id=""),
        lambda s: s.prune(keep_last=1, run_id=["r"]),
        lambda s: s.gc(keep_last=1, delete_run="r"),
        lambda s: s.gc(delete_run=""),
        lambda s: s.gc(keep_last=0),
        lambda s: s.gc(keep_last=1, dry_run="yes"),
    ],
    ids=[
        "delete_run-empty",
        "delete_run-int",
        "prune-empty-run",
        "prune-list-run",
        "gc-both",
        "gc-empty-run",
        "gc-keep-0",
        "gc-dry-run-str",
    ],
)
def test_a_sweep_refusing_its_run_id_commits_nothing(url: str, call: Any) -> None:
    """A run id (or a gc argument) the sweep refuses (InvalidInputError) is refused
    before the queue is committed, as ``prune``'s ``keep_last`` was: the refused call
    changes nothing, and a queue whose commit would fail is not what it reports."""
    with cpstore.open(url, durability="batched", batch_size=1000) as s:
        rec = s.recorder("r")
        rec.checkpoint(0, {"i": 0})
        s.flush()
        rec.checkpoint(1, {"i": 1})
        with cpstore.open(url) as o:  # another handle moves r/main: the queue conflicts
            o.recorder("r").checkpoint(1, {"moved": True})
        with pytest.raises(InvalidInputError):
            call(s)
        assert s.pending == 1  # still queued: not committed, not dropped
        with pytest.raises(ConflictError):
            s.flush()
