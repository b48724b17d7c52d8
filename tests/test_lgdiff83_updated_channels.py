"""lgdiff83: ``diff_threads`` and the ``updated_channels`` of the last checkpoints.

A resume takes as candidates only the nodes the last checkpoint's ``updated_channels``
trigger (``None`` or ``[]``: every node). Two threads whose last checkpoints differ
only there (each put through the saver as LangGraph puts a checkpoint, the
``updated_channels`` of one left out the ``branch:to:n`` its step wrote) resumed
differently, ``n`` running on one only, while ``diff_threads`` said "same values at all
3 checkpoints". Sets that each name what their step moved (a node appending ``[]`` to a
list, a checkpoint storing ``None`` as ``update_state`` and copies do) stay the same.
Both engines."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import copy_checkpoint
from langgraph.graph import END, START, StateGraph
from pg_cluster import backend_url  # noqa: F401 - fixture

from cpstore.langgraph import CpstoreSaver, diff_threads

#: The task id LangGraph stores input and ``Command`` writes under.
_NULL_TASK_ID = "00000000-0000-0000-0000-000000000000"


class _S(TypedDict):
    log: Annotated[list[str], operator.add]


def _cfg(thread: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    conf = {"thread_id": thread, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def _graph(saver: CpstoreSaver, *, again: bool = False, empty: str = "") -> Any:
    """``a`` then ``n``, stopped before ``n``; ``again``: ``n`` goes back to ``a`` once
    (so ``n`` has run when it stops before it the second time); on thread ``empty``,
    ``a`` appends ``[]`` to ``log`` (its version moves, its value does not)."""

    def a(_: _S, config: RunnableConfig) -> dict[str, Any]:
        return {"log": []} if config["configurable"]["thread_id"] == empty else {}

    def n(_: _S) -> dict[str, Any]:
        return {"log": ["n"]}

    def after_n(state: _S) -> str:
        return "a" if again and state["log"].count("n") == 1 else END

    g = StateGraph(_S)
    g.add_node("a", a)
    g.add_node("n", n)
    g.add_edge(START, "a")
    g.add_edge("a", "n")
    g.add_conditional_edges("n", after_n, ["a", END])
    return g.compile(checkpointer=saver, interrupt_before=["n"])


def _head(saver: CpstoreSaver, thread: str) -> Any:
    """The newest checkpoint of ``thread``."""
    tup = saver.get_tuple(_cfg(thread))
    assert tup is not None
    return tup.checkpoint


def _put_copy(saver: CpstoreSaver, src: str, dst: str, updated: Any) -> None:
    """Thread ``src``'s chain put as thread ``dst`` through ``saver.put`` (as the loop
    puts each checkpoint), the newest with ``updated_channels`` = ``updated``."""
    chain = list(saver.list(_cfg(src)))[::-1]
    parent: str | None = None
    for i, tup in enumerate(chain):
        cp = copy_checkpoint(tup.checkpoint)
        if i == len(chain) - 1:
            cp["updated_channels"] = updated
        out = saver.put(_cfg(dst, parent), cp, tup.metadata, dict(cp["channel_versions"]))
        parent = out["configurable"]["checkpoint_id"]


def test_updated_channels_leaving_out_a_new_trigger_are_not_the_same(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        app = _graph(saver)
        app.invoke({"log": ["in"]}, _cfg("a"))
        assert _head(saver, "a")["updated_channels"] == ["branch:to:n"]
        _put_copy(saver, "a", "b", ["log"])
        diff = diff_threads(saver.store, _cfg("a"), _cfg("b"))
        # before: "same values at all 3 checkpoints"
        assert not diff.same and diff.undecidable and diff.pending, diff.summary
        assert diff.channels == ("branch:to:n", "log") and diff.index == 2, diff.summary
        assert "B's leave out branch:to:n" in diff.summary, diff.summary
        got = [app.invoke(None, _cfg(t))["log"] for t in "ab"]
        assert got == [["in", "n"], ["in"]]  # and the resumes do differ


def test_a_node_that_ran_picked_on_one_side_only_is_a_divergence(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        app = _graph(saver, again=True)
        app.invoke({"log": ["in"]}, _cfg("a"))
        app.invoke(None, _cfg("a"))  # n runs, then a, then it stops before n again
        assert "n" in _head(saver, "a")["versions_seen"]
        _put_copy(saver, "a", "b", ["log"])
        diff = diff_threads(saver.store, _cfg("a"), _cfg("b"))
        # before: "same values at all 5 checkpoints"
        assert not diff.same and not diff.undecidable and diff.pending, diff.summary
        assert diff.nodes == ("n",) and diff.channels == ("branch:to:n",), diff.summary
        got = [app.invoke(None, _cfg(t))["log"] for t in "ab"]
        assert got == [["in", "n", "n"], ["in", "n"]]


def test_sets_naming_what_their_step_moved_are_the_same(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        app = _graph(saver, empty="x")
        for t in "xy":
            app.invoke({"log": ["in"]}, _cfg(t))
        sets = [_head(saver, t)["updated_channels"] for t in "xy"]
        assert sets == [["branch:to:n", "log"], ["branch:to:n"]]
        assert diff_threads(saver.store, _cfg("x"), _cfg("y")).same  # [] to a list
        for t, updated in (("none", None), ("empty", [])):
            _put_copy(saver, "y", t, updated)  # None and []: every node (update_state, copies)
            diff = diff_threads(saver.store, _cfg("y"), _cfg(t))
            assert diff.same, (t, diff.summary)
        got = {app.invoke(None, _cfg(t))["log"] == ["in", "n"] for t in ("x", "y", "none")}
        assert got == {True}


def test_a_set_naming_a_channel_its_step_did_not_move_is_undecidable(url: str) -> None:
    """LangGraph's loop names only what its step updated: a set naming more may make a
    node no checkpoint names a candidate on one side only (here none is: both run n)."""
    with CpstoreSaver.from_conn_string(url) as saver:
        app = _graph(saver)
        app.invoke({"log": ["in"]}, _cfg("a"))
        _put_copy(saver, "a", "b", ["branch:to:n", "log"])
        diff = diff_threads(saver.store, _cfg("a"), _cfg("b"))
        assert not diff.same and diff.undecidable and diff.channels == ("log",), diff.summary
        assert "B's name log, which its step did not move" in diff.summary, diff.summary


def test_a_resume_adds_the_null_task_writes_to_the_set(url: str) -> None:
    """A ``Command(goto="n")`` stored on the last checkpoints (null-task writes, as
    ``_first`` puts them) makes ``n`` a candidate on both: the sets resume alike."""
    with CpstoreSaver.from_conn_string(url) as saver:
        app = _graph(saver, empty="c")  # on c, a appends [] to log: its step moves log
        for t in "ac":
            app.invoke({"log": ["in"]}, _cfg(t))
        _put_copy(saver, "c", "b", ["log"])  # leaving out branch:to:n, which goto names
        for t in "ab":
            conf = saver.get_tuple(_cfg(t))
            assert conf is not None
            saver.put_writes(conf.config, [("branch:to:n", "__start__")], _NULL_TASK_ID)
        diff = diff_threads(saver.store, _cfg("a"), _cfg("b"))
        assert diff.same, diff.summary
        got = [app.invoke(None, _cfg(t))["log"] for t in "ab"]
        assert got == [["in", "n"], ["in", "n"]]


def test_updated_channels_that_are_no_list_of_names_are_undecidable(url: str) -> None:
    """A string (LangGraph would take its characters for channel names) on one side."""
    with CpstoreSaver.from_conn_string(url) as saver:
        app = _graph(saver)
        app.invoke({"log": ["in"]}, _cfg("a"))
        _put_copy(saver, "a", "b", "branch:to:n")
        _put_copy(saver, "a", "c", "branch:to:n")
        diff = diff_threads(saver.store, _cfg("a"), _cfg("b"))
        assert not diff.same and diff.undecidable, diff.summary
        assert "not a list of channel names" in diff.summary, diff.summary
        assert diff_threads(saver.store, _cfg("b"), _cfg("c")).same  # one value on both
