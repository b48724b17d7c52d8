"""``copy_thread(S, T)`` leaves each checkpoint it records on ``T`` holding the writes
``S`` holds, never writes ``T`` held under that checkpoint id before.

"Reset T to the template S" is ``delete_thread(T)`` then ``copy_thread(S, T)``. A
``put_writes`` of a run still in flight on ``T`` (another process) that commits after
the delete's txn stores writes no index entry names. The copy then recorded ``S``'s
checkpoint ``H`` on ``T`` under the very key those writes hang from, and they became
``H``'s pending writes beside ``S``'s: LangGraph took the old run's task as done and
the reset thread, resumed with "yes", answered with the old run's "no". The copy now
drops ``T``'s writes of each checkpoint it records in that checkpoint's own txn.
"""

from __future__ import annotations

import multiprocessing
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.types import Command
from pg_cluster import backend_url, fresh_url, pg_cluster  # noqa: F401 - fixtures
from test_langgraph_graphs import _hitl_graph

from cpstore.langgraph import CpstoreSaver
from cpstore.store.lg_index import pack, write_key
from cpstore.store.model import MAX_KEY_BYTES

TEMPLATE = {"configurable": {"thread_id": "S"}}
RESET = {"configurable": {"thread_id": "T"}}


def _late_writes(url: str, config: dict[str, Any], by_task: dict[str, list[Any]]) -> None:
    """The other process: the in-flight run's writes, landing after the delete."""
    with CpstoreSaver.from_conn_string(url) as saver:
        for task_id, writes in by_task.items():
            saver.put_writes(config, writes, task_id)


def test_a_thread_reset_from_a_template_holds_the_template_s_writes_only(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        graph = _hitl_graph(saver)
        graph.invoke({"items": [], "note": ""}, TEMPLATE)  # waits at review
        head = saver.get_tuple(TEMPLATE)
        assert head is not None
        at_head = {"configurable": {**head.config["configurable"], "thread_id": "T"}}
        saver.copy_thread("S", "T")
        assert graph.invoke(Command(resume="no"), RESET)["note"] == "no"
        ran = saver.get_tuple(at_head)
        assert ran is not None
        by_task: dict[str, list[Any]] = {}
        for task_id, channel, value in ran.pending_writes or []:
            if channel != "__interrupt__":  # plain values: they cross to the process
                by_task.setdefault(task_id, []).append((channel, value))
        assert any(c == "items" for ws in by_task.values() for c, _ in ws)
        saver.delete_thread("T")
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            pool.apply(_late_writes, (url, at_head, by_task))
        saver.copy_thread("S", "T")
        copied = saver.get_tuple(RESET)
        assert copied is not None and copied.config == at_head
        assert copied.pending_writes == head.pending_writes
        assert graph.invoke(Command(resume="yes"), RESET) == {
            "items": ["draft", "review:yes", "published"],
            "note": "yes",
        }
        assert saver.store.verify().ok


def test_a_second_copy_replaces_the_target_s_writes_of_each_copied_checkpoint(url: str) -> None:
    """Copying again over a target that wrote under a copied checkpoint: the source's
    writes, not the union (the target's own later checkpoints stay)."""
    with CpstoreSaver.from_conn_string(url) as saver:
        graph = _hitl_graph(saver)
        graph.invoke({"items": [], "note": ""}, TEMPLATE)
        head = saver.get_tuple(TEMPLATE)
        assert head is not None
        saver.copy_thread("S", "T")
        graph.invoke(Command(resume="no"), RESET)
        saver.copy_thread("S", "T")
        at_head = {"configurable": {**head.config["configurable"], "thread_id": "T"}}
        again = saver.get_tuple(at_head)
        assert again is not None
        assert again.pending_writes == head.pending_writes


def test_a_stale_write_key_longer_than_a_store_key_is_left_not_a_failed_copy(
    pg_cluster: Any,  # noqa: F811 - the fixture
) -> None:
    """PostgreSQL holds write keys an older release stored past today's limit (a long
    task id). Such a key cannot go in the checkpoint's txn: the copy leaves it and goes
    on, rather than stopping part-way with the target holding some checkpoints."""
    url = fresh_url()
    with CpstoreSaver.from_conn_string(url) as saver:
        at = saver.put(
            {"configurable": {"thread_id": "S", "checkpoint_ns": ""}},
            dict(empty_checkpoint()),
            {"source": "input", "step": -1},
            {},
        )
        saver.put_writes(at, [("x", 1)], "task")
        cid = at["configurable"]["checkpoint_id"]
        long_task = "t" * 600
        key = write_key("T", "", cid, long_task, 0, sized=False)
        assert len(key) > MAX_KEY_BYTES
        body = ["", long_task, 0, "x", *saver.serde.dumps_typed("old")]
        meta = saver.store.backend.db("meta")
        saver.store.backend.write_txn(lambda txn: txn.put(key, pack(key, body), db=meta))
        saver.copy_thread("S", "T")
        got = saver.get_tuple({"configurable": {"thread_id": "T", "checkpoint_ns": ""}})
        assert got is not None and ("task", "x", 1) in got.pending_writes
