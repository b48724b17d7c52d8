"""lgdiff89: the interrupts of one ``__interrupt__`` write are compared as a multiset.

A subgraph whose parallel nodes each call ``interrupt()`` stops with both pending; its
task in the parent writes one ``__interrupt__`` write listing them in the order its
tasks raised (thread timing, which varies between runs). ``diff_threads`` compared the
list in order: two threads interrupted alike were "same values at all 2 checkpoints" on
one run and "the pending writes at the last (step 0) differ: node sub wrote different
__interrupt__" on the next (a verdict must not turn on timing), while resuming either
with the same answers ran alike. A resume reads the interrupts by id (a resume map),
never by their place in the list. Now each write's interrupts are sorted (ids blanked)
before they are compared. Both engines."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.graph import START, StateGraph
from langgraph.types import Command, interrupt
from lg_threads import cfg, newest_id
from pg_cluster import backend_url  # noqa: F401 - fixture

from cpstore.langgraph import CpstoreSaver, diff_threads
from cpstore.langgraph._read import stored_writes


class _State(TypedDict):
    log: Annotated[list[str], operator.add]


def _asker(name: str) -> Any:
    def run(_: _State) -> dict[str, Any]:
        return {"log": [f"{name}:{interrupt(name + '?')}"]}

    return run


def _app(saver: CpstoreSaver, *, kept: bool = False) -> Any:
    """A subgraph ``sub`` whose parallel ``a`` and ``b`` each ask."""
    s = StateGraph(_State)
    s.add_node("a", _asker("a"))
    s.add_node("b", _asker("b"))
    s.add_edge(START, "a")
    s.add_edge(START, "b")
    g = StateGraph(_State)
    g.add_node("sub", s.compile(checkpointer=True if kept else None))
    g.add_edge(START, "sub")
    return g.compile(checkpointer=saver)


def _answered(app: Any, thread: str) -> list[str]:
    """``thread`` resumed with every pending interrupt answered by its value: the log."""
    pending = app.get_state(cfg(thread), subgraphs=True).interrupts
    assert len(pending) == 2, pending
    out = app.invoke(Command(resume={i.id: f"{i.value}!" for i in pending}), cfg(thread))
    return list(out["log"])


def _reversed_interrupts(saver: CpstoreSaver, thread: str) -> None:
    """The parent's ``__interrupt__`` write at ``thread``'s newest checkpoint put again
    with its interrupts in the other order (LangGraph replaces such a write)."""
    last = cfg(thread, newest_id(saver, thread))
    meta = saver.store.backend.db("meta")
    with saver.store.backend.read_txn() as txn:
        held = stored_writes(txn, meta, thread, "", last["configurable"]["checkpoint_id"])
    (w,) = [w for w in held if w.channel == "__interrupt__"]
    value = saver.serde.loads_typed((w.typed[0], bytes(w.typed[1])))
    assert len(value) == 2, value
    saver.put_writes(last, [("__interrupt__", value[::-1])], w.task_id, task_path=w.task_path)


@pytest.mark.parametrize("kept", [False, True])
def test_interrupts_listed_in_another_order_are_the_same(url: str, kept: bool) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        app = _app(saver, kept=kept)
        app.invoke({"log": ["in"]}, cfg("t"))
        saver.copy_thread("t", "u")
        _reversed_interrupts(saver, "u")
        diff = diff_threads(saver.store, cfg("t"), cfg("u"))
        # before: "... the pending writes at the last (step 0) differ: node sub wrote
        # different __interrupt__"
        assert diff.same, diff.summary
        assert _answered(app, "t") == _answered(app, "u")


def test_subgraph_interrupts_raised_in_any_order_are_the_same(url: str) -> None:
    """Real runs: whatever order each thread's tasks raised in, the verdict is the same,
    as the resumes are; an answer given on one side only is still a divergence."""
    with CpstoreSaver.from_conn_string(url) as saver:
        app = _app(saver)
        threads = [f"t{i}" for i in range(6)]
        for t in threads:
            app.invoke({"log": ["in"]}, cfg(t))
        for t in threads[1:]:
            diff = diff_threads(saver.store, cfg(threads[0]), cfg(t))
            assert diff.same, diff.summary
        pending = app.get_state(cfg("t5"), subgraphs=True).interrupts
        (first,) = [i for i in pending if i.value == "a?"]
        app.invoke(Command(resume={first.id: "x"}), cfg("t5"))
        diff = diff_threads(saver.store, cfg("t4"), cfg("t5"))
        assert not diff.same and not diff.undecidable, diff.summary
        logs = [sorted(_answered(app, t)) for t in threads[:4]]
        assert all(log == logs[0] for log in logs), logs


def _beside_c(saver: CpstoreSaver) -> Any:
    """:func:`_app`'s ``sub`` beside a node ``c`` that asks too (three interrupts)."""
    s = StateGraph(_State)
    s.add_node("a", _asker("a"))
    s.add_node("b", _asker("b"))
    s.add_edge(START, "a")
    s.add_edge(START, "b")
    g = StateGraph(_State)
    g.add_node("sub", s.compile())
    g.add_node("c", _asker("c"))
    g.add_edge(START, "sub")
    g.add_edge(START, "c")
    return g.compile(checkpointer=saver)


def _answer(app: Any, thread: str, *answers: tuple[str, str]) -> None:
    """``thread`` resumed once per answer, each naming one pending interrupt by value."""
    for value, given in answers:
        pending = app.get_state(cfg(thread), subgraphs=True).interrupts
        (ask,) = [i for i in pending if i.value == value]
        app.invoke(Command(resume={ask.id: given}), cfg(thread))


def test_a_finished_task_s_last_interrupt_is_not_compared(url: str) -> None:
    """``sub``'s ``a`` and ``b`` answered one at a time, in either order, and ``c`` not:
    ``sub`` finished on both threads, its ``__interrupt__`` write holding the last
    question it asked (``b?`` on one, ``a?`` on the other). LangGraph reads a finished
    task's interrupts as answered (``read_task_statuses``: a task with an output write
    has no pending interrupt) and hands its output back: the resumes ran alike while
    the diff said "node c, sub wrote different __interrupt__"."""
    with CpstoreSaver.from_conn_string(url) as saver:
        app = _beside_c(saver)
        for t in ("t1", "t2", "u1", "u2", "z"):
            app.invoke({"log": ["in"]}, cfg(t))
        for t in ("t1", "t2"):
            _answer(app, t, ("a?", "x"), ("b?", "x"))
        for t in ("u1", "u2"):
            _answer(app, t, ("b?", "x"), ("a?", "x"))
        _answer(app, "z", ("b?", "z"), ("a?", "x"))
        diff = diff_threads(saver.store, cfg("t1"), cfg("u1"))
        # before: "... the pending writes at the last (step 0) differ: node c, sub wrote
        # different __interrupt__"
        assert diff.same, diff.summary
        other = diff_threads(saver.store, cfg("t1"), cfg("z"))
        assert not other.same and not other.undecidable and "log" in other.channels, other
        got = [app.invoke(None, cfg(t))["log"] for t in ("t1", "u1")]
        assert got[0] == got[1] and "c:x" not in got[0], got
        got = [_answered_one(app, t) for t in ("t2", "u2", "z")]
        assert got[0] == got[1] != got[2], got


def _answered_one(app: Any, thread: str) -> list[str]:
    """``thread`` resumed with its one pending interrupt answered by ``"y"``: the log."""
    return list(app.invoke(Command(resume="y"), cfg(thread))["log"])
