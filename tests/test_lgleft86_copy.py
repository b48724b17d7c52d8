"""lgleft86: a checkpoint copied with ``update_state(config, None, as_node="__copy__")``
against its original.

LangGraph stores the copy beside the original (same parent) at the original's step plus
one, with the same values and versions, ``updated_channels`` None and no pending writes.
``diff_threads`` aligned the chains by step and said "same values for 2 checkpoints;
only B goes on (step 2)", while resuming the original and the copy (on one thread, or
the original's thread against a copy's) ran the same node to the same state (a false
divergence). Chains whose steps differ only at the last are now compared position by
position, the last checkpoints with each other (review86: equal there, undecidable, not
the same: a resume of each runs at another step, which a node may read). An original
holding a finished task's pending writes stays a divergence: the copy has none, and its
resume ran the task again (before, "only B goes on", not the pending writes). Both
engines."""

from __future__ import annotations

from typing import Any

from langgraph.types import Command
from lg_threads import LogState, a_then_n, cfg, fast_beside_asks
from pg_cluster import backend_url  # noqa: F401 - fixture

from cpstore.langgraph import CpstoreSaver, diff_threads


def _graph(saver: CpstoreSaver, runs: list[str]) -> Any:
    """``a`` then ``n``, stopped before ``n``; ``runs`` counts the nodes that ran."""

    def a(_: LogState) -> dict[str, Any]:
        runs.append("a")
        return {"log": ["a"]}

    def n(_: LogState) -> dict[str, Any]:
        runs.append("n")
        return {"log": ["n"]}

    return a_then_n(saver, a, n)


def _copy(app: Any, saver: CpstoreSaver, thread: str) -> tuple[str, str]:
    """The ids of ``thread``'s newest checkpoint and of its ``__copy__``."""
    orig = saver.get_tuple(cfg(thread))
    assert orig is not None
    made = app.update_state(orig.config, None, as_node="__copy__")
    return orig.config["configurable"]["checkpoint_id"], made["configurable"]["checkpoint_id"]


def test_a_copy_against_its_original_is_not_a_divergence(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        runs: list[str] = []
        app = _graph(saver, runs)
        for t in ("o", "s1", "s2", "c"):
            app.invoke({"log": ["in"]}, cfg(t))
        ids = {t: _copy(app, saver, t) for t in ("s1", "s2", "c")}
        orig, copy = ids["s1"]
        diff = diff_threads(saver.store, cfg("s1", orig), cfg("s1", copy))
        # before: "same values for 2 checkpoints; only B goes on (step 2) (compared at
        # the steps both recorded: steps 1 recorded on A only)"
        # review86: undecidable, not the same (a node reading its step resumes otherwise:
        # tests/test_review86_other_steps.py)
        assert not diff.same and diff.undecidable, diff.summary
        assert diff.summary.endswith("(the last checkpoints are step 1 on A and 2 on B)")
        across = diff_threads(saver.store, cfg("o"), cfg("c"))  # the thread against a copy
        assert not across.same and across.undecidable, across.summary
        got = []
        for conf in (cfg("s1", orig), cfg("s2", ids["s2"][1]), cfg("o"), cfg("c")):
            runs.clear()
            got.append((app.invoke(None, conf)["log"], list(runs)))
        assert got == [(["in", "a", "n"], ["n"])] * 4  # each resume ran n alone, alike


def test_a_copy_of_a_checkpoint_holding_finished_writes_is_a_divergence(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        runs: list[str] = []
        app = fast_beside_asks(saver, runs)
        for t in ("o", "c"):
            app.invoke({"log": ["in"]}, cfg(t))
        _copy(app, saver, "c")
        diff = diff_threads(saver.store, cfg("o"), cfg("c"))
        assert not diff.same and not diff.undecidable and diff.pending, diff.summary
        assert diff.channels == ("__interrupt__", "log"), diff.summary
        got = []
        for t in ("o", "c"):
            runs.clear()
            got.append((app.invoke(Command(resume="y"), cfg(t))["log"], list(runs)))
        # the original hands fast's write back; the copy holds none and runs fast again
        assert got == [(["in", "asked y", "fast"], []), (["in", "asked y", "fast"], ["fast"])]
