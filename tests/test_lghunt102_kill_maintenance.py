"""lghunt102: a process SIGKILLed mid ``copy_thread``, ``prune`` or ``delete_thread``.

A child loops copy ``b`` -> ``c`` (then ``keep_latest`` of ``c``) and ``delete_thread(c)``
and reports each checkpoint it records; the parent kills it once a random count of
them arrived (mid-copy, mid-prune's re-record, between a delete's txn and its sweep).
Then: ``b`` reads as before, every checkpoint ``c`` lists is one of ``b``'s (values,
metadata, parent) and ``verify()`` is clean; ``delete_thread(c)`` leaves no checkpoint
of ``c`` stored (the store's counts as before the copies, tombstones aside), and a new
copy equals ``b``. LMDB and PostgreSQL.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
from typing import Any

import pytest
from lghunt102_workers import WAIT, cfg, maintenance_victim, one_put
from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures

from cpstore.langgraph import CpstoreSaver

CTX = multiprocessing.get_context("spawn")


def _snap(saver: CpstoreSaver, thread: str) -> dict[tuple[str, str], Any]:
    out = {}
    for t in saver.list({"configurable": {"thread_id": thread}}):
        conf = t.config["configurable"]
        parent = None if t.parent_config is None else t.parent_config["configurable"]
        out[conf["checkpoint_ns"], conf["checkpoint_id"]] = (
            t.checkpoint["channel_values"],
            t.metadata,
            parent and parent["checkpoint_id"],
            sorted(map(repr, t.pending_writes or [])),
        )
    return out


def _counts(saver: CpstoreSaver) -> dict[str, int]:
    report = saver.store.verify()
    assert report.ok, report
    return {k: v for k, v in report.counts.items() if k != "tombstones"}


@pytest.mark.parametrize(("op", "seed"), [("copy", 0), ("copy", 1), ("prune", 2), ("prune", 3)])
def test_a_process_killed_mid_maintenance_leaves_whole_threads(
    url: str, op: str, seed: int
) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        parent = None
        for i in range(30):
            ns = "" if i % 3 else "sub"
            root = (
                i % 9 == 0 or parent is None or parent.config["configurable"]["checkpoint_ns"] != ns
            )
            rec = one_put(saver, ("b", ns), "w", i, None if root else parent)
            parent = saver.get_tuple(cfg("b", ns, rec[2]))
        source = _snap(saver, "b")
        base = _counts(saver)
    out = CTX.Queue()
    child = CTX.Process(target=maintenance_victim, args=(url, op, out))
    child.start()
    assert out.get(timeout=WAIT) == "go"
    want, got = random.Random(seed).randint(1, 70), 0
    while got < want:
        got += out.get(timeout=WAIT) == "cp"
    assert child.pid is not None
    os.kill(child.pid, signal.SIGKILL)
    child.join(WAIT)
    assert child.exitcode == -signal.SIGKILL
    out.cancel_join_thread()  # what the killed child left in the pipe is never read
    with CpstoreSaver.from_conn_string(url) as saver:
        _counts(saver)  # verify() clean
        assert _snap(saver, "b") == source
        for key, (values, metadata, parent_id, _writes) in _snap(saver, "c").items():
            assert key in source, f"c holds {key}, not b's"
            assert (values, metadata, parent_id) == source[key][:3], key
        saver.delete_thread("c")
        assert _counts(saver) == base, "the killed maintenance left checkpoints of c"
        saver.copy_thread("b", "c")
        assert _snap(saver, "c") == source
        _counts(saver)
