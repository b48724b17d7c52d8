"""lgdiff89: an interrupt pending on one side only, the other a ``__copy__``.

``update_state(config, None, as_node="__copy__")`` of an interrupted checkpoint stores a
copy holding no pending write: no ``__interrupt__`` write for the task that asked. A
resume of the copy runs the task again and it asks again, as a resume of the original
does (an interrupted task always runs again; the stored question is read by no resume):
invoked with None or with ``Command(resume=...)`` both ran alike, while ``diff_threads``
said "the pending writes at the last (step 1) differ: node asks wrote different
__interrupt__". Not the same either: LangGraph counts the pending interrupts, and with
two pending ``Command(resume=value)`` raises on the original while on the copy the first
task to ask takes the value. Now undecidable. Both engines."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.graph import START, StateGraph
from langgraph.types import Command, interrupt
from lg_threads import LogState, cfg, newest_id
from pg_cluster import backend_url  # noqa: F401 - fixture

from cpstore.langgraph import CpstoreSaver, diff_threads


def _app(saver: CpstoreSaver, runs: list[str], *, two: bool = False) -> Any:
    """``pre`` then ``asks`` (``two``: ``a`` and ``b`` side by side, both asking)."""

    def node(name: str) -> Any:
        def run(_: LogState) -> dict[str, Any]:
            runs.append(name)
            if name == "pre":
                return {"log": [name]}
            return {"log": [f"{name}:{interrupt(name + '?')}"]}

        return run

    g = StateGraph(LogState)
    if two:
        for name in ("a", "b"):
            g.add_node(name, node(name))
            g.add_edge(START, name)
    else:
        g.add_node("pre", node("pre"))
        g.add_node("asks", node("asks"))
        g.add_edge(START, "pre")
        g.add_edge("pre", "asks")
    return g.compile(checkpointer=saver)


def _sides(app: Any, saver: CpstoreSaver, k: int) -> dict[str, Any]:
    """Fresh threads: ``t`` interrupted at ``P1`` and copied (``__copy__``, its newest
    then), and ``n`` interrupted alike; the configs of each side compared."""
    t, n = f"t{k}", f"n{k}"
    for thread in (t, n):
        app.invoke({"log": ["in"]}, cfg(thread))
    p1 = newest_id(saver, t)
    app.update_state(cfg(t, p1), None, as_node="__copy__")
    return {"original": cfg(t, p1), "copy": cfg(t), "other": cfg(n)}


def _resumed(app: Any, runs: list[str], value: Any, conf: Any) -> tuple[Any, ...]:
    runs.clear()
    try:
        out = app.invoke(value, conf)
    except RuntimeError as exc:  # two interrupts pending, one value
        return ("raised", str(exc)[:40])
    return sorted(out["log"]), [str(i.value) for i in out.get("__interrupt__", ())], sorted(runs)


@pytest.mark.parametrize("pair", [("original", "copy"), ("copy", "other")])
def test_an_interrupt_a_copy_does_not_hold_is_undecidable(url: str, pair: tuple[str, str]) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        runs: list[str] = []
        app = _app(saver, runs)
        sides = _sides(app, saver, 0)
        diff = diff_threads(saver.store, sides[pair[0]], sides[pair[1]])
        # before: "... the pending writes at the last (step 1) differ: node asks wrote
        # different __interrupt__"
        assert not diff.same and diff.undecidable, diff.summary
        assert "asks" in diff.nodes, diff.summary
        for k, value in enumerate((None, Command(resume="ok")), start=1):
            got = [
                _resumed(app, runs, value, _sides(app, saver, 10 * k + i)[s])
                for i, s in enumerate(pair)
            ]
            assert got[0] == got[1], (value, got)


def test_two_interrupts_a_copy_does_not_hold_are_not_the_same(url: str) -> None:
    """One value for two pending interrupts raises on the original thread and answers
    the first task to ask on the copy: the undecidable answer is the right one."""
    with CpstoreSaver.from_conn_string(url) as saver:
        runs: list[str] = []
        app = _app(saver, runs, two=True)
        sides = _sides(app, saver, 0)
        diff = diff_threads(saver.store, sides["copy"], sides["other"])
        assert not diff.same and diff.undecidable, diff.summary  # before: a divergence
        assert set(diff.nodes) == {"a", "b"}, diff.nodes
        got = [_resumed(app, runs, Command(resume="ok"), sides[s]) for s in ("copy", "other")]
        assert got[1][0] == "raised" and got[0][0] != "raised", got
        again = _sides(app, saver, 1)
        assert _resumed(app, runs, None, again["copy"]) == _resumed(app, runs, None, again["other"])
