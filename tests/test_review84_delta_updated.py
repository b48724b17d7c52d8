"""review84: ``updated_channels`` leaving out a DeltaChannel the step's tasks wrote.

lgdiff83 reads a set as the loop's when it names every available channel its step
moved, DeltaChannels aside (a snapshot moves a DeltaChannel's version beside the step).
So a set leaving out a DeltaChannel its step wrote passed: in a Pregel graph whose node
``two`` is subscribed to the DeltaChannel ``d`` (stopped before ``two``), a thread whose
last checkpoint's set left out ``d`` resumed without running ``two`` while
``diff_threads`` said "same values at all 2 checkpoints". A DeltaChannel the step's
tasks wrote (the parent's writes under a task id) is now one the set must name;
undecidable otherwise. Every set the loop writes for DeltaChannel graphs (snapshots
every update and every 1000, ``Command(update=...)``, interrupts, a ``Send``, each
durability) is still read as the loop's, and two runs alike stay the same. Both
engines."""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

from langgraph.channels import LastValue
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import copy_checkpoint
from langgraph.graph import START, StateGraph
from langgraph.pregel import NodeBuilder, Pregel
from langgraph.types import Command, Send, interrupt
from lg_delta import concat
from lg_threads import cfg, unlike_sets
from pg_cluster import backend_url  # noqa: F401 - fixture

from cpstore.langgraph import CpstoreSaver, diff_threads


def _raw(saver: CpstoreSaver, runs: list[str], every: int = 1000) -> Any:
    """``one`` writes ``c`` and the DeltaChannel ``d``; ``two``, subscribed to ``d``, is
    stopped before."""

    def two(_: Any) -> int:
        runs.append("two")
        return 1

    return Pregel(
        nodes={
            "one": NodeBuilder()
            .subscribe_only("a")
            .do(lambda _: ["x"])
            .write_to("d", c=lambda _: 1),
            "two": NodeBuilder().subscribe_only("d").do(two).write_to("e"),
        },
        channels={
            "a": LastValue(int),
            "c": LastValue(int),
            "d": DeltaChannel(concat, snapshot_frequency=every),
            "e": LastValue(int),
        },
        input_channels="a",
        output_channels=["c", "e"],
        checkpointer=saver,
        interrupt_before_nodes=["two"],
    )


def _put_copy(saver: CpstoreSaver, src: str, dst: str, updated: Any) -> None:
    """``src``'s chain and writes put as ``dst``, the newest with ``updated``."""
    chain = list(saver.list(cfg(src)))[::-1]
    parent: str | None = None
    for i, tup in enumerate(chain):
        cp = copy_checkpoint(tup.checkpoint)
        if i == len(chain) - 1:
            cp["updated_channels"] = updated
        out = saver.put(cfg(dst, parent), cp, tup.metadata, dict(cp["channel_versions"]))
        for tid, channel, value in tup.pending_writes or []:
            saver.put_writes(out, [(channel, value)], tid)
        parent = out["configurable"]["checkpoint_id"]


def test_a_set_leaving_out_a_delta_channel_its_step_wrote_is_not_the_same(url: str) -> None:
    runs: list[str] = []
    with CpstoreSaver.from_conn_string(url) as saver:
        app = _raw(saver, runs)
        app.invoke(1, cfg("a"))
        assert saver.get_tuple(cfg("a")).checkpoint["updated_channels"] == ["c", "d"]  # type: ignore[union-attr]
        _put_copy(saver, "a", "b", ["c"])
        diff = diff_threads(saver.store, cfg("a"), cfg("b"))
        # before: "same values at all 2 checkpoints"
        assert not diff.same and diff.undecidable and diff.pending, diff.summary
        assert "B's leave out d" in diff.summary and diff.channels == ("d",), diff.summary
        got = []
        for t in "ab":
            runs.clear()
            got.append((app.invoke(None, cfg(t)), list(runs)))
        assert got == [({"c": 1, "e": 1}, ["two"]), ({"c": 1}, [])]


class _D(TypedDict):
    log: Annotated[list[str], DeltaChannel(concat, snapshot_frequency=1)]
    more: Annotated[list[str], DeltaChannel(concat, snapshot_frequency=1000)]


def _delta_threads(saver: CpstoreSaver, pre: str) -> list[str]:
    """Threads of DeltaChannel graphs, their ids starting with ``pre``."""
    runs: list[str] = []
    for every in (1, 1000):
        for durability in ("sync", "async", "exit"):
            t = f"{pre}raw{every}{durability}"
            app = _raw(saver, runs, every)
            app.invoke(1, cfg(t), durability=durability)
            app.invoke(None, cfg(t), durability=durability)
            app.invoke(2, cfg(t), durability=durability)

    def ask(_: _D) -> dict[str, Any]:
        return {"log": ["asked " + str(interrupt("?"))], "more": ["m"]}

    g = StateGraph(_D)
    g.add_node("a", lambda _: {"log": ["a"]})
    g.add_node("ask", ask)
    g.add_node("w", lambda s: {"more": ["w"]})
    g.add_edge(START, "a")
    g.add_conditional_edges("a", lambda _: [Send("w", {}), "ask"], ["w", "ask"])
    app = g.compile(checkpointer=saver)
    for durability in ("sync", "async", "exit"):
        t = f"{pre}sg{durability}"
        app.invoke({"log": ["in"]}, cfg(t), durability=durability)
        app.invoke(Command(resume="ok", update={"more": ["u"]}), cfg(t), durability=durability)
        app.invoke({"log": ["again"]}, cfg(t), durability=durability)
        app.invoke(Command(resume="x"), cfg(t), durability=durability)
    return sorted({str(c.config["configurable"]["thread_id"]) for c in saver.list(None)})


def test_every_set_the_loop_writes_for_delta_channels_is_the_loop_s(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        _delta_threads(saver, "x")
        checked, unlike = unlike_sets(saver)
        odd = {
            (t, step): why for (t, _, step), why in unlike.items() if "cannot be checked" not in why
        }
        assert checked > 40, checked
        assert odd == {}, odd


def test_delta_threads_run_alike_are_the_same(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        threads = _delta_threads(saver, "p")
        _delta_threads(saver, "q")
        for t in threads:
            diff = diff_threads(saver.store, cfg(t), cfg("q" + t[1:]))
            assert diff.same, (t, diff.summary)
