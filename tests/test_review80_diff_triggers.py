"""review80: ``diff_threads`` compares which tasks a resume runs, not only the values.

LangGraph runs a node when a trigger channel's version is newer than the one the node
saw (``versions_seen``), whatever the value. A Pregel node that writes a channel the
value it holds leaves every value equal and moves the version: the node subscribed to
that channel runs again on a resume of that thread and not of the other. Before,
``diff_threads`` said "same values at all 3 checkpoints" for two such threads, whose
resumes gave ``d`` 2 and 1. Both engines."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.channels import LastValue
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import START, StateGraph
from langgraph.pregel import NodeBuilder, Pregel
from langgraph.pregel._write import ChannelWriteEntry
from langgraph.types import Send
from pg_cluster import backend_url  # noqa: F401 - fixture

from cpstore.langgraph import CpstoreSaver, diff_threads


def _cfg(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def _app(saver: CpstoreSaver, echo: str) -> Any:
    """``one`` (on ``a``) writes ``c``; ``two`` (on ``c``) counts ``d`` and, on the threads
    in ``echo`` and its first run, writes ``c`` the value it holds (its version moves)."""

    def one(_: Any) -> int:
        return 0

    def two(inp: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        d = (inp.get("d") or 0) + 1
        out: dict[str, Any] = {"d": d}
        if config["configurable"]["thread_id"] in echo and d == 1:
            out["c"] = inp["c"]
        return out

    return Pregel(
        nodes={
            "one": NodeBuilder().subscribe_only("a").do(one).write_to("c"),
            "two": NodeBuilder()
            .subscribe_to("c")
            .read_from("d")
            .do(two)
            .write_to(
                ChannelWriteEntry("c", mapper=lambda o: o.get("c"), skip_none=True),
                ChannelWriteEntry("d", mapper=lambda o: o["d"]),
            ),
        },
        channels={"a": LastValue(int), "c": LastValue(int), "d": LastValue(int)},
        input_channels="a",
        output_channels=["c", "d"],
        checkpointer=saver,
    )


def test_a_version_moved_under_an_equal_value_is_a_divergence(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        app = _app(saver, echo="a")
        app.invoke(1, _cfg("a"), interrupt_after=["two"])
        app.invoke(1, _cfg("b"))
        states = [app.get_state(_cfg(t)) for t in "ab"]
        assert states[0].values == states[1].values  # every value equal
        assert states[0].next == ("two",) and states[1].next == ()
        diff = diff_threads(saver.store, _cfg("a"), _cfg("b"))
        # before: "same values at all 3 checkpoints"
        assert not diff.same and not diff.undecidable and diff.pending, diff.summary
        assert diff.nodes == ("two",) and diff.channels == ("c",), diff.summary
        assert diff.index == 2 and "resume" in diff.summary, diff.summary
        got = [app.invoke(None, _cfg(t)) for t in "ab"]
        assert got[0] != got[1]  # and the resumes do differ


def test_equal_triggers_are_the_same(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        app = _app(saver, echo="")
        for t in "ab":
            app.invoke(1, _cfg(t))
        diff = diff_threads(saver.store, _cfg("a"), _cfg("b"))
        assert diff.same, diff.summary
        again = _app(saver, echo="cd")  # both echo: both run two again on a resume
        for t in "cd":
            again.invoke(1, _cfg(t), interrupt_after=["two"])
        assert diff_threads(saver.store, _cfg("c"), _cfg("d")).same


class _S(TypedDict):
    log: Annotated[list[str], operator.add]


def test_pending_sends_of_an_older_checkpoint_format_are_compared(url: str) -> None:
    """A checkpoint of format 1 to 3 (LangGraph before 0.3) keeps its pending ``Send``s
    in its head (``pending_sends``), which LangGraph moves into ``__pregel_tasks`` when
    it loads one (``_migrate_checkpoint``): two such checkpoints of equal values whose
    Sends carried other args were "same values at all 1 checkpoints" while their
    resumes ran ``w`` on "1" and on "2"."""

    def w(state: _S) -> dict[str, Any]:
        return {"log": ["w" + state["log"][0]]}

    with CpstoreSaver.from_conn_string(url) as saver:
        g = StateGraph(_S)
        g.add_node("w", w)
        g.add_edge(START, "w")
        graph = g.compile(checkpointer=saver)
        for t, arg in (("a", "1"), ("b", "2"), ("c", "1")):
            cp = empty_checkpoint()
            cp["v"] = 1
            cp["channel_values"] = {"log": ["in"]}
            cp["channel_versions"] = {"log": saver.get_next_version(None, None)}
            cp["pending_sends"] = [Send("w", {"log": [arg]})]
            saver.put(_cfg(t), cp, {"source": "loop", "step": 0, "parents": {}}, {})
        diff = diff_threads(saver.store, _cfg("a"), _cfg("b"))
        assert not diff.same and diff.pending, diff.summary  # before: the same
        assert diff.channels == ("__pregel_tasks",) and diff.nodes == ("w",), diff.summary
        assert diff_threads(saver.store, _cfg("a"), _cfg("c")).same
        got = [graph.invoke(None, _cfg(t))["log"] for t in "ab"]
        assert got == [["in", "w1"], ["in", "w2"]]
