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

import multiprocessing
from typing import Any
from unittest import mock

from lg_delta import graph as delta_graph
from lg_puts import cfg, put_value
from pg_cluster import backend_store, backend_url, pg_cluster, pg_url  # noqa: F401 - fixtures

from cpstore.langgraph import CpstoreSaver, _maintain
from cpstore.langgraph._codec import run_for
from cpstore.langgraph._write import Writer
from cpstore.store import Store, retention

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


def _second_prune(url: str, pruned: Any, go: Any) -> None:
    """The other process: keep_latest of the thread, its reclaim held until ``go``."""
    real = _maintain._reclaim

    def held(*args: Any) -> None:
        pruned.set()
        assert go.wait(60)
        real(*args)

    with (
        CpstoreSaver.from_conn_string(url) as saver,
        mock.patch.object(_maintain, "_reclaim", held),
    ):
        saver.prune([THREAD], strategy="keep_latest")


def test_a_second_prune_in_another_process(url: str) -> None:
    """The same window with B a real process: B's prune txn runs between A's re-record
    and A's resets, B's reclaim after A is done."""
    ctx = multiprocessing.get_context("spawn")
    pruned, go = ctx.Event(), ctx.Event()
    with CpstoreSaver.from_conn_string(url) as a:
        c0 = put_value(a, THREAD, None, "v0")
        real_forget = Writer.forget
        calls: list[Any] = []

        def forget(self: Writer, run: str | None = None) -> None:
            if self is a._writer and run is None:
                calls.append(None)
                if len(calls) == 2:  # A re-recorded, its resets next: B's prune txn
                    calls.append(ctx.Process(target=_second_prune, args=(url, pruned, go)))
                    calls[-1].start()
                    assert pruned.wait(120)
            real_forget(self, run)

        with mock.patch.object(Writer, "forget", forget):
            a.prune([THREAD], strategy="keep_latest")
        go.set()
        other = calls[2]
        other.join(120)
        assert other.exitcode == 0

        assert _values(a, c0) == {"x": "v0"}
        listed = [t.config["configurable"]["checkpoint_id"] for t in a.list(cfg(THREAD))]
        assert listed == [c0]
        assert a.store.verify().ok


def test_an_entry_retention_pruned_does_not_hold_its_branch(store: Store) -> None:
    """The reset guard counts only entries whose checkpoint is stored: a DeltaChannel
    thread kept to the root whose oldest checkpoints ``keep_last`` swept (their entries
    read as gone) still has its old ``main`` reset and reclaimed by keep_latest."""
    saver = CpstoreSaver(store)
    config: dict[str, Any] = {"configurable": {"thread_id": THREAD}}
    graph = delta_graph(saver, rare=True)
    for i in range(2):
        graph.invoke({"log": [f"in{i}"]}, config)
    run = run_for(THREAD)
    assert set(store.branches(run)) == {"main"}
    retention.prune(store.backend, keep_last=2, run_id=run)
    listed = [t.config["configurable"]["checkpoint_id"] for t in saver.list(config)]
    saver.prune([THREAD], strategy="keep_latest")
    assert "main" not in store.branches(run)
    assert [t.config["configurable"]["checkpoint_id"] for t in saver.list(config)] == listed
    assert store.verify().ok
