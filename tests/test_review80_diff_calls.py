"""review80: a subgraph a node calls twice is compared call by call.

A node that invokes a compiled subgraph more than once keeps each call's checkpoints in
its own namespace: the first in ``node:<task id>``, the next in ``node:<task id>|1``
(LangGraph numbers the later calls). A resume re-runs the node, and each call goes on
from its namespace: the finished first call returns what it returned, the second,
interrupted beside a finished node, applies that node's pending writes. ``diff_threads``
compared only ``node:<task id>`` and took ``|1`` for a deeper level: two threads whose
second calls' pending writes differed were "same values at all 2 checkpoints" while
their resumes differed. Both engines."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.graph import START, StateGraph
from langgraph.types import Command, interrupt
from pg_cluster import backend_url  # noqa: F401 - fixture

from cpstore.langgraph import CpstoreSaver, diff_threads


class _S(TypedDict):
    log: Annotated[list[str], operator.add]


def _cfg(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def _graph(saver: CpstoreSaver, by_thread: str) -> Any:
    """``node`` calls ``sub`` twice; in the second call ``asks`` interrupts beside
    ``fast``, which writes its thread's id on the threads in ``by_thread``."""

    def fast(state: _S, config: RunnableConfig) -> dict[str, Any]:
        thread = config["configurable"]["thread_id"]
        second = state["log"][0] == "second"
        return {"log": ["fast " + (thread if second and thread in by_thread else "")]}

    def asks(state: _S) -> dict[str, Any]:
        if state["log"][0] == "second":
            return {"log": ["asked " + str(interrupt("sub?"))]}
        return {"log": ["no ask"]}

    inner = StateGraph(_S)
    inner.add_node("fast", fast)
    inner.add_node("asks", asks)
    inner.add_edge(START, "fast")
    inner.add_edge(START, "asks")
    sub = inner.compile()

    def node(state: _S, config: RunnableConfig) -> dict[str, Any]:
        first = sub.invoke({"log": ["first"]}, config)
        second = sub.invoke({"log": ["second"]}, config)
        return {"log": first["log"] + second["log"]}

    g = StateGraph(_S)
    g.add_node("node", node)
    g.add_edge(START, "node")
    return g.compile(checkpointer=saver)


def test_a_second_call_of_a_subgraph_is_compared(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        graph = _graph(saver, by_thread="ab")
        for t in "ab":
            graph.invoke({"log": ["in"]}, _cfg(t))
        diff = diff_threads(saver.store, _cfg("a"), _cfg("b"))
        # before: "same values at all 2 checkpoints"
        assert not diff.same and diff.pending and not diff.undecidable, diff.summary
        assert "node" in diff.nodes and diff.channels == ("log",), diff.summary
        assert "call 1" in diff.summary, diff.summary
        got = [graph.invoke(Command(resume="ok"), _cfg(t))["log"] for t in "ab"]
        assert got[0] != got[1]  # and the resumes do differ
        same = _graph(saver, by_thread="")
        for t in "cd":
            same.invoke({"log": ["in"]}, _cfg(t))
        assert diff_threads(saver.store, _cfg("c"), _cfg("d")).same
