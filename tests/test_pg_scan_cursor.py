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

import psycopg
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


@pytest.fixture
def damaged_url(pg_cluster: Any) -> str:
    """A damaged store (:func:`_damaged_store`, closed) whose pool holds one connection,
    so the txn after a broken one gets that very connection."""
    url = fresh_url(pool_max="1")
    _damaged_store(url).close()
    return url


def _in_two_processes(child: Any, url: str) -> None:
    """``child(url, out)`` in two spawned processes at once: each puts what went wrong
    (none of them: ``[]``) and exits 0."""
    ctx = multiprocessing.get_context("spawn")
    out: Any = ctx.Queue()
    procs = [ctx.Process(target=child, args=(url, out), daemon=True) for _ in range(2)]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert results == [[], []]
    if any(p.exitcode != 0 for p in procs):
        pytest.fail(f"exit codes {[p.exitcode for p in procs]}")


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
    damaged_url: str,
) -> None:
    """One pooled connection: the next txn on it reads and writes normally (before: its
    second statement failed with 25P02)."""
    assert _abandon_then_read(damaged_url) == []


def _child(url: str, out: Any) -> None:
    out.put(_abandon_then_read(url))


def test_processes_sharing_the_store_meet_no_aborted_txn(
    damaged_url: str,
) -> None:
    """Two processes on one damaged store (the writer lock between them), each abandoning
    a scan and reading and writing on: neither sees an aborted txn."""
    _in_two_processes(_child, damaged_url)


def _scan_read_after_its_txn(url: str) -> list[str]:
    """A refs scan begun inside a read txn and read on after the txn ended (a stream handed
    out of its ``with`` block), then a read and a write on the one pooled connection.
    What went wrong."""
    st = cpstore.open(url)
    refs = st.backend.dbs["refs"]
    got: list[str] = []
    with st.backend.read_txn() as txn:
        rows = iter(txn.cursor(db=refs))
        first = next(rows)
    try:
        rest = list(rows)
        got.append(f"the scan went on after its txn ended: {len(rest) + 1} rows, no error")
    except CpstoreError:
        pass  # refused: the walk is known to be cut short
    try:
        with st.backend.read_txn() as txn:
            if txn.get(bytes(first[0]), db=refs) is None:
                got.append("the first ref went missing")
        st.recorder(f"w{os.getpid()}").checkpoint(0, {"after": True})
    except CpstoreError as exc:
        got.append(repr(exc)[:300])
    st.close()
    return got


def test_a_scan_read_after_its_txn_ended_is_refused_not_cut_short(damaged_url: str) -> None:
    """A stream the txn's end closed refuses its next row (before: it ended silently, a
    truncated walk a caller took for the whole table)."""
    assert _scan_read_after_its_txn(damaged_url) == []


def _ended_while_running(url: str) -> list[str]:
    """The txn ends while its stream is the running frame (a finalizer, a signal handler or
    another thread ending it inside a FETCH), the next txn takes the one pooled connection
    before the stream's FETCH runs, and later txns read and write. What went wrong."""
    st = cpstore.open(url)
    refs = st.backend.dbs["refs"]
    got: list[str] = []
    real = psycopg.ServerCursor.fetchmany
    txn: Any = None

    def fetchmany(self: Any, size: int = 0) -> Any:
        txn.abort()  # the stream is running: its close cannot run now
        other = st.backend.begin_read()  # the next txn (another thread's) takes the pool's
        try:  # connection, then the stream's FETCH runs
            other.get(b"r0\0main", db=refs)
            try:
                return real(self, size)
            finally:
                if other.get(b"r1\0main", db=refs) is None:
                    got.append("a ref went missing in the next txn")
        except CpstoreError as exc:
            if "25P02" in str(exc) or "aborted" in str(exc):
                got.append(f"the next txn was aborted: {exc!r}"[:300])
            raise
        finally:
            st.backend.end_read(other)

    psycopg.ServerCursor.fetchmany = fetchmany  # type: ignore[method-assign]
    try:
        with st.backend.read_txn() as txn:
            try:
                rows = list(txn.cursor(db=refs))
                got.append(f"the stream read {len(rows)} rows after its txn ended")
            except CpstoreError:
                pass  # refused
    finally:
        psycopg.ServerCursor.fetchmany = real  # type: ignore[method-assign]
    try:
        for i in range(3):
            with st.backend.read_txn() as other:
                if (
                    other.get(b"r0\0main", db=refs) is None
                    or other.get(b"r1\0main", db=refs) is None
                ):
                    got.append("a ref went missing")
            st.recorder(f"w{os.getpid()}").checkpoint(i, {"after": i})
    except CpstoreError as exc:
        got.append(repr(exc)[:300])
    st.close()
    return got


def test_a_txn_ended_inside_its_running_scan_never_pools_the_cursors_connection(
    damaged_url: str,
) -> None:
    """The stream cannot be closed while it runs, so its cursor stays bound to the
    connection: the connection is closed, not pooled (before: pooled, and the stream's
    FETCH ran outside the txn, on the connection the next txns got)."""
    assert _ended_while_running(damaged_url) == []


def _child_after_end(url: str, out: Any) -> None:
    out.put(_scan_read_after_its_txn(url) + _ended_while_running(url))


def test_processes_reading_scans_past_their_txns_meet_no_aborted_txn(damaged_url: str) -> None:
    """Two processes on one store, each reading a scan past its txn's end and ending a txn
    inside its running scan, then reading and writing on (the writer lock between them)."""
    _in_two_processes(_child_after_end, damaged_url)


def test_an_interrupt_closing_a_scan_still_gives_the_connection_back(
    damaged_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A KeyboardInterrupt inside a scan's CLOSE when its txn ends: the txn's connection
    still goes back to the pool (closed), so the next txn gets one (before: it was never
    given back, and with one pooled connection every later txn waited for the pool and
    failed)."""
    monkeypatch.setattr("cpstore.store.pg_backend.POOL_WAIT", 3.0)
    st = cpstore.open(damaged_url)
    refs = st.backend.dbs["refs"]
    real = psycopg.ServerCursor.close
    calls: list[int] = []

    def close(self: Any) -> None:
        if not calls:
            calls.append(1)
            raise KeyboardInterrupt
        real(self)

    monkeypatch.setattr(psycopg.ServerCursor, "close", close)
    with pytest.raises(KeyboardInterrupt), st.backend.read_txn() as txn:
        next(iter(txn.cursor(db=refs)))
    monkeypatch.setattr(psycopg.ServerCursor, "close", real)
    assert calls == [1]
    with st.backend.read_txn() as other:
        assert other.get(b"r0\0main", db=refs) is not None
    st.recorder("after").checkpoint(0, {"after": True})
    st.close()
