"""lgleft88: a side naming a checkpoint its thread moved past while a
``checkpointer=True`` subgraph is mid-run under it, and the subgraph went on after it.

A time travel of the parent (a ``Command(update=...)`` invoked at the interrupted
checkpoint ``P1``) puts a fork after ``P1`` and runs the subgraph again from its state
before ``P1`` with the fork's input: the subgraph's namespace (``sub``, one per thread)
now holds a newer state than the one mid-run under ``P1``. LangGraph 1.2.24 resumes
``P1`` named by id with ``Command(resume=...)`` without a time travel (a ``Command``
whose ``resume`` is set), and the subgraph loads the newest checkpoint of its namespace,
the fork's run: its ``u`` came back in the output. ``diff_threads`` compared the
subgraph at its newest state by the time of ``P1`` (the state under ``P1`` on both
sides) and said "same values at all 2 checkpoints" against a thread interrupted alike
(named, or naming none) while those resumes differed; invoked with None both time-travel
from the subgraph's state before ``P1`` and run alike. Now the subgraph's newest states
are compared too: undecidable when they differ (the answer turns on how it is resumed).
A plain subgraph (its namespace holds the task id) is not affected. Both engines."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from langgraph.types import Command
from lg_threads import cfg, with_nested_subgraph, with_subgraph
from pg_cluster import backend_url  # noqa: F401 - fixture

from cpstore.langgraph import CpstoreSaver, diff_threads


def _ids(saver: CpstoreSaver, thread: str) -> list[str]:
    """The thread's checkpoint ids, newest first."""
    return [str(t.config["configurable"]["checkpoint_id"]) for t in saver.list(cfg(thread))]


def _run(app: Any, runs: list[str], value: Any, conf: Any) -> tuple[Any, list[str], list[str]]:
    runs.clear()
    out = app.invoke(value, conf)
    return sorted(out["log"]), [str(i.value) for i in out.get("__interrupt__", ())], sorted(runs)


def _threads(app: Any, saver: CpstoreSaver, names: tuple[str, ...]) -> dict[str, str]:
    """Each thread interrupted in ``sub`` at ``P1`` (its id returned); those named
    ``m*`` then moved past it by a ``Command(update=...)`` time travel of ``P1``."""
    p1: dict[str, str] = {}
    for t in names:
        app.invoke({"log": ["in"]}, cfg(t))
        p1[t] = _ids(saver, t)[0]
        if t.startswith("m"):
            app.invoke(Command(update={"log": ["u"]}), cfg(t, p1[t]))
    return p1


@pytest.mark.parametrize("shape", ["pre", "fast", "alone"])
def test_a_kept_subgraph_gone_on_past_a_named_checkpoint_is_not_the_same(
    url: str, shape: str
) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        runs: list[str] = []
        app = with_subgraph(saver, runs, shape)
        p1 = _threads(app, saver, ("m1", "m2", "m3", "m4", "n1", "n2", "n3"))
        assert len(_ids(saver, "m1")) == 3  # the fork went on after P1
        moved, named = cfg("m1", p1["m1"]), cfg("n1", p1["n1"])
        diff = diff_threads(saver.store, moved, named)
        # before: "same values at all 2 checkpoints"
        assert not diff.same and diff.undecidable and "sub" in diff.nodes, diff.summary
        assert "newest" in diff.summary, diff.summary
        unnamed = diff_threads(saver.store, moved, cfg("n3"))
        assert not unnamed.same and unnamed.undecidable, unnamed.summary  # before (alone): same
        # with Command(resume=...) the subgraph loads its newest state on the moved side
        got = [_run(app, runs, Command(resume="y"), c) for c in (moved, named, cfg("n3"))]
        assert "u" in got[0][0] and "u" not in got[1][0] and got[1] == got[2], got
        # invoked with None both named sides start the subgraph over from before P1, alike
        again = [_run(app, runs, None, c) for c in (cfg("m2", p1["m2"]), cfg("n2", p1["n2"]))]
        assert again[0] == again[1], again
        # both moved past alike: the same, and resumed alike either way
        both = diff_threads(saver.store, cfg("m3", p1["m3"]), cfg("m4", p1["m4"]))
        assert both.same, both.summary
        alike = [_run(app, runs, Command(resume="y"), cfg(t, p1[t])) for t in ("m3", "m4")]
        assert alike[0] == alike[1] and "u" in alike[0][0]


def test_a_plain_subgraph_gone_on_past_a_named_checkpoint_stays_the_same(url: str) -> None:
    """The fork's run of a plain subgraph sits in a namespace of another task id: a
    resume of ``P1`` never loads it, and both resumes run alike (no overreach)."""
    with CpstoreSaver.from_conn_string(url) as saver:
        runs: list[str] = []
        app = with_subgraph(saver, runs, "pre", kept=False)
        p1 = _threads(app, saver, ("m1", "m2", "n1", "n2"))
        moved, named = cfg("m1", p1["m1"]), cfg("n1", p1["n1"])
        assert diff_threads(saver.store, moved, named).same
        got = [_run(app, runs, Command(resume="y"), c) for c in (moved, named)]
        assert got[0] == got[1]
        got = [_run(app, runs, None, cfg(t, p1[t])) for t in ("m2", "n2")]
        assert got[0] == got[1]


def test_lg_diff_exits_11_on_a_kept_subgraph_gone_on_past_the_named_checkpoint(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        p1 = _threads(with_subgraph(saver, [], "pre"), saver, ("m", "n"))
    out = subprocess.run(
        [sys.executable, "-m", "cpstore.cli", "lg-diff", "m", "n", "--checkpoint-a", p1["m"],
         "--checkpoint-b", p1["n"], "--store", url],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert out.returncode == 11, (out.returncode, out.stdout, out.stderr)  # before: 0


@pytest.mark.parametrize("inner", [True, False])
def test_a_kept_outer_subgraph_gone_on_past_a_named_checkpoint_is_not_the_same(
    url: str, inner: bool
) -> None:
    """``inner`` (``checkpointer=True`` or not) stopped after ``pre`` inside a
    ``checkpointer=True`` ``sub``: the same resumes differed, the diff said the same."""
    with CpstoreSaver.from_conn_string(url) as saver:
        runs: list[str] = []
        app = with_nested_subgraph(saver, runs, outer=True, inner=inner)
        p1 = _threads(app, saver, ("m1", "m2", "n1", "n2"))
        moved, named = cfg("m1", p1["m1"]), cfg("n1", p1["n1"])
        diff = diff_threads(saver.store, moved, named)
        # before: "same values at all 2 checkpoints"
        assert not diff.same and diff.undecidable and "sub" in diff.nodes, diff.summary
        got = [_run(app, runs, Command(resume="y"), c) for c in (moved, named)]
        assert "u" in got[0][0] and "u" not in got[1][0], got
        again = [_run(app, runs, None, cfg(t, p1[t])) for t in ("m2", "n2")]
        assert again[0] == again[1], again
