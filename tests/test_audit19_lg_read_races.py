"""audit19: the LangGraph read path (Loader over StateReads) racing writers in other processes.

``list`` and ``get_tuple`` read many checkpoints in one txn, each part hash-checked
once per txn and immutable values shared. These tests run them in one process
while others put, put_writes, prune (keep_latest), delete_thread and store gc on
the same store (LMDB, and PostgreSQL on a real server): every tuple read must be
exactly what its writer put (values derived from its step), no read may raise, and
no value handed out may be shared with a later read.
"""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from pg_cluster import Cluster, fresh_url, pg_cluster  # noqa: F401 - fixtures
from stored import raw_delete

from cpstore.errors import IntegrityError
from cpstore.langgraph import CpstoreSaver
from cpstore.langgraph._read import entry_at

_THREADS = ("a", "b")


def _values(thread: str, step: int) -> dict[str, Any]:
    """The channel values a checkpoint of ``thread`` at ``step`` holds (``same`` never changes)."""
    return {
        "same": "constant " + "s" * 300,
        "doc": f"{thread} v{step} " + "x" * (step % 7) * 500,
        "items": [step, [step, thread]],
        "n": step,
    }


def _cfg(thread: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def _putter(url: str, thread: str, n: int) -> int:
    """Put ``n`` checkpoints on ``thread`` (restarting the chain after a delete), each
    followed by one pending write; return how many were put."""
    with CpstoreSaver.from_conn_string(url) as saver:
        config = _cfg(thread)
        versions = {"same": 1, "doc": 1, "items": 1, "n": 1}
        for step in range(n):
            cp = empty_checkpoint()
            cp["channel_values"] = _values(thread, step)
            new = {"same": 1} if step == 0 else {}
            for name in ("doc", "items", "n"):
                versions[name] += 1
                new[name] = versions[name]
            cp["channel_versions"] = dict(versions)
            config = saver.put(config, cp, {"source": "loop", "step": step}, new)
            saver.put_writes(config, [("items", [step, "w"])], f"task-{step}")
    return n


def _churner(url: str, rounds: int) -> int:
    """Prune, delete thread "b" and gc, ``rounds`` times."""
    with CpstoreSaver.from_conn_string(url) as saver:
        for i in range(rounds):
            saver.prune(["a"], strategy="keep_latest")
            if i % 3 == 2:
                saver.delete_thread("b")
            saver.store.gc(keep_last=2, run_id="lg:a")
    return rounds


def _check(tup: Any, thread: str) -> None:
    """One tuple: the values its step names, the write put after it (or none yet)."""
    step = tup.metadata["step"]
    got = tup.checkpoint["channel_values"]
    assert got == _values(thread, step), (thread, step, got)
    assert tup.pending_writes in ([], [(f"task-{step}", "items", [step, "w"])])


def _reader(url: str, rounds: int) -> int:
    """list and get_tuple every thread ``rounds`` times; every tuple checked, then its
    changeable values edited (a later read must not see the edit); returns tuples read."""
    seen = 0
    with CpstoreSaver.from_conn_string(url) as saver:
        for _ in range(rounds):
            for thread in _THREADS:
                listed = list(saver.list(_cfg(thread)))
                for tup in listed:
                    _check(tup, thread)
                for tup in listed:
                    tup.checkpoint["channel_values"]["items"][1].append("edited")
                    tup.checkpoint["channel_values"]["same"] = "edited"
                    tup.metadata["step"] = -1
                for tup in listed[:5]:
                    again = saver.get_tuple(tup.config)
                    if again is not None:  # pruned or deleted meanwhile: None
                        _check(again, thread)
                head = saver.get_tuple(_cfg(thread))
                if head is not None:
                    _check(head, thread)
                seen += len(listed)
    return seen


def _race(url: str) -> None:
    _putter(url, "a", 2)
    _putter(url, "b", 2)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        jobs = [
            pool.apply_async(_putter, (url, "a", 40)),
            pool.apply_async(_putter, (url, "b", 25)),
            pool.apply_async(_churner, (url, 6)),
            pool.apply_async(_reader, (url, 12)),
        ]
        results = [job.get(timeout=600) for job in jobs]
    assert results[3] > 0  # the reader read tuples while the others ran
    with CpstoreSaver.from_conn_string(url) as saver:
        head = saver.get_tuple(_cfg("a"))
        assert head is not None and head.metadata["step"] == 39  # the last acknowledged put
        assert _reader(url, 1) > 0
        assert saver.store.verify().ok


def test_lmdb_list_and_get_tuple_racing_puts_prunes_deletes_and_gc_read_only_whats_put(
    tmp_path: Path,
) -> None:
    """LMDB: reads racing four other processes' writes give exactly the values put."""
    _race(str(tmp_path / "store"))


def test_postgres_list_and_get_tuple_racing_puts_prunes_deletes_and_gc_read_only_whats_put(
    pg_cluster: Cluster,  # noqa: F811 - the fixture
) -> None:
    """PostgreSQL: reads racing four other processes' writes give exactly the values put."""
    _race(fresh_url())


@pytest.mark.parametrize("backend", ["lmdb", "postgres"])
def test_values_of_a_list_are_not_shared_with_a_later_list(
    backend: str,
    tmp_path: Path,
    pg_cluster: Cluster,  # noqa: F811 - the fixture
) -> None:
    """Every changeable value two lists hand out is a fresh object (edits do not leak)."""
    url = str(tmp_path / "s") if backend == "lmdb" else fresh_url()
    _putter(url, "a", 6)
    with CpstoreSaver.from_conn_string(url) as saver:
        first = list(saver.list(_cfg("a")))
        for tup in first:
            tup.checkpoint["channel_values"]["items"][1].append("edited")
            tup.checkpoint["channel_versions"]["doc"] = "edited"
            tup.metadata["source"] = "edited"
            tup.pending_writes[0][2].append("edited")
        second = list(saver.list(_cfg("a")))
        for tup in second:
            _check(tup, "a")
            assert tup.metadata["source"] == "loop"
            assert "edited" not in tup.checkpoint["channel_versions"].values()


def _cid_of(saver: CpstoreSaver, thread: str, checkpoint_id: str) -> bytes:
    backend = saver.store.backend
    with backend.read_txn() as txn:
        entry = entry_at(txn, backend.db("meta"), thread, "", checkpoint_id)
    assert entry is not None
    return entry.cid


@pytest.mark.parametrize("backend", ["lmdb", "postgres"])
def test_pruned_reads_none_and_a_record_lost_without_tombstone_is_damage(
    backend: str,
    tmp_path: Path,
    pg_cluster: Cluster,  # noqa: F811 - the fixture
) -> None:
    """Pruned: get_tuple None and list skips it; a record gone with no tombstone: IntegrityError
    "not stored" from get_tuple and list (the Loader's folded stored() check), on both engines."""
    url = str(tmp_path / "s") if backend == "lmdb" else fresh_url()
    _putter(url, "a", 5)
    with CpstoreSaver.from_conn_string(url) as saver:
        ids = [t.config["configurable"]["checkpoint_id"] for t in saver.list(_cfg("a"))][::-1]
        saver.store.prune(keep_last=2, run_id="lg:a")
        assert saver.get_tuple(_cfg("a", ids[0])) is None
        assert [t.config["configurable"]["checkpoint_id"] for t in saver.list(_cfg("a"))] == [
            ids[4],
            ids[3],
        ]
        cid = _cid_of(saver, "a", ids[3])
        store_backend = saver.store.backend
        store_backend.write_txn(lambda txn: raw_delete(txn, store_backend.dbs, "checkpoints", cid))
        with pytest.raises(IntegrityError, match="not stored"):
            saver.get_tuple(_cfg("a", ids[3]))
        with pytest.raises(IntegrityError, match="not stored"):
            list(saver.list(_cfg("a")))
        head = saver.get_tuple(_cfg("a"))
        assert head is not None and head.metadata["step"] == 4
