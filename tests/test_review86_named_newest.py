"""review86: a side whose config names its thread's newest checkpoint by id against a
side naming none (lgleft86's leftover), and the resume values an interrupted task
consumed on a checkpoint its thread moved past.

LangGraph 1.2.24 time-travels on a resume invoked with None (or a ``Command`` without
``resume``) whose config names a checkpoint id, the newest too (``_loop``:
``is_time_traveling``): it replays the checkpoint, its finished tasks run again and
the ``__resume__`` writes it holds are dropped (the interrupts are asked again). A
config naming no id hands them back. ``diff_threads`` said "same values at all 2
checkpoints" (``one_checkpoint``: "one checkpoint of one thread on both sides" for one
thread named both ways) while, invoked with None, ``fast`` ran again on the named side
only, and a node that had had its first of two interrupts answered finished on one
side and asked it again on the other. Invoked with ``Command(resume=...)`` both hand
them back: undecidable (exit 11), never the same. The moved-past check (lgleft86) left
out resume values: a checkpoint its thread moved past holding only them against the
newest was "same" with the same None resumes differing. Both engines."""

from __future__ import annotations

from typing import Any

from langgraph.graph import START, StateGraph
from langgraph.types import Command, interrupt
from lg_threads import LogState, cfg, fast_beside_asks, invoked, lg_diff, started
from pg_cluster import backend_url  # noqa: F401 - fixture

from cpstore.langgraph import CpstoreSaver, diff_threads


def _twice(saver: CpstoreSaver, runs: list[str]) -> Any:
    """``twice`` asks two interrupts, logging both answers; ``runs`` counts its runs."""

    def twice(_: LogState) -> dict[str, Any]:
        runs.append("twice")
        first, second = interrupt("first?"), interrupt("second?")
        return {"log": [f"{first}/{second}"]}

    g = StateGraph(LogState)
    g.add_node("twice", twice)
    g.add_edge(START, "twice")
    return g.compile(checkpointer=saver)


def test_a_side_naming_the_newest_by_id_against_none_is_undecidable(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        runs: list[str] = []
        app = fast_beside_asks(saver, runs)
        ids = started(app, saver, ("a", "b", "c", "d", "e"))
        diff = diff_threads(saver.store, cfg("a"), cfg("b", ids["b"]))
        # before: "same values at all 2 checkpoints"
        assert not diff.same and diff.undecidable and diff.pending, diff.summary
        assert diff.nodes == ("fast",) and "B's config names its checkpoint id" in diff.summary
        one = diff_threads(saver.store, cfg("e", ids["e"]), cfg("e"))
        # before: "same values at all 2 checkpoints (one checkpoint of one thread on both sides)"
        assert not one.same and one.undecidable and one.nodes == ("fast",), one.summary
        both = diff_threads(saver.store, cfg("a", ids["a"]), cfg("b", ids["b"]))
        assert both.same, both.summary  # both named: both time-travel with None, alike
        assert diff_threads(saver.store, cfg("a"), cfg("b")).same
        # each resume on a thread of its own: invoked with None, fast runs again on the
        # named side only; with Command(resume=...) on neither
        assert invoked(app, runs, None, cfg("a"))[2] == []
        assert invoked(app, runs, None, cfg("b", ids["b"]))[2] == ["fast"]
        assert invoked(app, runs, Command(resume="y"), cfg("c"))[2] == []
        assert invoked(app, runs, Command(resume="y"), cfg("d", ids["d"]))[2] == []


def test_resume_values_only_against_a_side_naming_none_are_undecidable(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        runs: list[str] = []
        app = _twice(saver, runs)
        # the first answered, the second asked; a copy moves p1 and p2 past it
        threads = ("u1", "u2", "n1", "p1", "p2")
        ids = started(app, saver, threads, Command(resume="A1"), moved_past=("p1", "p2"))
        for named in (cfg("n1", ids["n1"]), cfg("p1", ids["p1"])):
            diff = diff_threads(saver.store, cfg("u1"), named)
            # before: "same values at all 2 checkpoints"
            assert not diff.same and diff.undecidable, diff.summary
            assert diff.nodes == ("twice",) and "__resume__" in diff.channels, diff.summary
        # the named newest and the moved past both time-travel with None: alike
        assert diff_threads(saver.store, cfg("n1", ids["n1"]), cfg("p2", ids["p2"])).same
        done: tuple[list[str], list[str], list[str]] = (["in", "A1/A1"], [], ["twice"])
        asked = (["in"], ["first?"], ["twice"])
        assert invoked(app, runs, None, cfg("u1")) == done  # its null resume answers both
        assert invoked(app, runs, None, cfg("n1", ids["n1"])) == asked
        assert invoked(app, runs, None, cfg("p1", ids["p1"])) == asked
        # with Command(resume=...) the resume values are kept on both
        assert invoked(app, runs, Command(resume="Z"), cfg("u2"))[0] == ["in", "A1/Z"]
        assert invoked(app, runs, Command(resume="Z"), cfg("p2", ids["p2"]))[0] == ["in", "A1/Z"]


def test_lg_diff_exits_11_on_a_side_naming_the_newest_by_id(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        named = started(fast_beside_asks(saver, []), saver, ("a", "b"))["b"]
    out = lg_diff(url, "a", "b", "--checkpoint-b", named)
    assert out.returncode == 11, (out.returncode, out.stdout, out.stderr)  # before: 0


def _parent(saver: CpstoreSaver, runs: list[str]) -> Any:
    """``fast`` beside ``asks`` as a subgraph ``sub``: ``fast``'s writes are pending in
    the subgraph's namespace, the parent holds only the interrupt."""
    g = StateGraph(LogState)
    g.add_node("sub", fast_beside_asks(None, runs))  # type: ignore[arg-type]
    g.add_edge(START, "sub")
    return g.compile(checkpointer=saver)


def test_a_subgraph_s_finished_writes_under_a_side_named_by_id_are_undecidable(
    url: str,
) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        runs: list[str] = []
        app = _parent(saver, runs)
        ids = started(app, saver, ("a", "b", "c", "p1", "p2"), moved_past=("p1", "p2"))
        for a, b in (
            (cfg("a"), cfg("b", ids["b"])),  # both newest, one named
            (cfg("c", ids["c"]), cfg("c")),  # one thread named both ways
            (cfg("a"), cfg("p1", ids["p1"])),  # one moved past
        ):
            diff = diff_threads(saver.store, a, b)
            # before: "same values at all 2 checkpoints" (one thread: "... one checkpoint
            # of one thread on both sides")
            assert not diff.same and diff.undecidable and diff.nodes == ("fast",), diff.summary
        assert invoked(app, runs, None, cfg("a"))[2] == []
        assert invoked(app, runs, None, cfg("b", ids["b"]))[2] == ["fast"]  # replayed below
        assert invoked(app, runs, None, cfg("p1", ids["p1"]))[2] == ["fast"]
        # with Command(resume=...) neither runs fast again
        want: tuple[list[str], list[str], list[str]] = (["in", "in", "asked y", "fast"], [], [])
        assert invoked(app, runs, Command(resume="y"), cfg("c")) == want
        assert invoked(app, runs, Command(resume="y"), cfg("p2", ids["p2"])) == want


def test_an_interrupt_alone_named_against_none_stays_the_same(url: str) -> None:
    """Nothing finished, nothing answered: both resumes ask the interrupt again (None)
    or answer it (``Command(resume=...)``) alike."""
    with CpstoreSaver.from_conn_string(url) as saver:
        runs: list[str] = []

        def asks(_: LogState) -> dict[str, Any]:
            runs.append("asks")
            return {"log": [str(interrupt("q?"))]}

        g = StateGraph(LogState)
        g.add_node("asks", asks)
        g.add_edge(START, "asks")
        app = g.compile(checkpointer=saver)
        ids = started(app, saver, ("u1", "u2", "n1", "n2"))
        assert diff_threads(saver.store, cfg("u1"), cfg("n1", ids["n1"])).same
        assert diff_threads(saver.store, cfg("n2", ids["n2"]), cfg("n2")).same
        asked = (["in"], ["q?"], ["asks"])
        assert invoked(app, runs, None, cfg("u1")) == asked
        assert invoked(app, runs, None, cfg("n1", ids["n1"])) == asked
        answered: tuple[list[str], list[str], list[str]] = (["in", "z"], [], ["asks"])
        assert invoked(app, runs, Command(resume="z"), cfg("u2")) == answered
        assert invoked(app, runs, Command(resume="z"), cfg("n2", ids["n2"])) == answered
