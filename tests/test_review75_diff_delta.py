"""``diff_threads`` and a DeltaChannel: its value is rebuilt from the parent chain's writes.

A DeltaChannel stores no value at a checkpoint between snapshots (its ``checkpoint()`` is
MISSING, a new version is the empty marker): LangGraph rebuilds its state from the
pending writes of the ancestors back to the nearest snapshot
(``get_delta_channel_history``). ``diff_threads`` compared the stored values only, so two
threads whose delta channel was written differently, and every other channel alike,
were "same values at all 3 checkpoints" while ``get_state`` read different logs.
"""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.graph import END, START, StateGraph
from lg_delta import concat
from lg_delta import graph as delta_graph
from pg_cluster import backend_url  # noqa: F401 - fixture

from cpstore.langgraph import CpstoreSaver, diff_threads


class _Rare(TypedDict):
    log: Annotated[list[str], DeltaChannel(concat, snapshot_frequency=1000)]


def _says_its_thread(state: Any, config: RunnableConfig) -> dict[str, Any]:
    return {"log": ["said " + config["configurable"]["thread_id"]]}


def _cfg(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def test_threads_whose_delta_writes_differ_are_not_the_same(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        g = StateGraph(_Rare)
        g.add_node("step", _says_its_thread)
        g.add_edge(START, "step")
        g.add_edge("step", END)
        graph = g.compile(checkpointer=saver)
        for t in ("a", "b"):
            graph.invoke({"log": ["hi"]}, _cfg(t))
        logs = [graph.get_state(_cfg(t)).values["log"] for t in ("a", "b")]
        assert logs == [["hi", "said a"], ["hi", "said b"]]
        diff = diff_threads(saver.store, _cfg("a"), _cfg("b"))
        assert not diff.same, diff.summary  # before: "same values at all 3 checkpoints"
        assert diff.channels == ("log",) and diff.nodes == ("step",)
        newest = graph.get_state(_cfg("a")).config["configurable"]["checkpoint_id"]
        assert diff.checkpoint_a == newest and diff.index == 2


def test_threads_with_equal_delta_writes_stay_the_same(url: str) -> None:
    """Equal writes (other task ids, other checkpoint ids) rebuild equal values: no false
    divergence; with snapshots every 4 updates, past several of them."""
    with CpstoreSaver.from_conn_string(url) as saver:
        for rare in (True, False):
            graph = delta_graph(saver, rare=rare)
            for t in ("a", "b"):
                for i in range(6):
                    graph.invoke({"log": [f"in{i}"]}, _cfg(f"{t}{rare}"))
            diff = diff_threads(saver.store, _cfg(f"a{rare}"), _cfg(f"b{rare}"))
            assert diff.same, diff.summary
            # one more run on a with another input: a diverges there
            graph.invoke({"log": ["other"]}, _cfg(f"a{rare}"))
            graph.invoke({"log": ["in6"]}, _cfg(f"b{rare}"))
            assert not diff_threads(saver.store, _cfg(f"a{rare}"), _cfg(f"b{rare}")).same
