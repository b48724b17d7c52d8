"""A put planned to continue its parent's branch (the parent was the head when the plan
read the refs), while another process moves that branch before the put's recorder is
made: the recorder was made on the head as it was then, not on the planned parent.

One checkpoint of the other process in that window, of the same step, and the put was
recorded as a child of the other process's checkpoint, a checkpoint it never saw (its
cpstore parent and logs said so, its LangGraph parent said otherwise; ``verify()``
clean). Two, a step past the put's, and the put was refused ("steps never go
backwards", an InvalidInputError out of LangGraph's invoke). Under load,
``tests/test_langgraph_processes.py::test_two_processes_on_one_store_lose_nothing``
can open this window between its two processes' invokes on the shared thread. Now the
recorder is made from the planned parent, so a moved branch is a lost race: the put
plans again and forks from its parent, and the other process's head stays.
"""

from __future__ import annotations

import multiprocessing
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from lg_puts import cfg
from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures

import cpstore
from cpstore.langgraph import CpstoreSaver
from cpstore.langgraph._codec import run_for
from cpstore.langgraph._read import Entry, entry_at
from cpstore.langgraph._write import Writer
from cpstore.store import Store

THREAD = "shared"


def _put(saver: CpstoreSaver, parent: str | None, value: str, step: int) -> str:
    cp: dict[str, Any] = dict(empty_checkpoint())
    cp["channel_values"] = {"x": value}
    cp["channel_versions"] = {"x": value}
    meta = {"source": "loop", "step": step, "parents": {}}
    done = saver.put(cfg(THREAD, parent), cp, meta, {"x": value})
    return str(done["configurable"]["checkpoint_id"])


def _continue(url: str, parent: str, n: int) -> list[str]:
    """The other process: ``n`` checkpoints continuing ``parent``, steps 2, 3, ..."""
    out: list[str] = []
    with CpstoreSaver.from_conn_string(url) as saver:
        for i in range(n):
            parent = _put(saver, parent, f"q{i + 2}", 2 + i)
            out.append(parent)
    return out


def _entry(st: Store, checkpoint_id: str) -> Entry:
    with st.backend.read_txn() as txn:
        entry = entry_at(txn, st.backend.db("meta"), THREAD, "", checkpoint_id)
    assert entry is not None, checkpoint_id
    return entry


@pytest.mark.parametrize("moves", [1, 2])
def test_a_branch_moved_by_another_process_after_the_plan_is_a_lost_race(
    url: str, moves: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The put forks from its own parent; nothing of the other process is adopted or lost."""
    with CpstoreSaver.from_conn_string(url) as first:
        q1 = _put(first, None, "q1", 1)
    ctx = multiprocessing.get_context("spawn")
    with cpstore.open(url) as st:
        saver = CpstoreSaver(st)
        plan_once = Writer._plan
        moved: list[str] = []

        def plan(self: Writer, *args: Any) -> Any:
            planned = plan_once(self, *args)
            if not moved:  # between the plan's read and the recorder: another process moves
                assert not planned.new_branch  # the premise: planned to continue q1's branch
                with ctx.Pool(1) as pool:
                    moved.extend(pool.apply(_continue, (url, q1, moves)))
            return planned

        monkeypatch.setattr(Writer, "_plan", plan)
        p1 = _put(saver, q1, "p1", 2)
        monkeypatch.undo()

        assert len(moved) == moves
        tup = saver.get_tuple(cfg(THREAD, p1))
        assert tup is not None and tup.checkpoint["channel_values"] == {"x": "p1"}
        assert tup.parent_config is not None
        assert tup.parent_config["configurable"]["checkpoint_id"] == q1
        mine, parent, theirs = _entry(st, p1), _entry(st, q1), _entry(st, moved[-1])
        # the store's lineage is LangGraph's: p1's cpstore parent is q1's checkpoint
        with st.read(mine.cid.hex()) as view:
            assert view.manifest.parent == parent.cid.hex()
        assert mine.branch != parent.branch  # a fork, not the other process's branch
        # the other process's head is untouched, and all it wrote reads
        assert st.ref(run_for(THREAD), parent.branch) == theirs.cid.hex()
        listed = {t.config["configurable"]["checkpoint_id"] for t in saver.list(cfg(THREAD))}
        assert listed == {q1, p1, *moved}
        assert st.verify().ok


def _sweep(url: str, strategy: str) -> str:
    """The other process: ``prune(strategy=)`` of the thread (a delete sweeps its run)."""
    with CpstoreSaver.from_conn_string(url) as saver:
        saver.prune([THREAD], strategy=strategy)
    return strategy


@pytest.mark.parametrize("strategy", ["delete", "keep_latest"])
def test_a_parent_swept_by_another_process_after_the_plan_plans_again(
    url: str, strategy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The planned parent's checkpoint is swept before the recorder is made from it: the
    put plans again (not a NotFoundError) and lands on what the store holds now, a root
    when the thread was deleted, a child of the kept parent when it was kept."""
    with CpstoreSaver.from_conn_string(url) as first:
        q0 = _put(first, None, "q0", 0)
        q1 = _put(first, q0, "q1", 1)
    ctx = multiprocessing.get_context("spawn")
    with cpstore.open(url) as st:
        saver = CpstoreSaver(st)
        plan_once = Writer._plan
        swept: list[str] = []

        def plan(self: Writer, *args: Any) -> Any:
            planned = plan_once(self, *args)
            if not swept:
                assert not planned.new_branch
                with ctx.Pool(1) as pool:
                    swept.append(pool.apply(_sweep, (url, strategy)))
            return planned

        monkeypatch.setattr(Writer, "_plan", plan)
        p1 = _put(saver, q1, "p1", 2)
        monkeypatch.undo()

        assert swept == [strategy]
        tup = saver.get_tuple(cfg(THREAD, p1))
        assert tup is not None and tup.checkpoint["channel_values"] == {"x": "p1"}
        mine = _entry(st, p1)
        with st.read(mine.cid.hex()) as view:
            recorded_parent = view.manifest.parent
        if strategy == "delete":
            assert recorded_parent is None
            listed = {t.config["configurable"]["checkpoint_id"] for t in saver.list(cfg(THREAD))}
            assert listed == {p1}
        else:
            assert recorded_parent == _entry(st, q1).cid.hex()
        assert st.verify().ok
