"""lgdiff89: a ``checkpointer=True`` subgraph under a plain subgraph, its thread moved on.

``inner`` (``checkpointer=True``) runs inside a plain ``mid``; its namespace,
``mid|inner``, holds no task id, so the run of ``mid`` that a ``Command(update=...)``
time travel of the interrupted checkpoint ``P1`` starts (under another task id) goes on
in the same namespace. ``diff_threads`` took the newest state of ``inner`` "by the time
of" the compared ``mid`` checkpoint by its ``metadata["parents"]`` entry for ``mid``'s
namespace only: the fork's states name another ``mid`` namespace, and the root's fork
checkpoint (after ``P1``), so they were taken for the compared run's. A thread moved
past ``P1`` named against one interrupted alike "diverged at step -1 ... node (input)
wrote different __start__" while invoked with None both resumed alike (with
``Command(resume=...)`` the moved side loads ``inner``'s newest state and brings ``u``
back: the answer turns on how they are resumed, undecidable, as lgleft88 made it for a
``checkpointer=True`` subgraph under the root). Now a state naming, for any namespace
above, a checkpoint later than the compared one's is left out. Both engines."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.graph import START, StateGraph
from langgraph.types import Command
from lg_threads import LogState, asks_subgraph, cfg, newest_id
from pg_cluster import backend_url  # noqa: F401 - fixture

from cpstore.langgraph import CpstoreSaver, diff_threads


def _app(saver: CpstoreSaver, runs: list[str], shape: str) -> Any:
    """``inner`` (lg_threads.asks_subgraph, ``checkpointer=True``: ``asks`` after
    ``pre``, beside ``fast``, or ``alone``) inside a plain ``mid``; ``runs`` counts each
    node's runs."""
    mid = StateGraph(LogState)
    mid.add_node("inner", asks_subgraph(runs, shape, kept=True))
    mid.add_edge(START, "inner")
    g = StateGraph(LogState)
    g.add_node("mid", mid.compile())
    g.add_edge(START, "mid")
    return g.compile(checkpointer=saver)


def _run(app: Any, runs: list[str], value: Any, conf: Any) -> tuple[Any, ...]:
    runs.clear()
    out = app.invoke(value, conf)
    return sorted(out["log"]), [str(i.value) for i in out.get("__interrupt__", ())], sorted(runs)


@pytest.mark.parametrize("shape", ["pre", "fast", "alone"])
def test_a_kept_subgraph_under_a_plain_one_gone_on_is_undecidable(url: str, shape: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        runs: list[str] = []
        app = _app(saver, runs, shape)
        p1: dict[str, str] = {}
        for t in ("m1", "m2", "m3", "m4", "n1", "n2"):
            app.invoke({"log": ["in"]}, cfg(t))
            p1[t] = newest_id(saver, t)
            if t.startswith("m"):
                app.invoke(Command(update={"log": ["u"]}), cfg(t, p1[t]))
        at = {t: cfg(t, p1[t]) for t in p1}
        diff = diff_threads(saver.store, at["m1"], at["n1"])
        # before: "... subgraph inner (checkpointer=True) ('mid|inner', 'mid|inner'):
        # diverge at step -1 (checkpoint 0 of each chain): node (input) wrote different
        # __start__"
        assert not diff.same and diff.undecidable, diff.summary
        assert "inner" in diff.nodes and "newest" in diff.summary, diff.summary
        both = diff_threads(saver.store, at["m3"], at["m4"])
        assert both.same, both.summary
        # invoked with None both start inner over from before P1, alike; with
        # Command(resume=...) the moved side loads its newest state (the fork's run)
        assert _run(app, runs, None, at["m2"]) == _run(app, runs, None, at["n2"])
        got = [_run(app, runs, Command(resume="y"), at[t]) for t in ("m1", "n1")]
        assert "u" in got[0][0] and "u" not in got[1][0], got
        alike = [_run(app, runs, Command(resume="y"), at[t]) for t in ("m3", "m4")]
        assert alike[0] == alike[1], alike
