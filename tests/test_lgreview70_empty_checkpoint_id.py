"""A config whose ``checkpoint_id`` is empty (``""``) names no checkpoint: it reads the
namespace's newest, as LangGraph's own savers and its Pregel loop read a falsy id.

InMemorySaver, SqliteSaver and PostgresSaver test ``if checkpoint_id :=
get_checkpoint_id(config)``, and the Pregel loop counts only "a truthy checkpoint_id"
as addressing a checkpoint. The saver took ``""`` as an id: ``get_tuple`` found no
checkpoint ``""`` and returned None for a thread holding checkpoints (a graph invoked
with such a config started over from an empty state, ``get_state`` showed none),
``list`` returned nothing for it or for ``before=`` it, and a put whose config named
parent ``""`` recorded a parent config naming checkpoint ``""``. A ``put_writes`` naming
``""`` stored writes no read could reach (they would be acknowledged, then never seen):
it is refused, as one naming no checkpoint id always was.
"""

from __future__ import annotations

import asyncio
import operator
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from pg_cluster import backend_store, pg_cluster  # noqa: F401 - fixtures

from cpstore.errors import InvalidInputError
from cpstore.langgraph import AsyncCpstoreSaver, CpstoreSaver, diff_threads
from cpstore.store import Store


def _conf(thread: str, **more: Any) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": "", **more}}


def _two(saver: Any, thread: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Two checkpoints of ``thread`` (x = 1, then x = 2); their configs."""
    cp1: dict[str, Any] = dict(empty_checkpoint())
    cp1["channel_values"], cp1["channel_versions"] = {"x": 1}, {"x": "1"}
    c1 = saver.put(_conf(thread), cp1, {"source": "input", "step": -1}, {"x": "1"})
    cp2: dict[str, Any] = dict(empty_checkpoint())
    cp2["channel_values"], cp2["channel_versions"] = {"x": 2}, {"x": "2"}
    c2 = saver.put(c1, cp2, {"source": "loop", "step": 0}, {"x": "2"})
    saver.put_writes(c2, [("x", 3)], "task-a")
    return c1, c2


def _observed(saver: Any) -> dict[str, Any]:
    c1, c2 = _two(saver, "t")
    empty = _conf("t", checkpoint_id="")
    got = saver.get_tuple(empty)
    ids = "configurable", "checkpoint_id"
    root = saver.put(_conf("u", checkpoint_id=""), dict(empty_checkpoint()), {"step": -1}, {})
    return {
        "get": None if got is None else (got.config, got.checkpoint["channel_values"]),
        "writes": None if got is None else got.pending_writes,
        "list": [t.config[ids[0]][ids[1]] for t in saver.list(empty)],
        "before": [
            t.config["configurable"]["checkpoint_id"] for t in saver.list(None, before=empty)
        ],
        "root_parent": saver.get_tuple(root).parent_config,
        "ids": (c1["configurable"]["checkpoint_id"], c2["configurable"]["checkpoint_id"]),
    }


def test_an_empty_checkpoint_id_reads_the_newest_as_in_memory_saver_does(store: Store) -> None:
    ours = _observed(CpstoreSaver(store))
    c1, c2 = ours.pop("ids")
    assert ours["get"] == (_conf("t", checkpoint_id=c2), {"x": 2})
    assert ours["writes"] == [("task-a", "x", 3)]
    assert ours["list"] == [c2, c1]
    assert set(ours["before"]) >= {c1, c2}  # and thread u's root: every thread, no bound
    assert ours["root_parent"] is None
    theirs = _observed(InMemorySaver())
    theirs.pop("ids")
    # the same shape: what each saver returns, without its ids
    assert ours["root_parent"] == theirs["root_parent"]
    assert len(ours["list"]) == len(theirs["list"]) == 2
    assert len(ours["before"]) == len(theirs["before"]) == 3
    assert ours["writes"] == theirs["writes"]
    assert ours["get"][1] == theirs["get"][1]


def test_delta_history_of_an_empty_checkpoint_id_is_the_newest_s(store: Store) -> None:
    saver = CpstoreSaver(store)
    _, c2 = _two(saver, "t")
    named = saver.get_delta_channel_history(config=c2, channels=["x"])
    empty = saver.get_delta_channel_history(config=_conf("t", checkpoint_id=""), channels=["x"])
    assert named["x"]["seed"] == 1  # the parent's value
    assert empty == named


def test_put_writes_naming_an_empty_checkpoint_id_is_refused_not_stored_unreachable(
    store: Store,
) -> None:
    saver = CpstoreSaver(store)
    _two(saver, "t")
    with pytest.raises(InvalidInputError):
        saver.put_writes(_conf("t", checkpoint_id=""), [("x", 9)], "task-b")
    got = saver.get_tuple(_conf("t"))
    assert got is not None and got.pending_writes == [("task-a", "x", 3)]


class _Count(TypedDict):
    items: Annotated[list[str], operator.add]


def _graph(checkpointer: Any) -> Any:
    g = StateGraph(_Count)
    g.add_node("add", lambda s: {"items": ["x"]})
    g.add_edge(START, "add")
    g.add_edge("add", END)
    return g.compile(checkpointer=checkpointer)


def test_a_graph_invoked_with_an_empty_checkpoint_id_goes_on_from_its_thread(
    store: Store,
) -> None:
    """The graph's second run continues the thread (two items), as on InMemorySaver."""
    results = []
    for saver in (InMemorySaver(), CpstoreSaver(store)):
        graph = _graph(saver)
        graph.invoke({"items": []}, _conf("g"))
        again = graph.invoke({"items": []}, _conf("g", checkpoint_id=""))
        state = graph.get_state(_conf("g", checkpoint_id=""))
        results.append((again, state.values))
    assert results[1] == results[0]
    assert results[1][0] == {"items": ["x", "x"]}


def test_the_async_twins_read_an_empty_checkpoint_id_as_the_newest(store: Store) -> None:
    saver = AsyncCpstoreSaver(store)
    _, c2 = _two(saver, "t")

    async def read() -> tuple[Any, list[Any]]:
        got = await saver.aget_tuple(_conf("t", checkpoint_id=""))
        listed = [t.config async for t in saver.alist(_conf("t", checkpoint_id=""), limit=1)]
        return got, listed

    got, listed = asyncio.run(read())
    assert got is not None and got.config == c2
    assert listed == [c2]


def test_diff_threads_reads_an_empty_checkpoint_id_as_the_newest(store: Store) -> None:
    saver = CpstoreSaver(store)
    _two(saver, "t")
    _two(saver, "v")
    named = diff_threads(store, _conf("t"), _conf("v"))
    empty = diff_threads(store, _conf("t", checkpoint_id=""), _conf("v", checkpoint_id=""))
    assert empty == named
