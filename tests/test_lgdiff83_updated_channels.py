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
from langgraph.channels import LastValue
from langgraph.checkpoint.base import copy_checkpoint
from langgraph.graph import END, START, StateGraph
from langgraph.pregel import NodeBuilder, Pregel
from langgraph.types import Command, Send, interrupt
from lg_delta import graph as delta_graph
from lg_threads import NULL_TASK_ID, LogState, a_then_n, cfg, unlike_sets
from pg_cluster import backend_url  # noqa: F401 - fixture

from cpstore.langgraph import CpstoreSaver, diff_threads


def _graph(saver: CpstoreSaver, *, again: bool = False, empty: str = "") -> Any:
    """``a`` then ``n``, stopped before ``n``; ``again``: ``n`` goes back to ``a`` once
    (so ``n`` has run when it stops before it the second time); on thread ``empty``,
    ``a`` appends ``[]`` to ``log`` (its version moves, its value does not)."""

    def a(_: LogState, config: RunnableConfig) -> dict[str, Any]:
        return {"log": []} if config["configurable"]["thread_id"] == empty else {}

    def n(_: LogState) -> dict[str, Any]:
        return {"log": ["n"]}

    def after_n(state: LogState) -> str:
        return "a" if again and state["log"].count("n") == 1 else END

    return a_then_n(saver, a, n, after_n=after_n)


def _head(saver: CpstoreSaver, thread: str) -> Any:
    """The newest checkpoint of ``thread``."""
    tup = saver.get_tuple(cfg(thread))
    assert tup is not None
    return tup.checkpoint


def _put_copy(saver: CpstoreSaver, src: str, dst: str, updated: Any) -> None:
    """Thread ``src``'s chain put as thread ``dst`` through ``saver.put`` (as the loop
    puts each checkpoint), the newest with ``updated_channels`` = ``updated``."""
    chain = list(saver.list(cfg(src)))[::-1]
    parent: str | None = None
    for i, tup in enumerate(chain):
        cp = copy_checkpoint(tup.checkpoint)
        if i == len(chain) - 1:
            cp["updated_channels"] = updated
        out = saver.put(cfg(dst, parent), cp, tup.metadata, dict(cp["channel_versions"]))
        parent = out["configurable"]["checkpoint_id"]


def test_updated_channels_leaving_out_a_new_trigger_are_not_the_same(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        app = _graph(saver)
        app.invoke({"log": ["in"]}, cfg("a"))
        assert _head(saver, "a")["updated_channels"] == ["branch:to:n"]
        _put_copy(saver, "a", "b", ["log"])
        diff = diff_threads(saver.store, cfg("a"), cfg("b"))
        # before: "same values at all 3 checkpoints"
        assert not diff.same and diff.undecidable and diff.pending, diff.summary
        assert diff.channels == ("branch:to:n", "log") and diff.index == 2, diff.summary
        assert "B's leave out branch:to:n" in diff.summary, diff.summary
        got = [app.invoke(None, cfg(t))["log"] for t in "ab"]
        assert got == [["in", "n"], ["in"]]  # and the resumes do differ


def test_a_node_that_ran_picked_on_one_side_only_is_a_divergence(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        app = _graph(saver, again=True)
        app.invoke({"log": ["in"]}, cfg("a"))
        app.invoke(None, cfg("a"))  # n runs, then a, then it stops before n again
        assert "n" in _head(saver, "a")["versions_seen"]
        _put_copy(saver, "a", "b", ["log"])
        diff = diff_threads(saver.store, cfg("a"), cfg("b"))
        # before: "same values at all 5 checkpoints"
        assert not diff.same and not diff.undecidable and diff.pending, diff.summary
        assert diff.nodes == ("n",) and diff.channels == ("branch:to:n",), diff.summary
        got = [app.invoke(None, cfg(t))["log"] for t in "ab"]
        assert got == [["in", "n", "n"], ["in", "n"]]


def test_sets_naming_what_their_step_moved_are_the_same(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        app = _graph(saver, empty="x")
        for t in "xy":
            app.invoke({"log": ["in"]}, cfg(t))
        sets = [_head(saver, t)["updated_channels"] for t in "xy"]
        assert sets == [["branch:to:n", "log"], ["branch:to:n"]]
        assert diff_threads(saver.store, cfg("x"), cfg("y")).same  # [] to a list
        for t, updated in (("none", None), ("empty", [])):
            _put_copy(saver, "y", t, updated)  # None and []: every node (update_state, copies)
            diff = diff_threads(saver.store, cfg("y"), cfg(t))
            assert diff.same, (t, diff.summary)
        got = {app.invoke(None, cfg(t))["log"] == ["in", "n"] for t in ("x", "y", "none")}
        assert got == {True}


def test_a_set_naming_a_channel_its_step_did_not_move_is_undecidable(url: str) -> None:
    """LangGraph's loop names only what its step updated: a set naming more may make a
    node no checkpoint names a candidate on one side only (here none is: both run n)."""
    with CpstoreSaver.from_conn_string(url) as saver:
        app = _graph(saver)
        app.invoke({"log": ["in"]}, cfg("a"))
        _put_copy(saver, "a", "b", ["branch:to:n", "log"])
        diff = diff_threads(saver.store, cfg("a"), cfg("b"))
        assert not diff.same and diff.undecidable and diff.channels == ("log",), diff.summary
        assert "B's name log, which its step did not move" in diff.summary, diff.summary


def test_a_resume_adds_the_null_task_writes_to_the_set(url: str) -> None:
    """A ``Command(goto="n")`` stored on the last checkpoints (null-task writes, as
    ``_first`` puts them) makes ``n`` a candidate on both: the sets resume alike."""
    with CpstoreSaver.from_conn_string(url) as saver:
        app = _graph(saver, empty="c")  # on c, a appends [] to log: its step moves log
        for t in "ac":
            app.invoke({"log": ["in"]}, cfg(t))
        _put_copy(saver, "c", "b", ["log"])  # leaving out branch:to:n, which goto names
        for t in "ab":
            conf = saver.get_tuple(cfg(t))
            assert conf is not None
            saver.put_writes(conf.config, [("branch:to:n", "__start__")], NULL_TASK_ID)
        diff = diff_threads(saver.store, cfg("a"), cfg("b"))
        assert diff.same, diff.summary
        got = [app.invoke(None, cfg(t))["log"] for t in "ab"]
        assert got == [["in", "n"], ["in", "n"]]


def test_updated_channels_that_are_no_list_of_names_are_undecidable(url: str) -> None:
    """A string (LangGraph would take its characters for channel names) on one side."""
    with CpstoreSaver.from_conn_string(url) as saver:
        app = _graph(saver)
        app.invoke({"log": ["in"]}, cfg("a"))
        _put_copy(saver, "a", "b", "branch:to:n")
        _put_copy(saver, "a", "c", "branch:to:n")
        diff = diff_threads(saver.store, cfg("a"), cfg("b"))
        assert not diff.same and diff.undecidable, diff.summary
        assert "not a list of channel names" in diff.summary, diff.summary
        assert diff_threads(saver.store, cfg("b"), cfg("c")).same  # one value on both


class _W(TypedDict):
    log: Annotated[list[str], operator.add]
    v: int


def _loop_threads(saver: CpstoreSaver) -> None:
    """Threads LangGraph's loop writes: ``interrupt()`` resumed with ``Command(update=...)``
    and ``Command(goto=...)``, a ``Send`` fan-out, ``interrupt_before``/``after``,
    ``update_state``, a deferred node, ``durability="exit"`` and ``"async"``,
    DeltaChannels, a raw Pregel graph and a subgraph."""

    def ask(_: _W) -> dict[str, Any]:
        return {"log": ["asked " + str(interrupt("?"))]}

    def fan(_: _W) -> list[Send]:
        return [Send("w", {"log": [str(i)], "v": 0}) for i in range(3)]

    g = StateGraph(_W)
    g.add_node("a", lambda _: {"log": ["a"], "v": 1})
    g.add_node("ask", ask)
    g.add_node("w", lambda s: {"log": ["w" + s["log"][0]]})
    g.add_node("b", lambda _: {"v": 1})
    g.add_edge(START, "a")
    g.add_edge("a", "ask")
    g.add_conditional_edges("ask", fan, ["w"])
    g.add_edge("w", "b")
    app = g.compile(checkpointer=saver)
    app.invoke({"log": ["in"]}, cfg("t1"))
    app.invoke(Command(resume="ok", update={"v": 5}), cfg("t1"))
    app.invoke({"log": ["again"]}, cfg("t1"))
    app.invoke(Command(resume="x", goto="b"), cfg("t1"))
    stops = g.compile(checkpointer=saver, interrupt_before=["b"], interrupt_after=["a"])
    stops.invoke({"log": ["in"]}, cfg("t2"))
    stops.invoke(None, cfg("t2"))
    stops.invoke(Command(resume="ok"), cfg("t2"))
    stops.update_state(cfg("t2"), {"v": 9}, as_node="w")
    stops.invoke(None, cfg("t2"))
    d = StateGraph(_W)
    d.add_node("a", lambda _: {"log": ["a"]})
    d.add_node("b", lambda _: {"log": ["b"]})
    d.add_node("d", lambda _: {"v": 2}, defer=True)
    d.add_edge(START, "a")
    d.add_edge(START, "b")
    d.add_edge("a", "d")
    d.add_edge("b", "d")
    deferred = d.compile(checkpointer=saver)
    for t, durability in (("t3", "sync"), ("t4", "exit"), ("t5", "async")):
        deferred.invoke({"log": ["x"]}, cfg(t), durability=durability)
    deltas = delta_graph(saver)
    for i in range(6):
        deltas.invoke({"log": [f"i{i}"]}, cfg("t6"))
    raw = Pregel(
        nodes={
            "one": NodeBuilder().subscribe_only("a").do(lambda _: 0).write_to("c"),
            "two": NodeBuilder()
            .subscribe_to("c")
            .read_from("d")
            .do(lambda i: (i.get("d") or 0) + 1)
            .write_to("d"),
        },
        channels={"a": LastValue(int), "c": LastValue(int), "d": LastValue(int)},
        input_channels="a",
        output_channels=["c", "d"],
        checkpointer=saver,
    )
    raw.invoke(1, cfg("t7"))
    raw.invoke(2, cfg("t7"))
    sub = StateGraph(_W)
    sub.add_node("s1", lambda _: {"log": ["s1"]})
    sub.add_node("s2", ask)
    sub.add_edge(START, "s1")
    sub.add_edge("s1", "s2")
    parent = StateGraph(_W)
    parent.add_node("sub", sub.compile())
    parent.add_edge(START, "sub")
    nested = parent.compile(checkpointer=saver)
    nested.invoke({"log": ["in"]}, cfg("t8"))
    nested.invoke(Command(resume="k"), cfg("t8"))


def test_every_set_the_loop_writes_is_read_as_the_loop_s(url: str) -> None:
    """The rule's premise: each ``updated_channels`` LangGraph 1.x's loop stores names
    what its step moved and nothing else (``_moved``: version against the parent's), so
    threads that differ only there are the same; a ``durability="exit"`` run's one
    checkpoint (a root at step 2) cannot be checked."""
    with CpstoreSaver.from_conn_string(url) as saver:
        _loop_threads(saver)
        checked, odd = unlike_sets(saver)
        assert checked > 40, checked
        assert odd == {
            ("t4", "", 2): "X's cannot be checked (it is a root at step 2: the steps before "
            "were not recorded)"
        }, odd
