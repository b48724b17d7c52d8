"""A put planned to continue its parent's branch while a keep_latest of the thread (the
same or another saver) moves that parent: windows that hold.

The put's plan read the parent on ``main`` at its head; the prune then re-records the
parent on a fresh branch, resets ``main`` and releases its head. A recorder made from
the planned parent after the reset, before the sweep, forks a new ``main`` from the old
copy (still stored): the put lands there, the sweep keeps that lineage, and the put
reads back with its values, its parent's entry on the kept copy (verify clean: a
cpstore parent no entry names is not judged). Made after the sweep, the parent is gone:
NotFoundError turns into a replan, and the put continues the kept copy. Made before the
sweep and committed after it (``inside_put``), the commit finds its parent swept and
the put plans again onto the kept copy: nothing references a swept checkpoint.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest
from lg_puts import cfg, put_value
from pg_cluster import backend_store, pg_cluster, pg_url  # noqa: F401 - fixtures

from cpstore.langgraph import CpstoreSaver, _maintain
from cpstore.langgraph._read import entry_at
from cpstore.langgraph._write import Writer
from cpstore.store import Store, retention

THREAD = "t"


@pytest.mark.parametrize("when", ["before_sweep", "after_sweep", "inside_put"])
def test_a_put_planned_on_the_moved_parent(store: Store, when: str) -> None:
    a, b = CpstoreSaver(store), CpstoreSaver(store)
    c0 = put_value(a, THREAD, None, "v0")
    c1 = put_value(a, THREAD, c0, "v1")
    real_plan, real_sweep = Writer._plan, retention.sweep
    stale = real_plan(b._writer, THREAD, "", c1, "next", 0)
    assert not stale.new_branch and stale.branch == "main"  # continue c1 on main
    made: list[str] = []
    plans: list[Any] = []

    def plan(self: Writer, *args: Any) -> Any:  # the first try uses the stale plan
        plans.append(args)
        return stale if len(plans) == 1 else real_plan(self, *args)

    real_branch = Writer._branch

    def branch(self: Writer, planned: Any) -> Any:  # inside_put: the sweep runs here
        made_branch = real_branch(self, planned)
        if when == "inside_put" and len(plans) == 1:
            real_sweep(self.store.backend)
        return made_branch

    def put() -> None:
        with mock.patch.object(Writer, "_plan", plan), mock.patch.object(Writer, "_branch", branch):
            cp = b.get_tuple(cfg(THREAD, c1))
            assert cp is not None
            made.append(put_value(b, THREAD, c1, "v2"))

    def sweep(*args: Any, **kw: Any) -> Any:
        if when in ("before_sweep", "inside_put"):
            put()
        out = real_sweep(*args, **kw)
        if when == "after_sweep":
            put()
        return out

    with mock.patch.object(_maintain, "sweep", sweep):
        a.prune([THREAD], strategy="keep_latest")
    assert len(made) == 1
    # before the sweep the stale plan commits (a new main forked from the old copy);
    # after it (or between the recorder and its commit), the swept parent refuses it
    # and the put plans again
    assert len(plans) == (1 if when == "before_sweep" else 2)

    tup = a.get_tuple(cfg(THREAD, made[0]))
    assert tup is not None and tup.checkpoint["channel_values"] == {"x": "v2"}
    assert tup.parent_config is not None
    assert tup.parent_config["configurable"]["checkpoint_id"] == c1
    listed = [t.config["configurable"]["checkpoint_id"] for t in a.list(cfg(THREAD))]
    assert sorted(listed) == sorted([c1, made[0]])
    with store.backend.read_txn() as txn:
        parent = entry_at(txn, store.backend.db("meta"), THREAD, "", c1)
        mine = entry_at(txn, store.backend.db("meta"), THREAD, "", made[0])
    assert parent is not None and mine is not None
    if when == "after_sweep":  # replanned: continues the kept copy
        assert (mine.run, mine.branch) == (parent.run, parent.branch)
    assert store.verify().ok
