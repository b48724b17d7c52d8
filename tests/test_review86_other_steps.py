"""review86: two chains equal to their last checkpoints but for those checkpoints' steps.

lgleft86 compared chains whose steps differ only at the last position by position and
said "same values at all 3 checkpoints" when the last checkpoints matched: for a
``__copy__`` (stored at its original's step plus one) against its original, and for
any other pair, such as a thread that ran one more step than the other and did not
record it (``durability="exit"``). A resume runs its first tasks at the step after its
checkpoint's and hands each node that step (``config["metadata"]["langgraph_step"]``):
a node logging it wrote ``n@2`` resumed from the original and ``n@3`` from the copy,
``n@3`` and ``n@4`` on the two threads, while the diff said the same. Whether a node
reads its step is the graph's, not the checkpoint's: undecidable (exit 11), as for a
reducer's starting value against none (lgleft86); a step-blind graph's resumes run
alike (``tests/test_lgleft86_copy.py``). Both engines."""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from lg_threads import LogState, a_then_n, cfg, lg_diff
from pg_cluster import backend_url  # noqa: F401 - fixture

from cpstore.langgraph import CpstoreSaver, diff_threads


def _n(_: LogState, config: RunnableConfig) -> dict[str, Any]:
    """Logs the step it runs at."""
    return {"log": [f"n@{config['metadata']['langgraph_step']}"]}


def _copied(saver: CpstoreSaver) -> Any:
    """``a`` then ``n``, stopped before ``n``, run on ``o`` and ``c``, and ``c``'s newest
    copied (``__copy__``)."""
    app = a_then_n(saver, lambda _: {"log": ["a"]}, _n)
    for t in ("o", "c"):
        app.invoke({"log": ["in"]}, cfg(t))
    tup = saver.get_tuple(cfg("c"))
    assert tup is not None
    app.update_state(tup.config, None, as_node="__copy__")
    return app


def test_a_copy_against_its_original_is_undecidable(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        app = _copied(saver)
        diff = diff_threads(saver.store, cfg("o"), cfg("c"))
        # before: "same values at all 3 checkpoints (the last checkpoints are step 1 on
        # A and 2 on B)"
        assert not diff.same and diff.undecidable, diff.summary
        assert "not at the same step" in diff.summary, diff.summary
        got = [app.invoke(None, cfg(t))["log"] for t in ("o", "c")]
        assert got == [["in", "a", "n@2"], ["in", "a", "n@3"]]


def test_a_step_recorded_on_one_side_only_is_undecidable(url: str) -> None:
    """``a`` writes nothing until its ``k``-th call (2 on ``A``, 3 on ``B``), which asks
    to go on; ``B`` ran with ``durability="exit"``, its steps 1 and 2 recorded as one."""
    calls: dict[str, int] = {}

    def a(_: LogState, config: RunnableConfig) -> dict[str, Any]:
        t = config["configurable"]["thread_id"]
        calls[t] = calls.get(t, 0) + 1
        if calls[t] >= (2 if t == "A" else 3):
            return {"log": [str(interrupt("go on?"))]}
        return {}

    with CpstoreSaver.from_conn_string(url) as saver:
        g = StateGraph(LogState)
        g.add_node("a", a)
        g.add_node("n", _n)
        g.add_edge(START, "a")
        g.add_conditional_edges("a", lambda s: "n" if s["log"][-1] == "y" else "a", ["a", "n"])
        g.add_edge("n", END)
        app = g.compile(checkpointer=saver)
        for t in ("A", "B"):
            app.invoke({"log": ["in"]}, cfg(t), interrupt_before=["a"])
        app.invoke(None, cfg("A"))
        app.invoke(None, cfg("B"), durability="exit")
        steps = [[x.metadata["step"] for x in saver.list(cfg(t))] for t in ("A", "B")]
        assert steps == [[1, 0, -1], [2, 0, -1]]
        diff = diff_threads(saver.store, cfg("A"), cfg("B"))
        # before: "same values at all 3 checkpoints (the last checkpoints are step 1 on
        # A and 2 on B)"
        assert not diff.same and diff.undecidable, diff.summary
        got = [app.invoke(Command(resume="y"), cfg(t))["log"] for t in ("A", "B")]
        assert got == [["in", "y", "n@3"], ["in", "y", "n@4"]]


def test_lg_diff_exits_11_on_a_copy_against_its_original(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        _copied(saver)
    out = lg_diff(url, "o", "c")
    assert out.returncode == 11, (out.returncode, out.stdout, out.stderr)  # before: 0
