"""Pending writes no index entry names: what keeps them and what removes them.

A ``put_writes`` of a run still in flight (another process) that lands after
``delete_thread(T)`` stores writes no entry names (lgreview70's leftover). They are
kept, not dropped by any maintenance but a delete of the thread: under LangGraph's
``"async"`` durability a task's ``put_writes`` for checkpoint ``X`` may commit before
the ``put`` of ``X`` itself (both go to a background executor, unordered), so a write
without its entry may be one whose checkpoint is still coming, in a live thread and in
a thread deleted while that put was in flight alike. Dropping it (in a prune, a
verify, a gc) would lose the task's write once the put lands, and LangGraph would run
the task again. ``delete_thread(T)`` (or ``prune([T], strategy="delete")``) called
again removes every write of ``T``, as the caller's own "drop everything of ``T`` now";
InMemorySaver keeps and removes them alike (its ``put_writes`` never checks the
checkpoint, its ``delete_thread`` drops every write of the thread).
"""

from __future__ import annotations

import multiprocessing
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures

from cpstore.langgraph import CpstoreSaver
from cpstore.store.lg_index import WRITE_PREFIX, field, scan

WRITES = [("items", "from the in-flight run"), ("note", "late")]


def _late_writes(url: str, config: dict[str, Any]) -> None:
    """The other process: the in-flight run's task writes."""
    with CpstoreSaver.from_conn_string(url) as saver:
        saver.put_writes(config, WRITES, "task-1", "~__pregel_pull, node")


def _writes_in_flight(url: str, config: dict[str, Any]) -> None:
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        pool.apply(_late_writes, (url, config))


def _stored_writes(saver: CpstoreSaver, thread: str) -> int:
    """Every pending-write record of ``thread`` in the index, named or not."""
    backend = saver.store.backend
    with backend.read_txn() as txn:
        prefix = WRITE_PREFIX + field(thread, "thread_id")
        return sum(1 for _ in scan(txn, backend.db("meta"), prefix))


def _checkpoint(n: int) -> dict[str, Any]:
    cp: dict[str, Any] = dict(empty_checkpoint())
    cp["channel_values"] = {"items": [n]}
    cp["channel_versions"] = {"items": str(n)}
    return cp


def _cfg(thread: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    conf = {"thread_id": thread, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def test_writes_after_a_delete_stay_unlisted_until_the_thread_is_deleted_again(
    url: str,
) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        cp = _checkpoint(1)
        at = saver.put(_cfg("T"), cp, {"source": "input", "step": -1}, {"items": "1"})
        saver.delete_thread("T")
        _writes_in_flight(url, at)
        assert _stored_writes(saver, "T") == len(WRITES)  # stored, no entry names them
        assert saver.get_tuple(_cfg("T")) is None
        assert list(saver.list(_cfg("T"))) == []
        saver.prune(["T"])  # keep_latest: nothing of T is listed, nothing is dropped
        assert _stored_writes(saver, "T") == len(WRITES)
        report = saver.store.verify()  # a write without its entry is not damage
        assert report.ok, report.problems
        saver.delete_thread("T")
        assert _stored_writes(saver, "T") == 0
        # prune(strategy="delete") is the same delete
        saver.put(_cfg("T"), cp, {"source": "input", "step": -1}, {"items": "1"})
        saver.delete_thread("T")
        _writes_in_flight(url, at)
        saver.prune(["T"], strategy="delete")
        assert _stored_writes(saver, "T") == 0
        assert saver.store.verify().ok


def test_writes_landing_before_their_put_survive_a_delete_race_and_a_prune(url: str) -> None:
    """Why no maintenance but a delete drops them: under ``"async"`` durability the put
    of the checkpoint may land after its writes. Here it lands after a delete of the
    thread and a prune; the checkpoint then holds its task's writes, as in
    InMemorySaver (same calls)."""
    memory = InMemorySaver()
    with CpstoreSaver.from_conn_string(url) as saver:
        results = []
        for s in (saver, memory):
            first = s.put(_cfg("T"), _checkpoint(1), {"source": "input", "step": -1}, {})
            cp = _checkpoint(2)
            at = {"configurable": {**first["configurable"], "checkpoint_id": cp["id"]}}
            if s is saver:
                s.delete_thread("T")  # a delete between the run's submits
                _writes_in_flight(url, at)  # the task's writes commit first
                assert saver.get_tuple(at) is None
                s.prune(["T"])
                assert saver.store.verify().ok
            else:
                s.delete_thread("T")
                s.put_writes(at, WRITES, "task-1", "~__pregel_pull, node")
            s.put(first, cp, {"source": "loop", "step": 0}, {"items": "2"})
            got = s.get_tuple(at)
            assert got is not None
            results.append((got.checkpoint["channel_values"], got.pending_writes))
        assert results[0] == results[1]
        assert results[0][1] == [("task-1", c, v) for c, v in WRITES]


def test_a_prune_of_a_live_thread_keeps_writes_whose_put_is_still_coming(url: str) -> None:
    """A thread going on: its head's child's writes land (another process) before the
    child's put; a keep_latest prune in between keeps them."""
    with CpstoreSaver.from_conn_string(url) as saver:
        head = saver.put(_cfg("T"), _checkpoint(1), {"source": "input", "step": -1}, {})
        head = saver.put(head, _checkpoint(2), {"source": "loop", "step": 0}, {})
        child = _checkpoint(3)
        at = {"configurable": {**head["configurable"], "checkpoint_id": child["id"]}}
        _writes_in_flight(url, at)
        saver.prune(["T"])
        assert saver.store.verify().ok
        saver.put(head, child, {"source": "loop", "step": 1}, {"items": "3"})
        got = saver.get_tuple(_cfg("T"))
        assert got is not None and got.config == at
        assert got.pending_writes == [("task-1", c, v) for c, v in WRITES]
