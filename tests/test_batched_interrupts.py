"""Batched flushes interrupted wherever a KeyboardInterrupt can land, not only at entry.

CPython delivers an asynchronous exception (SIGINT's KeyboardInterrupt) on entering a
Python function, on a loop's back edge and after a call of a C function returns. Here a
trace function raises one on the k-th function entry of thread A's flush, for every k
until the flush runs through (entries in cpstore, in ``threading``'s Condition and in
``collections.Counter`` included), while thread B's checkpoint is queued; then B flushes.
The contract (docs/durability.md, "batched"): B's flush never waits for ever, a flush that
returns acknowledges only a stored checkpoint, a "not stored" error is never given for one
that is (or is later) stored, and nothing is stored twice.
"""

from __future__ import annotations

import functools
import gc
import queue
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures
from psycopg._pipeline_base import BasePipeline
from test_batched_threads import JobThread
from trace_interrupts import interrupting, not_in_psycopg

import cpstore
from cpstore.errors import CpstoreError, OutcomeUnknownError


def check_an_interrupt_anywhere_in_a_flush_never_hangs_or_lies(store: str) -> None:
    """Every k: interrupt A's flush on its k-th function entry; B's flush then returns,
    and what it says is true of B's checkpoint (also after every later flush)."""
    st = cpstore.open(store, durability="batched", batch_size=10_000)
    if True:  # not ``with``: closing after a hang would wait for the stuck thread
        b, problems = JobThread(), []
        for k in range(1, 100_000):
            run = f"b{k}"
            rb = st.recorder(run)
            cid = b.run(functools.partial(rb.checkpoint, 1, {"k": k}))
            # psycopg's entries are left out here: swept by tests/test_psycopg_interrupts.py
            # (the writer lock an interrupt there used to leave held is pinned by
            # test_an_interrupt_in_psycopgs_pipeline_io_never_keeps_the_writer_lock)
            trace, landed = interrupting(k, not_in_psycopg)
            gc.disable()  # collector off while hooked: tests/trace_interrupts.py
            sys.settrace(trace)
            try:
                st.flush()
            except KeyboardInterrupt:
                pass
            finally:
                sys.settrace(None)
                gc.enable()
            try:
                told = b.run(st.flush, timeout=60)
            except queue.Empty:
                pytest.fail(f"interrupt at {landed}: B's flush waits for ever")
            st.flush()  # whatever is left queued
            stored = st.ref(run) == cid
            if told is None and not stored:
                problems.append(f"{landed}: B told stored, not stored")
            if isinstance(told, CpstoreError) and not isinstance(told, OutcomeUnknownError):
                if stored:
                    problems.append(f"{landed}: B told not stored ({told.what}), stored")
            elif told is not None and not isinstance(told, OutcomeUnknownError):
                problems.append(f"{landed}: B got {told!r}")
            if not landed:
                break  # the flush ran through: every entry was tried
        assert not problems, problems
        assert k > 20, k  # the flush has many entries: the loop tried them
        print(f"{k - 1} function entries interrupted")
    st.close()


def test_an_interrupt_anywhere_in_a_flush_never_hangs_or_lies(tmp_path: Path) -> None:
    """LMDB: an interrupt on any function entry of a flush keeps the batched contract."""
    check_an_interrupt_anywhere_in_a_flush_never_hangs_or_lies(str(tmp_path / "s"))


def test_an_interrupt_anywhere_in_a_flush_never_hangs_or_lies_on_postgres(
    pg_url: str,  # noqa: F811 - the fixture
) -> None:
    """PostgreSQL: an interrupt on any function entry of a flush keeps the batched contract."""
    check_an_interrupt_anywhere_in_a_flush_never_hangs_or_lies(pg_url)


def test_an_interrupt_in_psycopgs_pipeline_io_never_keeps_the_writer_lock(
    pg_url: str,  # noqa: F811 - the fixture
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A KeyboardInterrupt landing in psycopg's pipeline I/O as a write begins (BEGIN and
    the writer lock sent, the Sync not) closes that connection: before, libpq said idle,
    the connection went back to the pool and its session kept the store's writer lock, so
    every other writer waited for ever."""
    enqueue_sync = BasePipeline._enqueue_sync
    fired: list[bool] = []

    def interrupted(self: Any) -> Any:
        if not fired:
            fired.append(True)
            raise KeyboardInterrupt("in psycopg's pipeline I/O")
        return enqueue_sync(self)

    with cpstore.open(pg_url) as st, cpstore.open(pg_url) as other:
        rec = st.recorder("a")
        monkeypatch.setattr(BasePipeline, "_enqueue_sync", interrupted)
        with pytest.raises(KeyboardInterrupt):
            rec.checkpoint(0, {"x": 1})
        monkeypatch.setattr(BasePipeline, "_enqueue_sync", enqueue_sync)
        assert fired
        out: queue.Queue[Any] = queue.Queue()
        threading.Thread(
            target=lambda: out.put(other.recorder("b").checkpoint(0, {"y": 1})), daemon=True
        ).start()
        cid = out.get(timeout=60)  # queue.Empty: the other writer waited on the lock
        assert other.ref("b") == cid
        again = st.recorder("a").checkpoint(0, {"x": 1})  # the interrupted handle writes too
        assert st.ref("a") == again
