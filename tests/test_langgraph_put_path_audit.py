"""LangGraph maintenance in one process beside puts in another: every stored checkpoint is whole."""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint
from stored import raw_items

from cpstore.langgraph import CpstoreSaver
from cpstore.native.canonical import decode_value
from cpstore.store.content import objects_of
from cpstore.store.manifest import manifest_references
from cpstore.store.model import unpack_checkpoint_value


def _putter(path: str, n: int) -> list[tuple[str, str]]:
    """Put ``n`` checkpoints in a chain on thread "p" (values shared with the copies)."""
    out = []
    with CpstoreSaver.from_conn_string(path) as saver:
        parent = None
        for i in range(n):
            cp = empty_checkpoint()
            value = f"v{i % 4}" + "x" * 5000
            cp["channel_values"] = {"doc": value, "fixed": "f" * 300}
            cp["channel_versions"] = {"doc": i + 1, "fixed": 1}
            conf: dict[str, Any] = {"thread_id": "p", "checkpoint_ns": ""}
            if parent is not None:
                conf["checkpoint_id"] = parent
            got = saver.put(
                {"configurable": conf}, cp, {"step": i, "run_id": f"r{i % 3}"}, {"doc": i + 1}
            )
            parent = got["configurable"]["checkpoint_id"]
            out.append((parent, value))
    return out


def _maintainer(path: str, rounds: int) -> int:
    """Copy thread p, delete older copies and runs, prune p to its latest, round after round."""
    with CpstoreSaver.from_conn_string(path) as saver:
        for i in range(rounds):
            saver.copy_thread("p", f"c{i}")
            if i:
                saver.delete_thread(f"c{i - 1}")
            saver.delete_for_runs([f"r{i % 3}"])
            saver.prune(["p"], strategy="keep_latest")
            saver.store.prune(keep_last=2)
        return rounds


def test_copy_delete_and_prune_beside_puts_leave_every_checkpoint_whole(tmp_path: Path) -> None:
    """copy_thread/delete_thread/delete_for_runs/prune racing a putter whose recorder skips
    reading what its head reaches: the last put reads back and every checkpoint is whole."""
    path = str(tmp_path / "store")
    _putter(path, 1)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        puts = pool.apply_async(_putter, (path, 60))
        kept = pool.apply_async(_maintainer, (path, 6))
        acked, _ = puts.get(timeout=300), kept.get(timeout=300)
    with CpstoreSaver.from_conn_string(path) as saver:
        last_id, last_value = acked[-1]
        tup = saver.get_tuple({"configurable": {"thread_id": "p", "checkpoint_id": last_id}})
        if tup is not None:  # delete_for_runs may have dropped its entry; never its objects
            assert tup.checkpoint["channel_values"]["doc"] == last_value
        store = saver.store
        report = store.verify()
        assert report.ok, report.problems
        objects = objects_of(store.backend.dbs)
        with store.backend.read_txn() as txn:
            for _, value in raw_items(txn, store.backend.dbs, "checkpoints"):
                manifest = decode_value(unpack_checkpoint_value(value)[1])
                for _, key in manifest_references(manifest):
                    assert objects.exists(txn, key)
