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

from langchain_core.runnables import RunnableConfig
from langgraph.graph import START, StateGraph
from pg_cluster import backend_url  # noqa: F401 - fixture

from cpstore.langgraph import CpstoreSaver, diff_threads


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
