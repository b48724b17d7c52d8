"""lgdiff89: pending writes that differ where a resume replays the checkpoint.

``fast`` finishes beside ``asks``, which interrupts, at ``P1``; then
``update_state(P1, None, as_node="__copy__")`` puts a copy holding no pending write. A
resume addressed at ``P1`` (its thread moved past it) replays it: LangGraph 1.2.24 runs
``fast`` again rather than taking its writes back, as a resume of the copy runs it,
invoked with None or with ``Command(resume=...)``: the resumes ran alike while
``diff_threads`` said "the pending writes at the last (step 0) differ: node asks, fast
wrote different __interrupt__, log". And a copy named by id against a ``copy_thread``
copy of ``P1`` named by id (both their thread's newest): invoked with None both
time-travel and run ``fast`` again, with ``Command(resume=...)`` only the copy does;
the diff said they diverge. Both are now undecidable (writes read alike one way, or
both ways but the checks after them not made). So is a subgraph mid-run on the
replayed side only. Both engines."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.graph import START, StateGraph
from langgraph.types import Command, interrupt
from lg_threads import LogState, cfg, fast_beside_asks, invoked, newest_id
from pg_cluster import backend_url  # noqa: F401 - fixture

from cpstore.langgraph import CpstoreSaver, diff_threads


def _sides(app: Any, saver: CpstoreSaver, k: int) -> dict[str, Any]:
    """Fresh threads: ``t`` interrupted at ``P1`` and copied (``__copy__``), and ``c``
    a ``copy_thread`` copy of ``t`` taken before that; each compared side's config."""
    t, c = f"t{k}", f"c{k}"
    app.invoke({"log": ["in"]}, cfg(t))
    p1 = newest_id(saver, t)
    saver.copy_thread(t, c)
    app.update_state(cfg(t, p1), None, as_node="__copy__")
    return {
        "original": cfg(t, p1),
        "copy": cfg(t),
        "copy named": cfg(t, newest_id(saver, t)),
        "copied thread named": cfg(c, p1),
    }


@pytest.mark.parametrize(
    ("pair", "alike"),
    [
        (("original", "copy"), (True, True)),
        (("original", "copy named"), (True, True)),
        (("copy named", "copied thread named"), (True, False)),
    ],
)
def test_writes_a_replay_does_not_read_are_undecidable(
    url: str, pair: tuple[str, str], alike: tuple[bool, bool]
) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        runs: list[str] = []
        app = fast_beside_asks(saver, runs)
        sides = _sides(app, saver, 0)
        diff = diff_threads(saver.store, sides[pair[0]], sides[pair[1]])
        # before: "... the pending writes at the last (step 0) differ: node asks, fast
        # wrote different __interrupt__, log"
        assert not diff.same and diff.undecidable, diff.summary
        for k, value in enumerate((None, Command(resume="ok"))):
            got = [
                invoked(app, runs, value, _sides(app, saver, 10 * k + i + 1)[s], sort=True)
                for i, s in enumerate(pair)
            ]
            assert (got[0] == got[1]) is alike[k], (value, got)


def _sub_app(saver: CpstoreSaver, runs: list[str]) -> Any:
    """A plain subgraph ``sub``: ``pre``, then ``asks``, which interrupts."""

    def node(name: str) -> Any:
        def run(_: LogState) -> dict[str, Any]:
            runs.append(name)
            if name == "asks":
                return {"log": [f"asked {interrupt('ok?')}"]}
            return {"log": [name]}

        return run

    s = StateGraph(LogState)
    s.add_node("pre", node("pre"))
    s.add_node("asks", node("asks"))
    s.add_edge(START, "pre")
    s.add_edge("pre", "asks")
    g = StateGraph(LogState)
    g.add_node("sub", s.compile())
    g.add_edge(START, "sub")
    return g.compile(checkpointer=saver)


def test_a_subgraph_mid_run_on_a_replayed_side_only_is_undecidable(url: str) -> None:
    """``sub`` mid-run under ``P1`` and not under its ``__copy__``: invoked with None
    the named ``P1`` time-travels and starts ``sub`` over, as the copy runs it afresh;
    with ``Command(resume=...)`` it goes on mid-run (``pre`` not run again). The diff
    said "subgraph sub is mid-run on A only", a divergence."""
    with CpstoreSaver.from_conn_string(url) as saver:
        runs: list[str] = []
        app = _sub_app(saver, runs)
        sides = _sides(app, saver, 0)
        diff = diff_threads(saver.store, sides["original"], sides["copy"])
        # before: "same values at all 2 checkpoints, but subgraph sub is mid-run on A only"
        assert not diff.same and diff.undecidable, diff.summary
        assert "sub" in diff.nodes, diff.summary
        # the copy against a thread interrupted alike, unnamed: a divergence still
        app.invoke({"log": ["in"]}, cfg("n"))
        other = diff_threads(saver.store, sides["copy"], cfg("n"))
        assert not other.same and not other.undecidable, other.summary
        for k, value in enumerate((None, Command(resume="ok"))):
            got = [
                invoked(app, runs, value, _sides(app, saver, 10 * k + i + 1)[s], sort=True)
                for i, s in enumerate(("original", "copy"))
            ]
            assert (got[0] == got[1]) is (value is None), (value, got)
