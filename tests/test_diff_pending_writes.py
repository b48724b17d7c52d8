"""``diff_threads`` compares the pending writes of the two checkpoints it ends at.

A super-step interrupted part-way (one task called ``interrupt()``, a parallel one
finished) leaves the finished task's writes pending on the checkpoint: resuming applies
them and does not run that task again. Two threads whose checkpoints hold equal values
but whose pending writes differ resume differently; ``diff_threads`` said "same values
at all N checkpoints" (review75's leftover). Task ids are left out of the comparison
(LangGraph derives them from the checkpoint id, which differs between threads); the
task path, channel and stored bytes are compared, in ``writes_sort_key`` order."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.graph import START, StateGraph
from langgraph.types import interrupt
from pg_cluster import backend_url  # noqa: F401 - fixture

from cpstore.langgraph import CpstoreSaver, diff_threads


class _S(TypedDict):
    log: Annotated[list[str], operator.add]


def _cfg(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def _graph(saver: CpstoreSaver, by_thread: bool) -> Any:
    def fast(state: _S, config: RunnableConfig) -> dict[str, Any]:
        said = config["configurable"]["thread_id"] if by_thread else "same"
        return {"log": ["fast " + said]}

    def asks(state: _S) -> dict[str, Any]:
        return {"log": ["asked " + str(interrupt("ok?"))]}

    g = StateGraph(_S)
    g.add_node("fast", fast)
    g.add_node("asks", asks)
    g.add_edge(START, "fast")
    g.add_edge(START, "asks")
    return g.compile(checkpointer=saver)


def test_pending_writes_that_differ_are_a_divergence(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        graph = _graph(saver, by_thread=True)
        for t in ("a", "b"):
            graph.invoke({"log": ["in"]}, _cfg(t))
        # every checkpoint's values equal; the finished task's writes differ
        pending = [
            [w for w in graph.get_state(_cfg(t)).tasks if w.name == "fast"] for t in ("a", "b")
        ]
        assert all(len(p) == 1 for p in pending)
        diff = diff_threads(saver.store, _cfg("a"), _cfg("b"))
        assert not diff.same, diff.summary  # before: "same values at all 2 checkpoints"
        assert diff.pending and diff.channels == ("log",) and diff.nodes == ("fast",)
        newest = graph.get_state(_cfg("a")).config["configurable"]["checkpoint_id"]
        assert diff.checkpoint_a == newest and diff.index == 1
        assert "pending" in diff.summary and diff.as_dict()["pending"] is True


def test_equal_pending_writes_from_other_task_ids_are_the_same(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        graph = _graph(saver, by_thread=False)
        for t in ("a", "b"):
            graph.invoke({"log": ["in"]}, _cfg(t))
        diff = diff_threads(saver.store, _cfg("a"), _cfg("b"))
        assert diff.same and not diff.pending, diff.summary


def test_a_pending_write_on_one_side_only_is_a_divergence(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        graph = _graph(saver, by_thread=False)
        for t in ("a", "b"):
            graph.invoke({"log": ["in"]}, _cfg(t))
        head = graph.get_state(_cfg("b")).config
        saver.put_writes(head, [("note", "extra")], task_id="t-extra", task_path="~extra")
        diff = diff_threads(saver.store, _cfg("a"), _cfg("b"))
        assert not diff.same and diff.pending and diff.channels == ("note",)
        assert diff.nodes == ("~extra",)


def test_a_different_writer_of_equal_bytes_is_a_divergence(url: str) -> None:
    """Which task's writes are pending decides which task a resume skips."""
    with CpstoreSaver.from_conn_string(url) as saver:
        graph = _graph(saver, by_thread=False)
        for t in ("a", "b"):
            graph.invoke({"log": ["in"]}, _cfg(t))
        for t, path in (("a", "~one"), ("b", "~two")):
            head = graph.get_state(_cfg(t)).config
            saver.put_writes(head, [("note", "x")], task_id=f"t-{t}", task_path=path)
        diff = diff_threads(saver.store, _cfg("a"), _cfg("b"))
        assert not diff.same and diff.pending and diff.nodes == ("~one", "~two")


def test_earlier_positions_compare_values_not_writes(url: str) -> None:
    """Writes at a checkpoint before the last are what made the next one: its values are
    compared there, so equal values after them stay the same."""
    with CpstoreSaver.from_conn_string(url) as saver:
        graph = _graph(saver, by_thread=False)
        for t in ("a", "b"):
            graph.invoke({"log": ["in"]}, _cfg(t))
        assert diff_threads(saver.store, _cfg("a"), _cfg("b")).same


def test_interrupts_are_compared_by_value_not_id(url: str) -> None:
    """An interrupt's id is derived from its task id (equal ones differ between threads,
    above); its value is compared: a thread asking another question diverges."""

    def asks_by_thread(state: _S, config: RunnableConfig) -> dict[str, Any]:
        return {"log": [str(interrupt("ok " + config["configurable"]["thread_id"]))]}

    with CpstoreSaver.from_conn_string(url) as saver:
        g = StateGraph(_S)
        g.add_node("asks", asks_by_thread)
        g.add_edge(START, "asks")
        graph = g.compile(checkpointer=saver)
        for t in ("a", "b"):
            graph.invoke({"log": ["in"]}, _cfg(t))
        diff = diff_threads(saver.store, _cfg("a"), _cfg("b"))
        assert not diff.same and diff.pending
        assert diff.channels == ("__interrupt__",) and diff.nodes == ("asks",)
