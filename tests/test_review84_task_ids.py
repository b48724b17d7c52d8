"""review84: task ids of the last checkpoints' pending writes that LangGraph does not derive.

lgdiff83 checked the ids of a task's writes against each other only: equal checkpoint
ids must give equal ids, other checkpoint ids other ids. A thread whose chain was put
under new checkpoint ids, each pending write under an id of its own (what a copy or an
import that re-ids a thread does), passed both: ``diff_threads`` said "same values at
all 2 checkpoints" while only that thread's resume ran the finished task ``fast`` again
(its write was not handed back: a repeated tool call). The ids are now derived as
LangGraph derives them from each checkpoint (its id, step, the node and its triggers);
a task whose ids derive on one side only is undecidable. Two threads run alike, and a
thread against its ``copy_thread`` copy, stay the same. Both engines."""

from __future__ import annotations

import uuid

from lg_threads import NULL_TASK_ID, cfg, fast_beside_asks, put_copy, resumed
from pg_cluster import backend_url  # noqa: F401 - fixture

from cpstore.langgraph import CpstoreSaver, diff_threads


def _reid(saver: CpstoreSaver, src: str, dst: str) -> None:
    """``src``'s chain put as ``dst`` under new checkpoint ids, each pending write under
    an id of its own (the null task's kept)."""
    ids: dict[str, str] = {NULL_TASK_ID: NULL_TASK_ID}
    put_copy(
        saver,
        src,
        dst,
        new_ids=True,
        task_id=lambda tid, path: ids.setdefault(tid, str(uuid.uuid4())),
    )


def test_writes_under_ids_of_their_own_beside_new_checkpoint_ids_are_not_the_same(
    url: str,
) -> None:
    for sends in (False, True):
        runs: list[str] = []
        with CpstoreSaver.from_conn_string(url) as saver:
            a, b = f"a{sends}", f"b{sends}"
            app = fast_beside_asks(saver, runs, sends=sends)
            app.invoke({"log": ["in"]}, cfg(a))
            _reid(saver, a, b)
            diff = diff_threads(saver.store, cfg(a), cfg(b))
            # before: "same values at all 2 checkpoints"
            assert not diff.same and diff.undecidable and diff.pending, diff.summary
            assert "asks" in diff.nodes and "log" in diff.channels, diff.summary
            assert any("fast" in n or "push" in n for n in diff.nodes), diff.summary
            assert "derive from their checkpoint on one side only" in diff.summary
            got = [resumed(app, runs, t) for t in (a, b)]
            assert got[0][0] == got[1][0] and got[0][1] == [] and got[1][1] == ["fast"]


def test_threads_run_alike_and_a_copy_stay_the_same(url: str) -> None:
    for sends in (False, True):
        runs: list[str] = []
        with CpstoreSaver.from_conn_string(url) as saver:
            app = fast_beside_asks(saver, runs, sends=sends)
            for t in "ac":
                app.invoke({"log": ["in"]}, cfg(f"{t}{sends}"))
            saver.copy_thread(f"a{sends}", f"b{sends}")
            for other in "bc":
                diff = diff_threads(saver.store, cfg(f"a{sends}"), cfg(f"{other}{sends}"))
                assert diff.same, (sends, other, diff.summary)


def _null_copy(saver: CpstoreSaver, src: str, dst: str) -> None:
    """``src``'s chain put as ``dst`` (ids kept, as ``copy_thread``), ``fast``'s writes
    under the null task's id (their task path kept)."""
    put_copy(
        saver, src, dst, task_id=lambda tid, path: NULL_TASK_ID if path.endswith("fast") else tid
    )


def test_a_task_s_writes_under_the_null_task_s_id_on_one_side_diverge(url: str) -> None:
    """A resume applies null-task writes first and hands none back: ``fast`` ran again
    and ``log`` held its line twice, while the diff said "same values at all 2
    checkpoints" (the ids of null-task writes were left out of every check)."""
    runs: list[str] = []
    with CpstoreSaver.from_conn_string(url) as saver:
        app = fast_beside_asks(saver, runs)
        app.invoke({"log": ["in"]}, cfg("a"))
        _null_copy(saver, "a", "b")
        diff = diff_threads(saver.store, cfg("a"), cfg("b"))
        assert not diff.same and not diff.undecidable and diff.pending, diff.summary
        assert diff.nodes == ("fast",) and diff.channels == ("log",), diff.summary
        assert "null task's id on one side only" in diff.summary, diff.summary
        got = [resumed(app, runs, t) for t in "ab"]
        assert got == [
            (["asked ok", "fast", "in"], []),
            (["asked ok", "fast", "fast", "in"], ["fast"]),
        ]
