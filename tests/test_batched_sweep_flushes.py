"""A sweep on a ``durability="batched"`` handle first commits that handle's queue.

Before: prune, gc and delete_run swept the store as committed, blind to the handle's
own queued checkpoints. A queued checkpoint forked from a checkpoint the sweep then
removed failed the next flush ("parent pruned"), and a failed flush drops the whole
batch: every queued checkpoint, of any run, whose id the recorder had already
returned, was lost (retention96's finding). Now the sweep flushes first, as a copy
does, so it sees (and keeps what is needed by) everything the handle acknowledged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures

import cpstore


def _prune(s: Any) -> object:
    return s.prune(keep_last=1)


def _gc(s: Any) -> object:
    return s.gc(keep_last=1)


def _gc_dry(s: Any) -> object:
    return s.gc(keep_last=1, dry_run=True)


def _delete_other(s: Any) -> object:
    return s.delete_run("other")


SWEEPS: dict[str, Callable[[Any], object]] = {
    "prune": _prune,
    "gc": _gc,
    "gc_dry_run": _gc_dry,
    "delete_run": _delete_other,
}


@pytest.mark.parametrize("sweep", sorted(SWEEPS))
def test_a_sweep_on_a_batched_handle_keeps_the_handles_queued_checkpoints(
    url: str, sweep: str
) -> None:
    at = url
    with cpstore.open(at, durability="batched", batch_size=1000) as s:
        rec = s.recorder("r")
        first = rec.checkpoint(0, {"i": 0})
        rec.checkpoint(1, {"i": 1})
        rec.checkpoint(2, {"i": 2})
        s.recorder("other").checkpoint(0, {"o": 0})
        s.flush()
        fork = s.recorder("r", branch="side", parent=first).checkpoint(1, {"side": 1})
        queued = s.recorder("q").checkpoint(0, {"q": 0})
        assert s.pending == 2
        SWEEPS[sweep](s)
        assert s.pending == 0  # the sweep committed the queue before it swept
        s.flush()  # nothing left to fail
        assert s.ref("r", "side") == fork and s.ref("q") == queued
        with s.read(fork) as cp:
            assert cp.state() == {"side": 1}
        with s.read(queued) as cp:
            assert cp.state() == {"q": 0}
        assert s.verify().ok
    with cpstore.open(at) as s:  # durable: a fresh handle reads both heads
        assert s.ref("r", "side") == fork and s.ref("q") == queued
        assert s.verify().ok
