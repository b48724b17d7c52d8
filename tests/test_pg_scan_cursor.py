"""A server-side cursor stream a raise abandoned never touches a later txn's connection.

``prune`` scans the refs through a server-side cursor (``PgTxn.scan``); a damaged ref
met mid-scan raises IntegrityError, and the stream, held by the exception's traceback,
was closed whenever that was freed: its ``CLOSE`` then ran on the connection after it
went back to the pool, inside whichever txn held it, where the cursor no longer
existed, so that txn was aborted and its next statement failed with StoreError
"25P02: current transaction is aborted" (found by the chaos test's refusal table,
server-crash variant, seed 1003). Now a txn closes its streams when it ends.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
from typing import Any

import pytest
from pg_cluster import fresh_url, pg_cluster  # noqa: F401 - fixtures

import cpstore
from cpstore.errors import CpstoreError, IntegrityError


def _damaged_store(url: str) -> cpstore.Store:
    """A store of five runs whose ``r2`` ref fails its check (a flipped bit)."""
    st = cpstore.open(url)
    for i in range(5):
        st.recorder(f"r{i}").checkpoint(0, {"a": i})
    key, refs = b"r2\0main", st.backend.dbs["refs"]

    def flip(txn: Any) -> None:
        value = bytes(txn.get(key, db=refs))
        txn.put(key, value[:-1] + bytes([value[-1] ^ 1]), db=refs)

    st.backend.write_txn(flip)
    return st


def _abandon_then_read(url: str) -> list[str]:
    """prune refused mid-scan, its error kept; a read txn on the one pooled connection
    drops the error (the stream is freed) between two statements. What went wrong."""
    st = cpstore.open(url)
    refs = st.backend.dbs["refs"]
    kept: list[BaseException] = []
    try:
        st.prune(keep_last=3)
    except IntegrityError as exc:
        kept.append(exc)
    got: list[str] = []
    if not kept:
        got.append("prune was not refused by the damaged ref")
    try:
        with st.backend.read_txn() as txn:
            first = txn.get(b"r0\0main", db=refs)
            kept.clear()
            gc.collect()
            second = txn.get(b"r1\0main", db=refs)
            if first is None or second is None:
                got.append("a ref went missing")
        st.recorder(f"w{os.getpid()}").checkpoint(0, {"after": True})  # and writes
    except CpstoreError as exc:
        got.append(repr(exc)[:300])
    st.close()
    return got


def test_a_scan_abandoned_by_a_raise_never_aborts_the_next_txn(
    pg_cluster: Any,
) -> None:
    """One pooled connection: the next txn on it reads and writes normally (before: its
    second statement failed with 25P02)."""
    url = fresh_url(pool_max="1")
    _damaged_store(url).close()
    assert _abandon_then_read(url) == []


def _child(url: str, out: Any) -> None:
    out.put(_abandon_then_read(url))


def test_processes_sharing_the_store_meet_no_aborted_txn(
    pg_cluster: Any,
) -> None:
    """Two processes on one damaged store (the writer lock between them), each abandoning
    a scan and reading and writing on: neither sees an aborted txn."""
    ctx = multiprocessing.get_context("spawn")
    out: Any = ctx.Queue()
    url = fresh_url(pool_max="1")
    _damaged_store(url).close()
    procs = [ctx.Process(target=_child, args=(url, out), daemon=True) for _ in range(2)]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert results == [[], []]
    if any(p.exitcode != 0 for p in procs):
        pytest.fail(f"exit codes {[p.exitcode for p in procs]}")
