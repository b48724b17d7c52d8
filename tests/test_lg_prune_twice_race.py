"""Two keep_latest prunes of one thread, the second's prune txn between the first's
re-record and its resets.

A thread whose kept checkpoint is a root (one checkpoint, or an idle thread pruned
before: its newest was recorded again as a root) is re-recorded by each prune on a
fresh branch. The first prune (A) moves the entry to a fork branch, then resets
``main``; the second (B) read ``main`` at its old head in its prune txn, and its
re-record lands on the ``main`` A just freed: the same run, branch, parent (none), parts
and step, so the same cpstore checkpoint id as the head B read. B's compare-and-set
reset of ``main`` then succeeded and deleted the branch the entry had just moved to,
and the sweep took the checkpoint: an acknowledged checkpoint, no longer readable.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

from lg_puts import cfg, put_value
from pg_cluster import backend_store, pg_cluster, pg_url  # noqa: F401 - fixtures

from cpstore.langgraph import CpstoreSaver, _maintain
from cpstore.langgraph._write import Writer
from cpstore.store import Store

THREAD = "t"


def _values(saver: CpstoreSaver, checkpoint_id: str) -> Any:
    tup = saver.get_tuple(cfg(THREAD, checkpoint_id))
    return None if tup is None else tup.checkpoint["channel_values"]


def test_a_second_prune_between_the_first_ones_re_record_and_reset(store: Store) -> None:
    """B's prune txn sees A's fresh branch and ``main`` at its old head; A resets
    ``main``; B re-records onto ``main`` (the old head's id again) and resets it."""
    a, b = CpstoreSaver(store), CpstoreSaver(store)
    c0 = put_value(a, THREAD, None, "v0")
    real_reclaim = _maintain._reclaim
    real_forget = Writer.forget
    held: list[tuple[Any, ...]] = []
    calls: list[None] = []

    def hold(*args: Any) -> None:  # B's reclaim waits: its prune txn is done
        held.append(args)

    def forget(self: Writer, run: str | None = None) -> None:
        if self is a._writer and run is None:
            calls.append(None)
            if len(calls) == 2:  # A re-recorded, its resets next: B's prune txn runs now
                with mock.patch.object(_maintain, "_reclaim", hold):
                    b.prune([THREAD], strategy="keep_latest")
                assert held
        real_forget(self, run)

    with mock.patch.object(Writer, "forget", forget):
        a.prune([THREAD], strategy="keep_latest")  # A, whole
    assert held
    real_reclaim(*held[0])  # B's reclaim, after A's resets and sweep

    assert _values(a, c0) == {"x": "v0"}
    listed = [t.config["configurable"]["checkpoint_id"] for t in a.list(cfg(THREAD))]
    assert listed == [c0]
    assert store.verify().ok
