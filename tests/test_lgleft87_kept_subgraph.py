"""lgleft87: a side naming its thread's newest checkpoint by id (or one its thread moved
past) against a side naming none, when what a time travel replays sits below the
parent: in a ``checkpointer=True`` subgraph's own namespace, or in the steps a subgraph
ran before it stopped.

LangGraph 1.2.24 time-travels on a resume invoked with None whose config names a
checkpoint id (``_loop``: ``is_time_traveling``) and hands each subgraph a
``ReplayState``: the subgraph loads the newest checkpoint of its namespace below the
replayed one (none for a namespace holding a task id; a ``checkpointer=True``
subgraph's state before this run) and applies its input again. review86 read the
writes pending in subgraphs mid-run but left out a ``checkpointer=True`` subgraph's
(its namespace ``sub`` holds no task id), and read nothing of the steps a subgraph ran
before its interrupt: ``diff_threads`` said "same values at all 2 checkpoints" (one
thread named both ways: "... one checkpoint of one thread on both sides") while,
invoked with None, the subgraph's ``fast`` (finished beside ``asks``), or its ``pre``
(run the step before ``asks``), ran again on the named side only. With
``Command(resume=...)`` neither ran again: undecidable (exit 11), never the same. Both
engines."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.types import Command
from lg_threads import (
    cfg,
    invoked,
    lg_diff,
    newest_id,
    started,
    with_nested_subgraph,
    with_subgraph,
)
from pg_cluster import backend_url  # noqa: F401 - fixture

from cpstore.langgraph import CpstoreSaver, diff_threads


def _run(app: Any, runs: list[str], value: Any, conf: Any) -> tuple[Any, list[str], list[str]]:
    return invoked(app, runs, value, conf, sort=True)  # the log sorted


def _threads(app: Any, saver: CpstoreSaver) -> dict[str, str]:
    """Threads u1 u2 n1 n2 p1 p2 interrupted alike; p1 and p2 moved past (``__copy__``)."""
    return started(app, saver, ("u1", "u2", "n1", "n2", "p1", "p2"), moved_past=("p1", "p2"))


@pytest.mark.parametrize(
    ("shape", "kept"), [("fast", True), ("pre", True), ("pre", False)]
)  # fmt: skip
def test_what_a_time_travel_replays_below_a_side_named_by_id_is_undecidable(
    url: str, shape: str, kept: bool
) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        runs: list[str] = []
        app = with_subgraph(saver, runs, shape, kept=kept)
        ids = _threads(app, saver)
        for a, b in (
            (cfg("u1"), cfg("n1", ids["n1"])),  # both newest, one named
            (cfg("n2", ids["n2"]), cfg("n2")),  # one thread named both ways
            (cfg("u1"), cfg("p1", ids["p1"])),  # one moved past, the other named by none
        ):
            diff = diff_threads(saver.store, a, b)
            # before: "same values at all 2 checkpoints" (one thread: "... one
            # checkpoint of one thread on both sides")
            assert not diff.same and diff.undecidable, diff.summary
            assert "sub" in diff.nodes or shape in diff.nodes, diff.summary
        # both named (newest and moved past): both time-travel with None, alike
        assert diff_threads(saver.store, cfg("n1", ids["n1"]), cfg("p1", ids["p1"])).same
        # invoked with None the subgraph's finished node runs again on the named sides only
        asked = (["in"], ["ok?"], ["asks"])
        assert _run(app, runs, None, cfg("u1")) == asked
        again = sorted(_run(app, runs, None, cfg("n1", ids["n1"]))[2])
        assert again == sorted(["asks", shape])
        assert sorted(_run(app, runs, None, cfg("p1", ids["p1"]))[2]) == again
        # with Command(resume=...) on none of them
        answered = sorted(["in", "in", "asked y", shape])
        for conf in (cfg("u2"), cfg("n2", ids["n2"]), cfg("p2", ids["p2"])):
            assert _run(app, runs, Command(resume="y"), conf) == (answered, [], ["asks"])


@pytest.mark.parametrize("kept", [True, False])
def test_a_subgraph_s_interrupt_alone_named_against_none_stays_the_same(
    url: str, kept: bool
) -> None:
    """Nothing finished in the subgraph, no step run before its interrupt: a time travel
    starts it over to the same interrupt, so both resumes run alike (no overreach)."""
    with CpstoreSaver.from_conn_string(url) as saver:
        runs: list[str] = []
        app = with_subgraph(saver, runs, "alone", kept=kept)
        ids = _threads(app, saver)
        assert diff_threads(saver.store, cfg("u1"), cfg("n1", ids["n1"])).same
        assert diff_threads(saver.store, cfg("n2", ids["n2"]), cfg("n2")).same
        asked = (["in"], ["ok?"], ["asks"])
        assert _run(app, runs, None, cfg("u1")) == asked
        assert _run(app, runs, None, cfg("n1", ids["n1"])) == asked
        answered: tuple[list[str], list[str], list[str]] = (["asked y", "in", "in"], [], ["asks"])
        assert _run(app, runs, Command(resume="y"), cfg("u2")) == answered
        assert _run(app, runs, Command(resume="y"), cfg("n2", ids["n2"])) == answered


def test_lg_diff_exits_11_on_a_kept_subgraph_named_by_id(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        named = started(with_subgraph(saver, [], "fast", kept=True), saver, ("a", "b"))["b"]
    out = lg_diff(url, "a", "b", "--checkpoint-b", named)
    assert out.returncode == 11, (out.returncode, out.stdout, out.stderr)  # before: 0


@pytest.mark.parametrize("shape", ["pre", "alone"])
def test_a_kept_subgraph_s_second_run_starts_over_from_its_first_s_end(
    url: str, shape: str
) -> None:
    """The thread's second run: a time travel loads the ``checkpointer=True``
    subgraph's state at its first run's end and applies its input again; ``pre`` runs
    again on the named side only (undecidable), ``asks`` alone runs alike (same)."""
    with CpstoreSaver.from_conn_string(url) as saver:
        runs: list[str] = []
        app = with_subgraph(saver, runs, shape, kept=True)
        ids = started(app, saver, ("u1", "u2", "n1", "n2"), Command(resume="r1"), {"log": ["in2"]})
        diff = diff_threads(saver.store, cfg("u1"), cfg("n1", ids["n1"]))
        # before (pre): "same values at all 5 checkpoints"
        assert diff.same == (shape == "alone") and diff.undecidable != diff.same, diff.summary
        assert diff_threads(saver.store, cfg("n1", ids["n1"]), cfg("n2", ids["n2"])).same
        unnamed = _run(app, runs, None, cfg("u1"))
        named = _run(app, runs, None, cfg("n1", ids["n1"]))
        assert unnamed[:2] == named[:2] and unnamed[2] == ["asks"]
        assert named[2] == (["pre", "asks"] if shape == "pre" else ["asks"])
        resumed = [_run(app, runs, Command(resume="y"), cfg("u2"))]
        resumed.append(_run(app, runs, Command(resume="y"), cfg("n2", ids["n2"])))
        assert resumed[0] == resumed[1] and resumed[0][2] == ["asks"]


@pytest.mark.parametrize(
    ("outer", "inner"), [(True, True), (True, False), (False, True), (False, False)]
)  # fmt: skip
def test_a_nested_subgraph_started_over_is_undecidable(url: str, outer: bool, inner: bool) -> None:
    """``pre`` then ``asks`` in ``inner``, inside ``outer`` (each ``checkpointer=True``
    or not): a time travel starts ``inner`` over, ``pre`` runs again on the named side."""
    with CpstoreSaver.from_conn_string(url) as saver:
        runs: list[str] = []
        app = with_nested_subgraph(saver, runs, outer=outer, inner=inner, name="outer")
        ids = started(app, saver, ("u1", "u2", "n1", "n2"))
        diff = diff_threads(saver.store, cfg("u1"), cfg("n1", ids["n1"]))
        # before: "same values at all 2 checkpoints"
        assert not diff.same and diff.undecidable and "inner" in diff.nodes, diff.summary
        assert _run(app, runs, None, cfg("u1"))[2] == ["asks"]
        assert _run(app, runs, None, cfg("n1", ids["n1"]))[2] == ["pre", "asks"]
        got = [_run(app, runs, Command(resume="y"), c) for c in (cfg("u2"), cfg("n2", ids["n2"]))]
        assert got[0] == got[1] and got[0][2] == ["asks"]


@pytest.mark.parametrize("kept", [True, False])
def test_after_update_state_only_a_kept_subgraph_resumes_otherwise(url: str, kept: bool) -> None:
    """``update_state`` on the interrupted parent: its newest (``source`` "update") runs
    ``sub`` under a new task id, so a plain subgraph starts over on both sides (same,
    alike); a ``checkpointer=True`` one goes on from its newest on the side naming none
    and starts over on the named side (``pre`` again: undecidable)."""
    with CpstoreSaver.from_conn_string(url) as saver:
        runs: list[str] = []
        app = with_subgraph(saver, runs, "pre", kept=kept)
        for t in ("u1", "u2", "n1", "n2"):
            app.invoke({"log": ["in"]}, cfg(t))
            app.update_state(cfg(t), {"log": ["x"]}, as_node="__start__")
        ids = {t: newest_id(saver, t) for t in ("n1", "n2")}
        diff = diff_threads(saver.store, cfg("u1"), cfg("n1", ids["n1"]))
        # before (kept): "same values at all 3 checkpoints"
        assert diff.same != kept and diff.undecidable == kept, diff.summary
        unnamed = _run(app, runs, None, cfg("u1"))
        named = _run(app, runs, None, cfg("n1", ids["n1"]))
        assert unnamed[:2] == named[:2] == (["in", "x"], ["ok?"])
        assert named[2] == ["pre", "asks"]
        assert unnamed[2] == (["asks"] if kept else ["pre", "asks"])
        got = [_run(app, runs, Command(resume="y"), c) for c in (cfg("u2"), cfg("n2", ids["n2"]))]
        assert got[0] == got[1]
