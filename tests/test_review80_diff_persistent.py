"""review80: a subgraph compiled with ``checkpointer=True`` is compared too.

Such a subgraph keeps one history per thread, in the namespace of its node with the
task ids removed (``sub``, not ``sub:<task id>``), and goes on from it: mid-run on a
resume, and on the thread's next run (its state is memory). ``_diff_subgraphs`` looked
only at namespaces ending in a task id, so two threads whose persistent subgraph was
interrupted with other pending writes were "same values at all 2 checkpoints" while
their resumes differed, and threads whose persistent subgraph remembered other values
were the same while their next runs differed. Both engines."""

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


class _Inner(TypedDict, total=False):
    log: Annotated[list[str], operator.add]
    memo: str


def _cfg(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def _said(config: RunnableConfig, by_thread: bool) -> str:
    return config["configurable"]["thread_id"] if by_thread else "same"


def _asking(saver: CpstoreSaver, by_thread: bool, nested: bool = False) -> Any:
    def fast(state: _S, config: RunnableConfig) -> dict[str, Any]:
        return {"log": ["fast " + _said(config, by_thread)]}

    def asks(state: _S) -> dict[str, Any]:
        return {"log": ["asked " + str(interrupt("sub?"))]}

    inner = StateGraph(_S)
    inner.add_node("fast", fast)
    inner.add_node("asks", asks)
    inner.add_edge(START, "fast")
    inner.add_edge(START, "asks")
    sub: Any = inner.compile(checkpointer=True)
    if nested:
        mid = StateGraph(_S)
        mid.add_node("sub", sub)
        mid.add_edge(START, "sub")
        sub = mid.compile()
    g = StateGraph(_S)
    g.add_node("sub", sub)
    g.add_edge(START, "sub")
    return g.compile(checkpointer=saver)


def test_a_persistent_subgraph_mid_run_is_compared(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        graph = _asking(saver, by_thread=True)
        for t in "ab":
            graph.invoke({"log": ["in"]}, _cfg(t))
        diff = diff_threads(saver.store, _cfg("a"), _cfg("b"))
        # before: "same values at all 2 checkpoints"
        assert not diff.same and diff.pending and not diff.undecidable, diff.summary
        assert "sub" in diff.nodes and diff.channels == ("log",), diff.summary
        got = [graph.invoke(Command(resume="ok"), _cfg(t))["log"] for t in "ab"]
        assert got[0] != got[1]
        same = _asking(saver, by_thread=False)
        for t in "cd":
            same.invoke({"log": ["in"]}, _cfg(t))
        assert diff_threads(saver.store, _cfg("c"), _cfg("d")).same


def test_a_nested_persistent_subgraph_mid_run_is_compared(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        graph = _asking(saver, by_thread=True, nested=True)
        for t in "ab":
            graph.invoke({"log": ["in"]}, _cfg(t))
        diff = diff_threads(saver.store, _cfg("a"), _cfg("b"))
        assert not diff.same and diff.pending, diff.summary
        same = _asking(saver, by_thread=False, nested=True)
        for t in "cd":
            same.invoke({"log": ["in"]}, _cfg(t))
        assert diff_threads(saver.store, _cfg("c"), _cfg("d")).same


def test_what_a_persistent_subgraph_remembers_is_compared(url: str) -> None:
    def note(state: _Inner, config: RunnableConfig) -> dict[str, Any]:
        before = state.get("memo", "")
        return {"memo": _said(config, config["configurable"]["thread_id"] in "ab"),
                "log": ["remembered " + before]}  # fmt: skip

    inner = StateGraph(_Inner)
    inner.add_node("note", note)
    inner.add_edge(START, "note")
    with CpstoreSaver.from_conn_string(url) as saver:
        g = StateGraph(_S)
        g.add_node("sub", inner.compile(checkpointer=True))
        g.add_edge(START, "sub")
        graph = g.compile(checkpointer=saver)
        for t in "abcd":
            graph.invoke({"log": ["in"]}, _cfg(t))
        diff = diff_threads(saver.store, _cfg("a"), _cfg("b"))
        # before: "same values at all 4 checkpoints" (the parents' values are equal)
        assert not diff.same and "sub" in diff.nodes and diff.channels == ("memo",), diff.summary
        assert diff_threads(saver.store, _cfg("c"), _cfg("d")).same
        got = [graph.invoke({"log": ["again"]}, _cfg(t))["log"][-1] for t in "ab"]
        assert got[0] != got[1]  # the next runs differ


def test_a_persistent_subgraph_on_one_side_only_is_a_divergence(url: str) -> None:
    inner = StateGraph(_S)
    inner.add_node("note", lambda state: {"log": ["noted"]})
    inner.add_edge(START, "note")
    with CpstoreSaver.from_conn_string(url) as saver:
        for t, sub in (
            ("a", inner.compile(checkpointer=True)),
            ("b", lambda s: {"log": ["in", "noted"]}),
        ):
            g = StateGraph(_S)
            g.add_node("sub", sub)
            g.add_edge(START, "sub")
            g.compile(checkpointer=saver).invoke({"log": ["in"]}, _cfg(t))
        diff = diff_threads(saver.store, _cfg("a"), _cfg("b"))
        assert not diff.same and diff.nodes == ("sub",), diff.summary
        assert "keeps checkpoints on A only" in diff.summary, diff.summary


def test_what_a_persistent_subgraph_under_a_finished_one_remembers_is_compared(
    url: str,
) -> None:
    """``mid`` (a plain subgraph, finished) runs ``sub`` (``checkpointer=True``): its
    memory lives in ``mid|sub``, which the next run of ``mid`` reads; it was compared
    only under a ``mid`` still mid-run, so the threads were "same values at all 3
    checkpoints" while their next runs differed."""

    def note(state: _Inner, config: RunnableConfig) -> dict[str, Any]:
        return {"memo": config["configurable"]["thread_id"],
                "log": ["remembered " + state.get("memo", "")]}  # fmt: skip

    inner = StateGraph(_Inner)
    inner.add_node("note", note)
    inner.add_edge(START, "note")
    mid = StateGraph(_S)
    mid.add_node("sub", inner.compile(checkpointer=True))
    mid.add_edge(START, "sub")
    with CpstoreSaver.from_conn_string(url) as saver:
        g = StateGraph(_S)
        g.add_node("mid", mid.compile())
        g.add_edge(START, "mid")
        graph = g.compile(checkpointer=saver)
        for t in "ab":
            graph.invoke({"log": ["in"]}, _cfg(t))
        diff = diff_threads(saver.store, _cfg("a"), _cfg("b"))
        assert not diff.same and diff.channels == ("memo",), diff.summary  # before: same
        got = [graph.invoke({"log": ["again"]}, _cfg(t))["log"][-1] for t in "ab"]
        assert got == ["remembered a", "remembered b"]
