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
from typing import Any

from langgraph.checkpoint.base import copy_checkpoint
from langgraph.types import Command
from lg_threads import NULL_TASK_ID, cfg, fast_beside_asks
from pg_cluster import backend_url  # noqa: F401 - fixture

from cpstore.langgraph import CpstoreSaver, diff_threads
from cpstore.langgraph._read import stored_writes


def _reid(saver: CpstoreSaver, src: str, dst: str) -> None:
    """``src``'s chain put as ``dst`` under new checkpoint ids, each pending write under
    an id of its own (the null task's kept), through ``put``/``put_writes``."""
    meta = saver.store.backend.db("meta")
    parent: str | None = None
    ids: dict[str, str] = {NULL_TASK_ID: NULL_TASK_ID}
    for tup in list(saver.list(cfg(src)))[::-1]:
        cp = copy_checkpoint(tup.checkpoint)
        cp["id"] = str(uuid.uuid1())
        out = saver.put(cfg(dst, parent), cp, tup.metadata, dict(cp["channel_versions"]))
        parent = out["configurable"]["checkpoint_id"]
        with saver.store.backend.read_txn() as txn:
            writes = stored_writes(txn, meta, src, "", tup.config["configurable"]["checkpoint_id"])
        for w in writes:
            value = saver.serde.loads_typed((w.typed[0], bytes(w.typed[1])))
            tid = ids.setdefault(w.task_id, str(uuid.uuid4()))
            saver.put_writes(out, [(w.channel, value)], tid, task_path=w.task_path)


def _resumed(app: Any, runs: list[str], thread: str) -> tuple[list[str], list[str]]:
    runs.clear()
    out = app.invoke(Command(resume="ok"), cfg(thread))["log"]
    return sorted(out), list(runs)


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
            got = [_resumed(app, runs, t) for t in (a, b)]
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
    meta = saver.store.backend.db("meta")
    parent: str | None = None
    for tup in list(saver.list(cfg(src)))[::-1]:
        cp = copy_checkpoint(tup.checkpoint)
        out = saver.put(cfg(dst, parent), cp, tup.metadata, dict(cp["channel_versions"]))
        parent = out["configurable"]["checkpoint_id"]
        with saver.store.backend.read_txn() as txn:
            writes = stored_writes(txn, meta, src, "", tup.config["configurable"]["checkpoint_id"])
        for w in writes:
            value = saver.serde.loads_typed((w.typed[0], bytes(w.typed[1])))
            tid = NULL_TASK_ID if w.task_path.endswith("fast") else w.task_id
            saver.put_writes(out, [(w.channel, value)], tid, task_path=w.task_path)


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
        got = [_resumed(app, runs, t) for t in "ab"]
        assert got == [
            (["asked ok", "fast", "in"], []),
            (["asked ok", "fast", "fast", "in"], ["fast"]),
        ]
