"""lgleft86 (found while proving the ``__copy__`` case): a last checkpoint its thread
has moved past, against one that is its thread's newest.

LangGraph 1.2.24 hands a finished task's pending writes back to it only on a resume of
the thread's newest checkpoint: a resume addressed at a checkpoint the thread moved
past (here by a ``__copy__``, which stores a newer one) replays it, and the finished
task runs again. Two threads whose ``fast`` finished beside the interrupted ``asks``,
one copied after, were "same values at all 2 checkpoints" while the copied one's
original ran ``fast`` again on its resume (a false "same": a tool call repeated on
one side). Now a divergence naming ``fast``; undecidable when the newest side's config
names its id (invoked with None, a time travel replays it too; with
``Command(resume=...)`` it hands the writes back). Two sides both moved past stay the
same (both replay). Both engines."""

from __future__ import annotations

from typing import Any

from langgraph.types import Command
from lg_threads import cfg, fast_beside_asks
from pg_cluster import backend_url  # noqa: F401 - fixture

from cpstore.langgraph import CpstoreSaver, diff_threads


def _threads(saver: CpstoreSaver, runs: list[str]) -> tuple[Any, dict[str, str]]:
    """Threads ``a1``, ``a2`` (left at their newest), ``b`` and ``c`` (each copied with
    ``__copy__``, so their interrupted checkpoint is no longer the newest): each one's
    interrupted checkpoint id."""
    app = fast_beside_asks(saver, runs)
    ids: dict[str, str] = {}
    for t in ("a1", "a2", "b", "c"):
        app.invoke({"log": ["in"]}, cfg(t))
        tup = saver.get_tuple(cfg(t))
        assert tup is not None and {w[1] for w in tup.pending_writes} == {"log", "__interrupt__"}
        ids[t] = tup.config["configurable"]["checkpoint_id"]
        if t in "bc":
            app.update_state(tup.config, None, as_node="__copy__")
    return app, ids


def _resume(app: Any, runs: list[str], conf: Any, value: Any) -> tuple[Any, list[str]]:
    runs.clear()
    return app.invoke(value, conf)["log"], list(runs)


def test_a_checkpoint_its_thread_moved_past_against_the_newest_is_a_divergence(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        runs: list[str] = []
        app, ids = _threads(saver, runs)
        diff = diff_threads(saver.store, cfg("a1"), cfg("b", ids["b"]))
        # before: "same values at all 2 checkpoints"
        assert not diff.same and not diff.undecidable and diff.pending, diff.summary
        assert diff.nodes == ("fast",) and diff.channels == ("log",), diff.summary
        assert "B's last (step 0) is not the newest of its thread" in diff.summary
        got = [
            _resume(app, runs, cfg("a1"), Command(resume="y")),
            _resume(app, runs, cfg("b", ids["b"]), Command(resume="y")),
        ]
        want = ["in", "asked y", "fast"]
        assert got == [(want, []), (want, ["fast"])]  # fast ran again on b only


def test_a_newest_side_named_by_its_id_is_undecidable(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        runs: list[str] = []
        app, ids = _threads(saver, runs)
        diff = diff_threads(saver.store, cfg("a1", ids["a1"]), cfg("b", ids["b"]))
        assert not diff.same and diff.undecidable and diff.nodes == ("fast",), diff.summary
        # the same config resumed two ways: Command(resume=...) hands fast's write back,
        # None replays (a time travel) and runs fast again, as b's resume does
        assert _resume(app, runs, cfg("a1", ids["a1"]), Command(resume="y"))[1] == []
        assert _resume(app, runs, cfg("a2", ids["a2"]), None)[1] == ["fast"]
        assert _resume(app, runs, cfg("b", ids["b"]), Command(resume="y"))[1] == ["fast"]


def test_two_checkpoints_both_moved_past_stay_the_same(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        runs: list[str] = []
        app, ids = _threads(saver, runs)
        diff = diff_threads(saver.store, cfg("b", ids["b"]), cfg("c", ids["c"]))
        assert diff.same, diff.summary
        # both newest, both named (review86: one named, one not, is undecidable)
        assert diff_threads(saver.store, cfg("a1", ids["a1"]), cfg("a2", ids["a2"])).same
        got = [_resume(app, runs, cfg(t, ids[t]), Command(resume="y")) for t in "bc"]
        assert got == [(["in", "asked y", "fast"], ["fast"])] * 2
