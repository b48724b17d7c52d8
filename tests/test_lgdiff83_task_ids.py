"""lgdiff83: the task ids of the last checkpoints' pending writes.

A resume hands a pending write back to its task by the write's task id, which
LangGraph derives from the checkpoint id: a write under another id is not applied and
its task runs again (a tool call repeated). ``diff_threads`` compares writes without
their ids; two threads of equal writes, one put (through the saver, as LangGraph puts
them) with the finished task's writes under another id, were "same values at all 2
checkpoints" while only that thread's resume ran ``fast`` again. The same for writes
copied verbatim under checkpoints put with new ids. Now undecidable; a thread and its
``copy_thread`` copy (ids kept) and two threads run alike stay the same. Both engines."""

from __future__ import annotations

import uuid

from lg_threads import cfg, fast_beside_asks, put_copy, resumed
from pg_cluster import backend_url  # noqa: F401 - fixture

from cpstore.langgraph import CpstoreSaver, diff_threads


def _put_copy(saver: CpstoreSaver, src: str, dst: str, *, new_ids: bool, fast_id: str) -> None:
    """``src``'s chain put as ``dst``, the checkpoints under new ids when ``new_ids``;
    ``fast``'s writes under ``fast_id`` ("" keeps its id)."""
    put_copy(
        saver,
        src,
        dst,
        new_ids=new_ids,
        task_id=lambda tid, path: fast_id if fast_id and path.endswith("fast") else tid,
    )


def test_a_finished_task_s_writes_under_another_id_are_not_the_same(url: str) -> None:
    runs: list[str] = []
    with CpstoreSaver.from_conn_string(url) as saver:
        app = fast_beside_asks(saver, runs)
        app.invoke({"log": ["in"]}, cfg("a"))
        _put_copy(saver, "a", "b", new_ids=False, fast_id=str(uuid.uuid4()))
        diff = diff_threads(saver.store, cfg("a"), cfg("b"))
        # before: "same values at all 2 checkpoints"
        assert not diff.same and diff.undecidable and diff.pending, diff.summary
        assert diff.nodes == ("fast",) and diff.channels == ("log",), diff.summary
        assert "task ids" in diff.summary, diff.summary
        got = [resumed(app, runs, t) for t in "ab"]
        assert got[0][0] == got[1][0] and got[0][1] == [] and got[1][1] == ["fast"]


def test_writes_copied_under_new_checkpoint_ids_are_not_the_same(url: str) -> None:
    runs: list[str] = []
    with CpstoreSaver.from_conn_string(url) as saver:
        app = fast_beside_asks(saver, runs)
        app.invoke({"log": ["in"]}, cfg("a"))
        _put_copy(saver, "a", "b", new_ids=True, fast_id="")
        diff = diff_threads(saver.store, cfg("a"), cfg("b"))
        # before: "same values at all 2 checkpoints"
        assert not diff.same and diff.undecidable, diff.summary
        assert "fast" in diff.nodes and "are the same on both sides" in diff.summary
        got = [resumed(app, runs, t) for t in "ab"]
        assert got[0][1] == [] and got[1][1] == ["fast"]


def test_a_copy_and_threads_run_alike_are_the_same(url: str) -> None:
    runs: list[str] = []
    with CpstoreSaver.from_conn_string(url) as saver:
        app = fast_beside_asks(saver, runs)
        for t in "ac":
            app.invoke({"log": ["in"]}, cfg(t))
        saver.copy_thread("a", "b")
        _put_copy(saver, "a", "d", new_ids=False, fast_id="")  # ids kept: as copy_thread
        for other in "bcd":
            diff = diff_threads(saver.store, cfg("a"), cfg(other))
            assert diff.same, (other, diff.summary)
        assert {resumed(app, runs, t)[1] == [] for t in "abcd"} == {True}
