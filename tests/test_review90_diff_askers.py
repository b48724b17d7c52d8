"""review90: lgdiff89 compares a write's interrupts as a multiset with their ids blanked
(ids name the asking task's namespace, which differs between any two threads). Could two
threads whose subgraph's parallel nodes asked the same question, but not the same nodes
(``a`` and ``b`` ask, ``c`` ran through; against ``a`` and ``c`` ask, ``b`` ran through),
diff as "same"? Their parent writes one ``__interrupt__`` write each, equal as blanked
multisets, while resuming both with the same answers ends in different logs. The
subgraph's own pending writes tell them apart: a divergence, never "same". Both engines,
a subgraph under the parent's checkpointer and one with ``checkpointer=True``."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.graph import START, StateGraph
from langgraph.types import Command, interrupt
from lg_threads import LogState, cfg
from pg_cluster import backend_url  # noqa: F401 - fixture

from cpstore.langgraph import CpstoreSaver, diff_threads

#: Which nodes ask, by thread id prefix.
_ASKS = {"t": {"a", "b"}, "u": {"a", "c"}}


def _node(name: str) -> Any:
    def run(_: LogState, config: RunnableConfig) -> dict[str, Any]:
        if name in _ASKS[config["configurable"]["thread_id"][0]]:
            return {"log": [f"{name}:{interrupt('q?')}"]}
        return {"log": [f"{name} ran"]}

    return run


def _app(saver: CpstoreSaver, kept: bool) -> Any:
    s = StateGraph(LogState)
    for name in "abc":
        s.add_node(name, _node(name))
        s.add_edge(START, name)
    g = StateGraph(LogState)
    g.add_node("sub", s.compile(checkpointer=True if kept else None))
    g.add_edge(START, "sub")
    return g.compile(checkpointer=saver)


@pytest.mark.parametrize("kept", [False, True])
def test_other_nodes_asking_the_same_question_are_not_the_same(url: str, kept: bool) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        app = _app(saver, kept)
        for thread in ("t", "u"):
            app.invoke({"log": ["in"]}, cfg(thread))
        diff = diff_threads(saver.store, cfg("t"), cfg("u"))
        logs = []
        for thread in ("t", "u"):
            pending = app.get_state(cfg(thread), subgraphs=True).interrupts
            assert len(pending) == 2
            out = app.invoke(Command(resume={i.id: "yes" for i in pending}), cfg(thread))
            logs.append(sorted(out["log"]))
        assert logs[0] != logs[1]  # they really ran differently
        assert not diff.same, diff.summary
        assert not diff.undecidable, diff.summary  # the subgraph's writes decide it
