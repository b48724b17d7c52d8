"""review99: a sweep's failed commit of the handle's queue says it came from that commit.

A sweep on a batched handle first commits the handle's queued checkpoints (retention96).
When that commit fails, the caller of ``prune`` got the queued checkpoint's own error
("the branch moved since this recorder read it", at a ref the prune was not asked about),
with nothing saying it came from the queue's commit or that the sweep had not run. It is
raised as the flush raised it (``str()`` unchanged: callers and the chaos checker match
it), with a note naming the sweep.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures

import cpstore
from cpstore.errors import ConflictError

SWEEPS: dict[str, tuple[Callable[[Any], object], str]] = {
    "prune": (lambda s: s.prune(keep_last=1), "before the prune,"),
    "gc": (lambda s: s.gc(keep_last=1), "before the gc,"),
    "gc_dry_run": (lambda s: s.gc(keep_last=1, dry_run=True), "before the gc (dry run),"),
    "delete_run": (lambda s: s.delete_run("old"), "before the delete_run,"),
}


def _conflicting_queue(url: str, s: Any) -> str:
    """Queue a checkpoint on r/main, then move r/main in another handle; returns the
    ``str()`` the handle's own flush raises for that queue (checked on a twin store)."""
    rec = s.recorder("r")
    rec.checkpoint(0, {"i": 0})
    s.recorder("old").checkpoint(0, {"o": 0})
    s.flush()
    rec.checkpoint(1, {"i": 1})
    with cpstore.open(url) as o:
        moved = o.recorder("r").checkpoint(1, {"moved": True})
    return moved


@pytest.mark.parametrize("sweep", sorted(SWEEPS))
def test_a_sweeps_failed_commit_names_the_sweep_in_a_note(url: str, sweep: str) -> None:
    call, words = SWEEPS[sweep]
    with cpstore.open(url, durability="batched", batch_size=1000) as s:
        moved = _conflicting_queue(url, s)
        with pytest.raises(ConflictError) as raised:
            call(s)
        exc = raised.value
        # the flush's own error, as flush() words it: nothing added to str()
        assert exc.what == "the branch moved since this recorder read it"
        assert str(exc).startswith(exc.what) and "before the" not in str(exc)
        assert exc.where == "refs/r/main" and exc.got == moved
        notes = getattr(exc, "__notes__", [])
        assert len(notes) == 1, notes
        assert "queued checkpoints (1 queued)" in notes[0] and words in notes[0], notes
        assert "nothing was swept" in notes[0]
        assert s.ref("old") is not None  # and so it is: the sweep did not run
        assert s.pending == 0


def test_a_flush_alone_carries_no_sweep_note(url: str) -> None:
    with cpstore.open(url, durability="batched", batch_size=1000) as s:
        _conflicting_queue(url, s)
        with pytest.raises(ConflictError) as raised:
            s.flush()
        assert not getattr(raised.value, "__notes__", [])
