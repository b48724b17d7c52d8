"""A put whose recorder was made from its planned parent, and which then reads the
parent's parts for a channel the caller did not pass (unchanged since the parent, not in
``new_versions``), while a keep_latest of the thread re-records that parent on a kept
copy and sweeps the old one.

Seen in CI (``test_lg_prune_beside_graph.py``, LMDB, a DeltaChannel graph pruned while
it runs): the graph's put died with ``NotFoundError: checkpoint was pruned`` from the
parent-parts read, an acknowledged superstep lost to a maintenance call. The read now
finds the parent swept since the plan and plans again (the kept copy, same parts), as a
recorder made after the sweep already did.
"""

from __future__ import annotations

from typing import Any

from langgraph.checkpoint.base import empty_checkpoint
from lg_puts import cfg
from pg_cluster import backend_store, pg_cluster, pg_url  # noqa: F401 - fixtures

from cpstore.langgraph import CpstoreSaver
from cpstore.langgraph._write import Writer
from cpstore.store import Store

THREAD = "t"


def _put(saver: CpstoreSaver, parent: str | None, x: str, y: str, new: dict[str, str]) -> str:
    cp: dict[str, Any] = dict(empty_checkpoint())
    cp["channel_versions"] = {"x": x, "y": y}
    cp["channel_values"] = {k: f"value of {k} at {v}" for k, v in new.items()}
    meta = {"source": "loop", "step": 0, "parents": {}}
    done = saver.put(cfg(THREAD, parent), cp, meta, new)
    return str(done["configurable"]["checkpoint_id"])


def test_a_parent_moved_before_its_parts_are_read(store: Store) -> None:
    a, b = CpstoreSaver(store), CpstoreSaver(store)
    c0 = _put(a, None, "x1", "y1", {"x": "x1", "y": "y1"})
    c1 = _put(a, c0, "x2", "y1", {"x": "x2"})
    real = Writer._parent_parts
    calls: list[int] = []

    def parts_after_a_prune(self: Writer, parent: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:  # b's recorder is made from c1; the prune moves c1 now
            a.prune([THREAD], strategy="keep_latest")
        return real(self, parent)

    Writer._parent_parts = parts_after_a_prune  # type: ignore[method-assign]
    try:
        c2 = _put(b, c1, "x3", "y1", {"x": "x3"})  # y unchanged: read from c1
    finally:
        Writer._parent_parts = real  # type: ignore[method-assign]
    assert len(calls) == 2  # the first read found c1 moved; the second read the copy
    got = a.get_tuple(cfg(THREAD, c2))
    assert got is not None
    assert got.checkpoint["channel_values"] == {"x": "value of x at x3", "y": "value of y at y1"}
    assert got.parent_config is not None
    assert got.parent_config["configurable"]["checkpoint_id"] == c1
    assert [t.config["configurable"]["checkpoint_id"] for t in a.list(cfg(THREAD))] == [c2, c1]
    assert store.verify().ok
