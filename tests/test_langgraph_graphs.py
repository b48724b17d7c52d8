"""Real LangGraph graphs on CpstoreSaver: the observable history equals InMemorySaver's."""

from __future__ import annotations

import asyncio
import operator
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, Interrupt, Send, interrupt

from cpstore.langgraph import AsyncCpstoreSaver, CpstoreSaver

DURABILITIES = ("exit", "async", "sync")


class State(TypedDict):
    items: Annotated[list[str], operator.add]
    note: str


def _plain(value: Any) -> Any:
    """``value`` with every Interrupt as its value (interrupt ids derive from checkpoint ids)."""
    if isinstance(value, Interrupt):
        return ("interrupt", _plain(value.value))
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    return value


def _normal(snapshot: Any) -> dict[str, Any]:
    """What a user observes of a StateSnapshot, without ids and clocks."""
    meta = {k: v for k, v in (snapshot.metadata or {}).items() if k not in ("run_id",)}
    if "parents" in meta:  # namespace -> checkpoint id: the ids differ between savers
        meta["parents"] = sorted(meta["parents"])
    return {
        "values": _plain(snapshot.values),
        "next": snapshot.next,
        "metadata": meta,
        "has_parent": snapshot.parent_config is not None,
        "tasks": [
            (t.name, [i.value for i in t.interrupts], t.error is not None, _plain(t.result))
            for t in snapshot.tasks
        ],
    }


def _history(graph: Any, config: dict[str, Any]) -> list[dict[str, Any]]:
    return [_normal(s) for s in graph.get_state_history(config)]


def _both(tmp_path: Path, scenario: Callable[[Any], Any]) -> tuple[Any, Any]:
    """Run ``scenario(checkpointer)`` on InMemorySaver and on CpstoreSaver."""
    expected = _plain(scenario(InMemorySaver()))
    with CpstoreSaver.from_conn_string(tmp_path / "store") as saver:
        got = _plain(scenario(saver))
        assert saver.store.verify().ok
    return expected, got


def _hitl_graph(checkpointer: Any) -> Any:
    def draft(state: State) -> dict[str, Any]:
        return {"items": ["draft"], "note": "drafted"}

    def review(state: State) -> dict[str, Any]:
        answer = interrupt({"question": "approve?", "items": state["items"]})
        return {"items": [f"review:{answer}"], "note": answer}

    def publish(state: State) -> dict[str, Any]:
        return {"items": ["published"]}

    g = StateGraph(State)
    g.add_node("draft", draft)
    g.add_node("review", review)
    g.add_node("publish", publish)
    g.add_edge(START, "draft")
    g.add_edge("draft", "review")
    g.add_edge("review", "publish")
    g.add_edge("publish", END)
    return g.compile(checkpointer=checkpointer)


@pytest.mark.parametrize("durability", DURABILITIES)
def test_interrupt_and_resume_history_equals_in_memory(tmp_path: Path, durability: str) -> None:
    """Human in the loop: interrupt, inspect, resume; every snapshot as InMemorySaver's."""

    def scenario(cp: Any) -> Any:
        graph = _hitl_graph(cp)
        config: dict[str, Any] = {"configurable": {"thread_id": "t1"}}
        first = graph.invoke({"items": [], "note": ""}, config, durability=durability)
        waiting = _normal(graph.get_state(config))
        final = graph.invoke(Command(resume="yes"), config, durability=durability)
        return first, waiting, final, _history(graph, config)

    expected, got = _both(tmp_path, scenario)
    assert got == expected
    assert got[1]["tasks"][0][1] == [{"question": "approve?", "items": ["draft"]}]
    assert got[2]["items"] == ["draft", "review:yes", "published"]


def test_time_travel_fork_history_equals_in_memory(tmp_path: Path) -> None:
    """get_state_history, update_state on an older checkpoint, run from the fork."""

    def scenario(cp: Any) -> Any:
        graph = _hitl_graph(cp)
        config: dict[str, Any] = {"configurable": {"thread_id": "t"}}
        graph.invoke({"items": [], "note": ""}, config)
        graph.invoke(Command(resume="no"), config)
        past = next(s for s in graph.get_state_history(config) if s.next == ("review",))
        forked = graph.update_state(past.config, {"note": "edited", "items": ["x"]})
        graph.invoke(None, forked)
        after = graph.invoke(Command(resume="again"), forked)
        return after, _history(graph, config)

    expected, got = _both(tmp_path, scenario)
    assert got == expected
    assert got[0]["items"] == ["draft", "x", "review:again", "published"]


def test_fork_lands_on_its_own_cpstore_branch(tmp_path: Path) -> None:
    """A put whose parent is not its branch head starts a branch; the original is untouched."""
    with CpstoreSaver.from_conn_string(tmp_path / "store") as saver:
        graph = _hitl_graph(saver)
        config: dict[str, Any] = {"configurable": {"thread_id": "t"}}
        graph.invoke({"items": [], "note": ""}, config)
        graph.invoke(Command(resume="no"), config)
        main_head = saver.store.ref("lg:t", "main")
        past = next(s for s in graph.get_state_history(config) if s.next == ("review",))
        graph.update_state(past.config, {"note": "edited"})
        branches = saver.store.branches("lg:t")
        assert branches["main"] == main_head
        forks = [b for b in branches if b.startswith("main@")]
        assert len(forks) == 1


class Parent(TypedDict):
    log: Annotated[list[str], operator.add]


def _subgraph_graph(checkpointer: Any) -> Any:
    def inner_a(state: Parent) -> dict[str, Any]:
        return {"log": ["inner_a"]}

    def inner_b(state: Parent) -> dict[str, Any]:
        answer = interrupt("inner?")
        return {"log": [f"inner_b:{answer}"]}

    sub = StateGraph(Parent)
    sub.add_node("inner_a", inner_a)
    sub.add_node("inner_b", inner_b)
    sub.add_edge(START, "inner_a")
    sub.add_edge("inner_a", "inner_b")
    sub.add_edge("inner_b", END)

    g = StateGraph(Parent)
    g.add_node("before", lambda s: {"log": ["before"]})
    g.add_node("child", sub.compile())
    g.add_node("after", lambda s: {"log": ["after"]})
    g.add_edge(START, "before")
    g.add_edge("before", "child")
    g.add_edge("child", "after")
    g.add_edge("after", END)
    return g.compile(checkpointer=checkpointer)


def test_subgraph_with_interrupt_equals_in_memory(tmp_path: Path) -> None:
    """A subgraph interrupts inside its own namespace; state and history match after resume."""

    def scenario(cp: Any) -> Any:
        graph = _subgraph_graph(cp)
        config: dict[str, Any] = {"configurable": {"thread_id": "s"}}
        graph.invoke({"log": []}, config)
        state = graph.get_state(config, subgraphs=True)
        inner = state.tasks[0].state
        waiting = (_normal(state), _normal(inner))
        final = graph.invoke(Command(resume="ok"), config)
        return waiting, final, _history(graph, config)

    expected, got = _both(tmp_path, scenario)
    assert got == expected
    # the subgraph returns its whole state, which the reducer appends to the parent's
    assert got[1]["log"] == ["before", "before", "inner_a", "inner_b:ok", "after"]


class Fan(TypedDict):
    topics: list[str]
    results: Annotated[list[str], operator.add]


def _fanout_graph(checkpointer: Any) -> Any:
    def route(state: Fan) -> list[Send]:
        return [Send("work", {"topic": t}) for t in state["topics"]]

    def work(arg: dict[str, str]) -> dict[str, Any]:
        return {"results": [arg["topic"].upper()]}

    g = StateGraph(Fan)
    g.add_node("start", lambda s: {})
    g.add_node("work", work)
    g.add_edge(START, "start")
    g.add_conditional_edges("start", route, ["work"])
    g.add_edge("work", END)
    return g.compile(checkpointer=checkpointer)


@pytest.mark.parametrize("durability", DURABILITIES)
def test_send_fan_out_equals_in_memory(tmp_path: Path, durability: str) -> None:
    """Send fan-out: pending sends and the joined results match InMemorySaver's."""

    def scenario(cp: Any) -> Any:
        graph = _fanout_graph(cp)
        config: dict[str, Any] = {"configurable": {"thread_id": "f"}}
        out = graph.invoke(
            {"topics": ["a", "b", "c"], "results": []}, config, durability=durability
        )
        return sorted(out["results"]), _history(graph, config)

    expected, got = _both(tmp_path, scenario)
    assert got[0] == ["A", "B", "C"]
    assert got == expected


def test_async_saver_runs_a_graph_like_in_memory(tmp_path: Path) -> None:
    """AsyncCpstoreSaver under ainvoke: interrupt, resume and history as InMemorySaver's."""

    async def scenario(cp: Any) -> Any:
        graph = _hitl_graph(cp)
        config: dict[str, Any] = {"configurable": {"thread_id": "a"}}
        await graph.ainvoke({"items": [], "note": ""}, config)
        final = await graph.ainvoke(Command(resume="y"), config)
        history = [_normal(s) async for s in graph.aget_state_history(config)]
        return final, history

    async def run() -> tuple[Any, Any]:
        expected = await scenario(InMemorySaver())
        async with AsyncCpstoreSaver.from_conn_string(tmp_path / "store") as saver:
            return expected, await scenario(saver)

    expected, got = _plain(asyncio.run(run()))
    assert got == expected
    assert got[0]["items"] == ["draft", "review:y", "published"]


def test_async_methods_run_the_store_off_the_event_loop_thread(tmp_path: Path) -> None:
    """aput, aget_tuple, alist and aput_writes do their store work in an executor thread."""
    seen: dict[str, int] = {}

    class Watching(AsyncCpstoreSaver):
        def put(self, *args: Any, **kwargs: Any) -> Any:
            seen["put"] = threading.get_ident()
            return super().put(*args, **kwargs)

        def get_tuple(self, config: Any) -> Any:
            seen["get_tuple"] = threading.get_ident()
            return super().get_tuple(config)

        def put_writes(self, *args: Any, **kwargs: Any) -> None:
            seen["put_writes"] = threading.get_ident()
            super().put_writes(*args, **kwargs)

    async def run() -> int:
        async with Watching.from_conn_string(tmp_path / "store") as saver:
            cp = empty_checkpoint()
            conf = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
            stored = await saver.aput(conf, cp, {"step": 0}, {})
            await saver.aput_writes(stored, [("c", 1)], "task")
            assert await saver.aget_tuple(stored) is not None
            assert len([t async for t in saver.alist(conf)]) == 1
        return threading.get_ident()

    loop_thread = asyncio.run(run())
    assert set(seen) == {"put", "get_tuple", "put_writes"}
    assert loop_thread not in seen.values()
