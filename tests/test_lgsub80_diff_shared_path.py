"""lgsub80: subgraphs of one side that share a task path are compared, never skipped.

A subgraph compiled with ``interrupt_before`` stops without writing anything to its
parent (LangGraph's ``GraphInterrupt()`` carries no interrupt, so no ``__interrupt__``
write): ``diff_threads`` could pair it across threads only by its node name. Two such
subgraphs run from one checkpoint by two ``Send``s share that key, and review77's
pairing skipped them ("two share the key on a side: not compared"): threads whose
workers stopped with other values were "same values at all 2 checkpoints" while their
resumes differed. Each such subgraph is now paired by its ``Send`` index, recovered
from its namespace's task id (LangGraph derives it from the parent checkpoint id, the
step and the index); when that fails, the group is compared as a whole: equal only when
every member holds the same, else ``undecidable``. Both engines."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.graph import START, StateGraph
from langgraph.types import Send
from pg_cluster import backend_url  # noqa: F401 - fixture

from cpstore.langgraph import CpstoreSaver, diff_threads


class _S(TypedDict):
    log: Annotated[list[str], operator.add]


def _cfg(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


#: What worker i of each thread writes before it stops (b swaps a's two).
_WROTE = {"a": ["x", "y"], "b": ["y", "x"], "c": ["x", "y"], "d": ["z", "z"], "e": ["z", "z"]}
_WROTE.update(f=["z", "z"], g=["z", "z"])


def _graph(saver: CpstoreSaver, sends: int = 2, nested: bool = False, alike: bool = False) -> Any:
    def first(state: _S, config: RunnableConfig) -> dict[str, Any]:
        said = _WROTE[config["configurable"]["thread_id"]]
        return {"log": ["first " + said[int(state["log"][0]) % 2]]}

    def second(state: _S) -> dict[str, Any]:
        return {"log": ["second"]}

    inner = StateGraph(_S)
    inner.add_node("first", first)
    inner.add_node("second", second)
    inner.add_edge(START, "first")
    inner.add_edge("first", "second")
    sub: Any = inner.compile(interrupt_before=["second"])

    def fan(state: _S) -> list[Send]:
        return [Send("sub", {"log": ["0" if alike else str(i)]}) for i in range(sends)]

    g = StateGraph(_S)
    g.add_node("sub", sub)
    g.add_conditional_edges(START, fan, ["sub"])
    if nested:
        top = StateGraph(_S)
        top.add_node("mid", g.compile())
        top.add_edge(START, "mid")
        return top.compile(checkpointer=saver)
    return g.compile(checkpointer=saver)


def _run(graph: Any, threads: str) -> None:
    for t in threads:
        graph.invoke({"log": ["in"]}, _cfg(t))


def test_sends_whose_subgraphs_stopped_with_other_values_diverge(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        graph = _graph(saver)
        _run(graph, "ab")
        diff = diff_threads(saver.store, _cfg("a"), _cfg("b"))
        # before: "same values at all 2 checkpoints" (the two were skipped)
        assert not diff.same and diff.pending, diff.summary
        assert not diff.undecidable and diff.channels == ("log",), diff.summary
        assert "sub" in diff.nodes and "send 0" in diff.summary, diff.summary
        got = [graph.invoke(None, _cfg(t))["log"] for t in "ab"]
        assert got[0] != got[1]  # and their resumes do differ


def test_sends_whose_subgraphs_stopped_alike_are_the_same(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        graph = _graph(saver)
        _run(graph, "ac")
        diff = diff_threads(saver.store, _cfg("a"), _cfg("c"))
        assert diff.same and not diff.undecidable, diff.summary
        got = [graph.invoke(None, _cfg(t))["log"] for t in "ac"]
        assert got[0] == got[1]


def test_nested_sends_are_paired_too(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        graph = _graph(saver, nested=True)
        _run(graph, "abc")
        diff = diff_threads(saver.store, _cfg("a"), _cfg("b"))
        assert not diff.same and not diff.undecidable, diff.summary
        assert diff_threads(saver.store, _cfg("a"), _cfg("c")).same


def test_a_send_more_on_one_side_is_a_divergence(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        _run(_graph(saver, sends=2), "a")
        _run(_graph(saver, sends=3), "c")
        diff = diff_threads(saver.store, _cfg("a"), _cfg("c"))
        assert not diff.same, diff.summary


def test_without_the_send_index_a_group_is_equal_only_when_all_are(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fallback, pinned (a LangGraph whose task ids are derived otherwise): the
    members sharing a key are sorted into classes of equal ones across both sides. One
    class, as many on each side: the same (any pairing resumes alike); a class not as
    many on each side: a divergence (no pairing is equal); else ``undecidable``."""
    import cpstore.langgraph._diff_subgraphs as subgraphs  # noqa: PLC0415 - lgsub80's module

    monkeypatch.setattr(subgraphs, "SEND_TRIES", 0)
    with CpstoreSaver.from_conn_string(url) as saver:
        graph = _graph(saver)
        _run(graph, "abcde")
        # c holds what a holds, but which of c's is which of a's is unknown
        diff = diff_threads(saver.store, _cfg("a"), _cfg("c"))
        assert not diff.same and diff.undecidable and diff.pending, diff.summary
        assert "share" in diff.summary and diff.nodes == ("sub",), diff.summary
        assert diff.as_dict()["undecidable"] is True
        # b's two hold what none of a's holds (its input 0 wrote y): no pairing is equal
        diff = diff_threads(saver.store, _cfg("a"), _cfg("b"))
        assert not diff.same and not diff.undecidable and diff.pending, diff.summary
        diff = diff_threads(saver.store, _cfg("d"), _cfg("e"))
        assert not diff.same and diff.undecidable, diff.summary  # inputs 0 and 1 differ
        # every Send's subgraph alike on both sides: one class, the same
        _run(_graph(saver, alike=True), "fg")
        diff = diff_threads(saver.store, _cfg("f"), _cfg("g"))
        assert diff.same and not diff.undecidable, diff.summary
