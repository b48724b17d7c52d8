"""LangGraph prune(keep_latest) on a thread whose DeltaChannel has no snapshot yet.

A DeltaChannel stores a value (a ``_DeltaSnapshot``) every ``snapshot_frequency``
updates; in between, its state is rebuilt from the pending writes of the parent chain
back to the nearest checkpoint holding one, or back to the root when none does yet.
keep_latest kept the ancestors only when the walk met a snapshot: on a thread that had
not reached its first, it kept the newest checkpoint alone and the channel silently
read empty afterwards (no error: ``get_delta_channel_history`` just found no writes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lg_delta import graph as delta_graph
from pg_cluster import backend_url  # noqa: F401 - fixture

from cpstore.langgraph import CpstoreSaver


def test_keep_latest_keeps_a_delta_channels_history_back_to_the_root(url: str) -> None:
    """Five runs, no snapshot yet: the state reads the same after the prune, and a run
    after it goes on from it."""
    config: dict[str, Any] = {"configurable": {"thread_id": "d"}}
    with CpstoreSaver.from_conn_string(url) as saver:
        graph = delta_graph(saver, rare=True)
        for i in range(5):
            graph.invoke({"log": [f"in{i}"]}, config)
        before = list(graph.get_state(config).values["log"])
        assert len(before) == 10
        saver.prune(["d"])
        assert graph.get_state(config).values["log"] == before  # before the fix: []
        graph.invoke({"log": ["after"]}, config)
        assert graph.get_state(config).values["log"] == [*before, "after", "n11"]
        assert saver.store.verify().ok


def test_keep_latest_still_drops_what_a_snapshot_makes_needless(tmp_path: Path) -> None:
    """With snapshots (every 4 updates), keep_latest still drops the checkpoints before
    the nearest one: the root-ward rule keeps only what the walk needs."""
    config: dict[str, Any] = {"configurable": {"thread_id": "d"}}
    with CpstoreSaver.from_conn_string(tmp_path / "s") as saver:
        graph = delta_graph(saver)
        for i in range(7):
            graph.invoke({"log": [f"in{i}"]}, config)
        before = list(graph.get_state(config).values["log"])
        count = len(list(saver.list(config)))
        saver.prune(["d"])
        assert 1 < len(list(saver.list(config))) < count
        assert graph.get_state(config).values["log"] == before
