"""review80: a chain whose start retention pruned is compared from the step both keep.

``saver.prune`` (keep_latest) drops a thread's older checkpoints: its chain, walked
back from the newest, stops at the first pruned one. ``diff_threads`` compared chains
position by position from their start, so a pruned thread's newest checkpoint (step 2)
was compared with the other's root (step -1): "diverge at step 2 (checkpoint 0 of
each chain): node (input) wrote different __start__, log", where the threads differ
in what node ``b`` wrote to ``log`` at step 2; both pruned, the node was "(input)".
Chains whose start was pruned are now compared from the newest first step both keep
(the summary says so), and the node is read from the writes at the parent where they
are still stored. Both engines."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.graph import START, StateGraph
from pg_cluster import backend_url  # noqa: F401 - fixture

from cpstore.errors import NotFoundError
from cpstore.langgraph import CpstoreSaver, diff_threads
from cpstore.store import retention


class _S(TypedDict):
    log: Annotated[list[str], operator.add]


def _cfg(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def _graph(saver: CpstoreSaver) -> Any:
    def a(state: _S) -> dict[str, Any]:
        return {"log": ["a"]}

    def b(state: _S, config: RunnableConfig) -> dict[str, Any]:
        thread = config["configurable"]["thread_id"]
        return {"log": ["b " + ("same" if thread in "pq" else thread)]}

    g = StateGraph(_S)
    g.add_node("a", a)
    g.add_node("b", b)
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    return g.compile(checkpointer=saver)


def test_a_pruned_thread_is_compared_from_the_step_both_keep(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        graph = _graph(saver)
        for t in "xypq":
            graph.invoke({"log": ["in"]}, _cfg(t))
        saver.prune(["x", "p"])
        for one, other in (("x", "y"), ("y", "x")):
            diff = diff_threads(saver.store, _cfg(one), _cfg(other))
            # before: step 2 against step -1, "node (input) wrote different __start__, log"
            assert not diff.same and diff.step == 2, diff.summary
            assert diff.channels == ("log",) and diff.nodes == ("b",), diff.summary
            assert "pruned" in diff.summary, diff.summary
        diff = diff_threads(saver.store, _cfg("p"), _cfg("q"))
        assert diff.same and "pruned" in diff.summary, diff.summary
        saver.prune(["y"])
        diff = diff_threads(saver.store, _cfg("x"), _cfg("y"))
        assert not diff.same and diff.step == 2 and diff.channels == ("log",), diff.summary
        assert diff.nodes == ("(pruned)",), diff.summary  # before: "(input)"


def _at(thread: str, checkpoint_id: str) -> dict[str, Any]:
    conf = {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": checkpoint_id}
    return {"configurable": conf}


def test_checkpoints_retention_swept_are_not_found_never_the_same(url: str) -> None:
    """Store retention (``cpstore gc --keep-last``) sweeps a thread's older checkpoints
    and leaves their index entries (tombstoned): a side naming one had an empty chain,
    and two such sides were "same values at all 0 checkpoints" (their values differed).
    Such a side is now NotFoundError, as ``get_tuple`` finds no such checkpoint."""
    with CpstoreSaver.from_conn_string(url) as saver:
        graph = _graph(saver)
        for t in "xy":
            graph.invoke({"log": ["in"]}, _cfg(t))
        older = {
            t: [
                s.config["configurable"]["checkpoint_id"] for s in graph.get_state_history(_cfg(t))
            ][1]
            for t in "xy"
        }
        assert retention.prune(saver.store.backend, keep_last=1, run_id=None) > 0
        for one, other in ((_at("x", older["x"]), _at("y", older["y"])),
                           (_at("x", older["x"]), _at("x", older["x"]))):  # fmt: skip
            with pytest.raises(NotFoundError, match="pruned"):
                diff_threads(saver.store, one, other)
        assert saver.get_tuple(_at("x", older["x"])) is None
        diff = diff_threads(saver.store, _cfg("x"), _cfg("y"))  # the newest are kept
        assert not diff.same and diff.step == 2 and diff.nodes == ("b",), diff.summary


def test_a_chain_cut_at_step_0_is_named(url: str) -> None:
    """Step 0 is a step: the note named no side when the cut chain started there."""
    with CpstoreSaver.from_conn_string(url) as saver:
        g = StateGraph(_S)
        g.add_node("a", lambda state: {"log": ["a"]})
        g.add_edge(START, "a")
        graph = g.compile(checkpointer=saver, interrupt_before=["a"])
        for t in "xy":
            graph.invoke({"log": ["in"]}, _cfg(t))
        saver.prune(["x"])
        diff = diff_threads(saver.store, _cfg("x"), _cfg("y"))
        assert diff.same, diff.summary
        assert diff.summary.endswith("(compared from step 0: older checkpoints of A were pruned)")


def test_steps_one_side_did_not_record_are_skipped(url: str) -> None:
    """``durability="exit"`` records a run's last checkpoint only (a root at step 2):
    it was compared position by position with the other's root, "diverge at step -1
    (checkpoint 0 of each chain): node (input) wrote different __start__, log", though
    both hold the same at step 2 and resume alike. The chains are compared at the steps
    both recorded; a divergence there is named at its step."""
    with CpstoreSaver.from_conn_string(url) as saver:
        graph = _graph(saver)
        graph.invoke({"log": ["in"]}, _cfg("p"))
        graph.invoke({"log": ["in"]}, _cfg("q"), durability="exit")
        graph.invoke({"log": ["in"]}, _cfg("y"), durability="exit")
        diff = diff_threads(saver.store, _cfg("p"), _cfg("q"))
        assert diff.same, diff.summary
        assert "recorded on A only" in diff.summary, diff.summary
        diff = diff_threads(saver.store, _cfg("p"), _cfg("y"))
        assert not diff.same and diff.step == 2 and diff.channels == ("log",), diff.summary
        assert diff.nodes == ("b",), diff.summary  # y did not record who wrote it


def test_a_chain_that_goes_on_has_no_note(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        _graph(saver).invoke({"log": ["in"]}, _cfg("p"))
        g = StateGraph(_S)
        g.add_node("a", lambda state: {"log": ["a"]})
        g.add_node("b", lambda state: {"log": ["b same"]})
        g.add_edge(START, "a")
        g.add_edge("a", "b")
        g.compile(checkpointer=saver, interrupt_before=["b"]).invoke({"log": ["in"]}, _cfg("q"))
        diff = diff_threads(saver.store, _cfg("p"), _cfg("q"))
        assert diff.summary == "same values for 3 checkpoints; only A goes on (step 2)"
