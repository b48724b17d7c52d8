"""lgdiff89: several pending interrupts answered in part, then a side replayed.

``sub`` (a plain subgraph whose parallel ``a`` and ``b`` each ask) beside ``c``, which
asks too; answers given by ``Command(resume={interrupt id: value})``. Real resumes of
each side on a thread of its own (invoked with None, and with a resume map answering
every interrupt that side has pending) against ``diff_threads``' answer. Both engines."""

from __future__ import annotations

import itertools
import operator
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.graph import START, StateGraph
from langgraph.types import Command, interrupt
from lg_threads import cfg, newest_id
from pg_cluster import backend_url  # noqa: F401 - fixture

from cpstore.langgraph import CpstoreSaver, diff_threads


class _State(TypedDict):
    log: Annotated[list[str], operator.add]


def _app(saver: CpstoreSaver, runs: list[str]) -> Any:
    def asker(name: str) -> Any:
        def run(_: _State) -> dict[str, Any]:
            runs.append(name)
            return {"log": [f"{name}:{interrupt(name + '?')}"]}

        return run

    s = StateGraph(_State)
    for name in ("a", "b"):
        s.add_node(name, asker(name))
        s.add_edge(START, name)
    g = StateGraph(_State)
    g.add_node("sub", s.compile())
    g.add_node("c", asker("c"))
    g.add_edge(START, "sub")
    g.add_edge(START, "c")
    return g.compile(checkpointer=saver)


class _Threads:
    """Fresh thread pairs: ``t`` answered ``mine`` then moved past by a ``__copy__``,
    ``n`` answered ``theirs``; each side's config."""

    def __init__(self, app: Any, saver: CpstoreSaver) -> None:
        self.app, self.saver, self.k = app, saver, itertools.count()

    def pending(self, conf: Any) -> dict[str, str]:
        return {i.value: i.id for i in self.app.get_state(conf, subgraphs=True).interrupts}

    def make(self, mine: list[dict[str, str]], theirs: list[dict[str, str]]) -> dict[str, Any]:
        k = next(self.k)
        t, n = f"t{k}", f"n{k}"
        for thread, answers in ((t, mine), (n, theirs)):
            self.app.invoke({"log": ["in"]}, cfg(thread))
            for given in answers:
                ids = self.pending(cfg(thread))
                self.app.invoke(Command(resume={ids[q]: v for q, v in given.items()}), cfg(thread))
        p1 = newest_id(self.saver, t)
        self.app.update_state(cfg(t, p1), None, as_node="__copy__")
        return {"t@P1": cfg(t, p1), "n": cfg(n), "n@id": cfg(n, newest_id(self.saver, n))}

    def resumed(self, runs: list[str], value: str, conf: Any) -> tuple[Any, ...]:
        """``conf`` resumed with None (``value`` "none"), or every pending interrupt
        answered "y" ("map"), then every one left answered "z": log, runs."""
        runs.clear()
        self.app.invoke(
            None
            if value == "none"
            else Command(resume=dict.fromkeys(self.pending(conf).values(), "y")),
            conf,
        )
        thread = cfg(conf["configurable"]["thread_id"])
        while left := self.pending(thread):
            self.app.invoke(Command(resume=dict.fromkeys(left.values(), "z")), thread)
        out = self.app.get_state(thread).values["log"]
        return sorted(out), sorted(runs)


#: (t's answers, n's answers, n's side, whether the resumes ran alike with None, with a map)
_CASES = [
    # sub finished on both (a then b, b then a); t moved past: replaying it runs sub
    # again, which goes on from its own finished checkpoints with a map (alike), and
    # starts over with None (asks a and b again on t only)
    ([{"a?": "x"}, {"b?": "x"}], [{"b?": "x"}, {"a?": "x"}], "n", False, True),
    # both sides replay when invoked with None (t moved past, n named): every answer is
    # dropped and sub starts over on both, alike; with a map the answers differ
    ([{"a?": "x"}], [{"c?": "x"}], "n@id", True, False),
    ([{"a?": "x"}], [{"a?": "z"}], "n@id", True, False),
]


@pytest.mark.parametrize("case", _CASES)
def test_replayed_partial_answers_are_undecidable(url: str, case: tuple[Any, ...]) -> None:
    mine, theirs, side, none_alike, map_alike = case
    with CpstoreSaver.from_conn_string(url) as saver:
        runs: list[str] = []
        app = _app(saver, runs)
        threads = _Threads(app, saver)
        sides = threads.make(mine, theirs)
        diff = diff_threads(saver.store, sides["t@P1"], sides[side])
        # before: a divergence (the moved-past rule; the pending writes or sub differ)
        assert not diff.same and diff.undecidable, diff.summary
        for value, alike in (("none", none_alike), ("map", map_alike)):
            got = [
                threads.resumed(runs, value, threads.make(mine, theirs)[s]) for s in ("t@P1", side)
            ]
            assert (got[0] == got[1]) is alike, (value, got)
