"""review77: ``diff_threads`` compares what a subgraph interrupted mid-run keeps pending.

A subgraph node that calls ``interrupt()`` beside a finished parallel node of its own
keeps that node's writes pending on the subgraph's checkpoint, in the namespace
``sub:<task id>``, not the parent's: resuming applies them there. Two threads whose
subgraphs' pending writes differ resume differently, and ``diff_threads`` on the root
namespace said "same values at all 2 checkpoints" (b953070 compared the parent's
pending writes only). The subgraph namespace of each side is found by its checkpoints'
``metadata["parents"]`` naming the parent's last checkpoint, and compared as a chain
(task ids, which name the namespace, differ between threads). Both engines."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.graph import START, StateGraph
from langgraph.types import Command, Send, interrupt
from pg_cluster import backend_url  # noqa: F401 - fixture

from cpstore.langgraph import CpstoreSaver, diff_threads


class _S(TypedDict):
    log: Annotated[list[str], operator.add]


def _cfg(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def _graph(saver: CpstoreSaver, by_thread: bool, nested: bool = False) -> Any:
    def fast(state: _S, config: RunnableConfig) -> dict[str, Any]:
        said = config["configurable"]["thread_id"] if by_thread else "same"
        return {"log": ["inner fast " + said]}

    def asks(state: _S) -> dict[str, Any]:
        return {"log": ["asked " + str(interrupt("sub?"))]}

    inner = StateGraph(_S)
    inner.add_node("fast", fast)
    inner.add_node("asks", asks)
    inner.add_edge(START, "fast")
    inner.add_edge(START, "asks")
    sub = inner.compile()
    if nested:
        mid = StateGraph(_S)
        mid.add_node("deeper", sub)
        mid.add_edge(START, "deeper")
        sub = mid.compile()
    g = StateGraph(_S)
    g.add_node("sub", sub)
    g.add_edge(START, "sub")
    return g.compile(checkpointer=saver)


def test_a_subgraph_whose_pending_writes_differ_is_a_divergence(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        graph = _graph(saver, by_thread=True)
        for t in ("a", "b"):
            graph.invoke({"log": ["in"]}, _cfg(t))
        diff = diff_threads(saver.store, _cfg("a"), _cfg("b"))
        assert not diff.same, diff.summary  # before: "same values at all 2 checkpoints"
        assert diff.pending and "sub" in diff.nodes and diff.channels == ("log",)
        assert "subgraph" in diff.summary
        # and the resumes do differ
        got = [graph.invoke(Command(resume="ok"), _cfg(t))["log"] for t in ("a", "b")]
        assert got[0] != got[1]


def test_equal_subgraphs_are_the_same(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        graph = _graph(saver, by_thread=False)
        for t in ("a", "b"):
            graph.invoke({"log": ["in"]}, _cfg(t))
        diff = diff_threads(saver.store, _cfg("a"), _cfg("b"))
        assert diff.same and not diff.pending, diff.summary


def test_a_nested_subgraph_is_compared_too(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        graph = _graph(saver, by_thread=True, nested=True)
        for t in ("a", "b"):
            graph.invoke({"log": ["in"]}, _cfg(t))
        diff = diff_threads(saver.store, _cfg("a"), _cfg("b"))
        assert not diff.same and diff.pending, diff.summary
        same = _graph(saver, by_thread=False, nested=True)
        for t in ("c", "d"):
            same.invoke({"log": ["in"]}, _cfg(t))
        assert diff_threads(saver.store, _cfg("c"), _cfg("d")).same


def test_errors_are_compared_by_their_bytes(url: str) -> None:
    """Policy, pinned: a failed task's pending ``__error__`` is compared as stored, so
    two threads whose node failed with other messages diverge (LangGraph 1.x hands the
    error to the node's error handler on resume: it can resume differently)."""

    def boom(state: _S, config: RunnableConfig) -> dict[str, Any]:
        raise ValueError("boom " + config["configurable"]["thread_id"])

    def fast(state: _S) -> dict[str, Any]:
        return {"log": ["fast"]}

    with CpstoreSaver.from_conn_string(url) as saver:
        g = StateGraph(_S)
        g.add_node("boom", boom)
        g.add_node("fast", fast)
        g.add_edge(START, "boom")
        g.add_edge(START, "fast")
        graph = g.compile(checkpointer=saver)
        for t in ("a", "b"):
            with pytest.raises(ValueError, match="boom"):
                graph.invoke({"log": ["in"]}, _cfg(t))
        diff = diff_threads(saver.store, _cfg("a"), _cfg("b"))
        assert not diff.same and diff.pending and diff.channels == ("__error__",)


def test_sends_that_differ_are_named_by_their_task_paths(url: str) -> None:
    """A Send's task path holds indices only (``~__pregel_push, 0000000002, ...``): the
    two workers whose writes differ are told apart by it, not both "0000000000"."""

    def fan(state: _S) -> list[Send]:
        return [Send("w", {"log": [str(i)]}) for i in range(3)]

    def w(state: _S, config: RunnableConfig) -> dict[str, Any]:
        if state["log"] == ["1"]:
            interrupt("w1?")
        return {"log": ["done " + state["log"][0] + config["configurable"]["thread_id"]]}

    with CpstoreSaver.from_conn_string(url) as saver:
        g = StateGraph(_S)
        g.add_node("w", w)
        g.add_conditional_edges(START, fan, ["w"])
        graph = g.compile(checkpointer=saver)
        for t in ("a", "b"):
            graph.invoke({"log": ["in"]}, _cfg(t))
        diff = diff_threads(saver.store, _cfg("a"), _cfg("b"))
        assert not diff.same and diff.pending and diff.channels == ("log",)
        assert len(diff.nodes) == 2 and all(n.startswith("~__pregel_push") for n in diff.nodes)


class _Inner(TypedDict):
    log: Annotated[list[str], operator.add]
    tmp: str


def test_a_finished_subgraph_is_compared_by_its_writes_only(url: str) -> None:
    """A subgraph that finished beside a node that interrupted: its writes to the parent
    are pending there (compared); its own checkpoints are history a resume does not
    read, so steps inside it that differed do not make the threads diverge."""

    def scratch(state: _Inner, config: RunnableConfig) -> dict[str, Any]:
        return {"tmp": config["configurable"]["thread_id"]}

    def settle(state: _Inner) -> dict[str, Any]:
        return {"tmp": "same", "log": ["sub done"]}

    def asks(state: _S) -> dict[str, Any]:
        return {"log": ["asked " + str(interrupt("ok?"))]}

    inner = StateGraph(_Inner)
    inner.add_node("scratch", scratch)
    inner.add_node("settle", settle)
    inner.add_edge(START, "scratch")
    inner.add_edge("scratch", "settle")
    with CpstoreSaver.from_conn_string(url) as saver:
        g = StateGraph(_S)
        g.add_node("sub", inner.compile())
        g.add_node("asks", asks)
        g.add_edge(START, "sub")
        g.add_edge(START, "asks")
        graph = g.compile(checkpointer=saver)
        for t in ("a", "b"):
            graph.invoke({"log": ["in"]}, _cfg(t))
        diff = diff_threads(saver.store, _cfg("a"), _cfg("b"))
        assert diff.same, diff.summary
        got = [graph.invoke(Command(resume="ok"), _cfg(t))["log"] for t in ("a", "b")]
        assert got[0] == got[1]
