"""audit42: batched flushes and closes interrupted (KeyboardInterrupt, a signal handler's
exception or ``sys.exit()``), after the requeue of 4bf4baf/945354a.

- A close whose flush is interrupted must not mark the handle closed with the batch
  queued in it: the exit flush skips closed handles and a second close returned at once,
  so acknowledged checkpoints were lost without a word.
- A checkpoint whose own call filled the batch, and whose flush was interrupted, raised
  (its recorder never followed it) but stayed queued: the recorder's next checkpoint
  expected the old head, and the next flush failed with ConflictError, dropping the whole
  batch, acknowledged checkpoints included.
- A signal handler's exception landing after the batch committed was swallowed (LMDB:
  the commit "settled by reading") or relayed to the other threads of the batch as
  "not stored" for a batch that is stored (PostgreSQL).
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from flush_threads import WaitingWriter, assert_all_committed, flush_interrupted_beside_writer
from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures
from test_flush_interrupted import _interrupt_the_next_apply, _steps

import cpstore
from cpstore.store import lmdb_backend, pg_backend
from cpstore.store.at_exit import flush_collected
from cpstore.store.batch_owners import BatchOwners
from cpstore.store.lmdb_backend import Durability, LmdbBackend
from cpstore.store.lmdb_txns import EnvTxns
from cpstore.store.model import CheckpointWrite
from cpstore.store.pg_txn import PgTxn


def test_a_close_whose_flush_is_interrupted_keeps_the_batch(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the first close marked the handle closed with 5 checkpoints queued; the
    second close returned at once and the store held none of them."""
    st = cpstore.open(url, durability="batched", batch_size=1000)
    rec = st.recorder("r")
    ids = [rec.checkpoint(i, {"i": i}) for i in range(5)]
    _interrupt_the_next_apply(monkeypatch, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        st.close()
    st.close()
    assert _steps(url) == [4, 3, 2, 1, 0]
    with cpstore.open(url, readonly=True, create=False) as ro:
        assert ro.ref("r") == ids[-1]


_EXIT_SCRIPT = """
import sys
import cpstore
from cpstore.store.lmdb_backend import Durability, LmdbBackend
from cpstore.store.pg_backend import PgBackend
where, how = sys.argv[1], sys.argv[2]
cls, name = (PgBackend, "_apply_all") if "://" in where else (LmdbBackend, "_apply")
real, armed = getattr(cls, name), [True]

def apply(self, txn, ops):
    if armed[0] and len(ops) > 1:
        armed[0] = False
        if how == "exit":
            sys.exit(3)  # a SIGTERM handler's body, landing in the close's flush
        raise KeyboardInterrupt
    return real(self, txn, ops)

setattr(cls, name, apply)
with cpstore.open(where, durability="batched", batch_size=1000) as st:
    rec = st.recorder("r")
    for i in range(20):
        rec.checkpoint(i, {"i": i})
"""


@pytest.mark.parametrize("how", ["interrupt", "exit"])
def test_an_interrupt_in_the_with_blocks_close_loses_nothing_at_exit(url: str, how: str) -> None:
    """``with cpstore.open(...) as st:`` left by Ctrl-C / sys.exit() landing in its close's
    flush. Before: the handle was closed with 20 queued checkpoints; the exit flush skips
    closed handles; the store held none and nothing said so."""
    done = subprocess.run(
        [sys.executable, "-c", _EXIT_SCRIPT, url, how],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode in (-2, 3), done.stderr[-2000:]  # SIGINT re-raised, or sys.exit(3)
    assert _steps(url) == list(range(19, -1, -1)), done.stderr[-2000:]


def test_a_checkpoint_whose_flush_is_interrupted_does_not_break_its_recorder(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """checkpoint(4) fills the batch and its flush is interrupted: the call raises, so
    its recorder does not follow it. Before: it stayed queued all the same; the recorder's
    next checkpoint expected the head at 3, and the flush raised ConflictError and dropped
    the whole batch (the acknowledged 0..3 with it)."""
    st = cpstore.open(url, durability="batched", batch_size=5)
    try:
        rec = st.recorder("r")
        ids = [rec.checkpoint(i, {"i": i}) for i in range(4)]
        _interrupt_the_next_apply(monkeypatch, KeyboardInterrupt())
        with pytest.raises(KeyboardInterrupt):
            rec.checkpoint(4, {"i": 4})
        ids.append(rec.checkpoint(4, {"i": 4, "again": True}))  # the program goes on
        st.flush()
        assert st.ref("r") == ids[-1]
        assert [m.step for m in st.history("r")] == [4, 3, 2, 1, 0]
        assert [m.id for m in st.history("r")] == ids[::-1]
    finally:
        st.close()


def _raise_after_the_commit(monkeypatch: pytest.MonkeyPatch, exc: BaseException) -> None:
    """The next batch commit of either backend commits, then ``exc`` lands (a signal
    handler's exception, at the first bytecode after the commit)."""
    armed = [True]
    real_drop = EnvTxns._drop_unused_txns

    def drop(self: Any) -> None:  # env.write's finally: right after LMDB's commit
        real_drop(self)
        if armed[0] and getattr(self, "_arm42", False):
            armed[0] = False
            raise exc

    real_commit = PgTxn.commit

    def commit(self: Any) -> None:
        real_commit(self)
        if armed[0] and getattr(self, "_arm42", True):
            armed[0] = False
            raise exc

    monkeypatch.setattr(EnvTxns, "_drop_unused_txns", drop)
    monkeypatch.setattr(PgTxn, "commit", commit)


def test_a_handlers_exception_after_the_commit_is_raised_and_the_batch_is_stored(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SIGALRM watchdog raising TimeoutError just after the flush's commit (its fsync is
    where a signal most likely arrives). Before: LMDB's flush returned as if nothing
    happened (the timeout swallowed); PostgreSQL told the other thread, whose checkpoint
    was in the stored batch, 'not stored'."""
    st = cpstore.open(url, durability="batched", batch_size=1000)
    try:
        st.recorder("a").checkpoint(0, {"a": 0})
        second = WaitingWriter(st, "b")
        second.start()
        _raise_after_the_commit(monkeypatch, TimeoutError("watchdog"))
        if isinstance(st._backend, LmdbBackend):
            st._backend.env._arm42 = True  # type: ignore[attr-defined]
        with pytest.raises(TimeoutError):
            st.flush()
        second.go.set()  # its flush finds its checkpoint settled by the main thread's
        second.join()
        assert second.told == [None], second.told
        assert st.pending == 0
        assert st.ref("a") is not None and st.ref("b") is not None
    finally:
        st.close()


def test_a_requeued_batch_commits_before_what_another_thread_flushes_meanwhile(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The main thread's flush is interrupted applying [w0 (thread W's), r0]; W queues
    w1 (which extends w0) and flushes after the interrupt left the write txn, before the
    batch went back on the queue. Before: W's flush took [w1] alone and failed
    ConflictError (w0 not committed yet), no other writer involved; the requeued batch
    committed after it."""
    st = cpstore.open(url, durability="batched", batch_size=1000)
    try:
        w = flush_interrupted_beside_writer(
            st,
            monkeypatch,
            [lmdb_backend, pg_backend],
            lambda: _interrupt_the_next_apply(monkeypatch, KeyboardInterrupt()),
        )
        assert_all_committed(st, w)
    finally:
        st.close()


@pytest.mark.parametrize("mode", ["batched", "sync", "none"])
def test_a_handlers_write_through_another_handle_of_the_path_is_refused(
    tmp_path: Path, mode: Durability, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two handles of one LMDB path share one environment; a signal handler writing
    through handle B while its thread is inside a write of handle A. Before: LMDB's raw
    'A write transaction is already active' as a plain StoreError (the same-handle case
    is ReentrantWriteError), and in batched mode B's batch (the handler's checkpoint, and
    any other thread's in B's queue) was dropped as failed."""
    where = str(tmp_path / "s")
    a = cpstore.open(where, durability=mode, batch_size=1000)
    b = cpstore.open(where, durability=mode, batch_size=1000)
    try:
        told: list[str] = []
        real = LmdbBackend._apply
        armed = [True]

        def apply(self: Any, txn: Any, ops: Sequence[CheckpointWrite]) -> None:
            if armed[0]:
                armed[0] = False
                try:  # what the handler runs, inside A's write on this thread
                    b.recorder("h").checkpoint(0, {"h": 0})
                    b.flush()
                    told.append("ok")
                except cpstore.CpstoreError as exc:
                    told.append(type(exc).__name__)
            real(self, txn, ops)

        monkeypatch.setattr(LmdbBackend, "_apply", apply)
        a.recorder("r").checkpoint(0, {"r": 0})
        a.flush()
        assert told == ["ReentrantWriteError"]
        b.flush()
        assert a.ref("r") is not None
        assert b.ref("h") is None and b.pending == 0  # refused at its checkpoint()
    finally:
        b.close()
        a.close()


def test_the_interrupted_checkpoints_own_write_is_never_requeued_for_another_thread(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """checkpoint(0) of the main thread fills the batch [w0, r0]; its flush is
    interrupted; thread W flushes as soon as the txn ended. Before: the batch was requeued
    with r0 and W's flush committed it, though r0's call raised (its recorder never
    followed): the recorder's next checkpoint expected no head and failed ConflictError."""
    st = cpstore.open(url, durability="batched", batch_size=2)
    try:
        w = WaitingWriter(st)
        w.start()
        w.go_once_the_txn_ended(monkeypatch, [lmdb_backend, pg_backend])
        _interrupt_the_next_apply(monkeypatch, KeyboardInterrupt())
        rec = st.recorder("r")
        with pytest.raises(KeyboardInterrupt):
            rec.checkpoint(0, {"r": 0})
        w.join()
        assert w.told == [None], w.told
        cid = rec.checkpoint(0, {"r": 0, "again": True})
        st.flush()
        assert st.ref("r") == cid
        assert [m.step for m in st.history("w")] == [0]
    finally:
        st.close()


def test_a_collected_handles_flush_inside_another_handles_commit_is_not_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shared Reentry must not make a finalizer's flush of handle B, run by a
    collection inside handle A's commit() (outside its txn), fail as a nested write: its
    queue would be named lost and never written. It flushes now or on a helper thread."""
    where = str(tmp_path / "s")
    a = cpstore.open(where, durability="batched", batch_size=1000)
    b = cpstore.open(where, durability="batched", batch_size=1000)
    try:
        cid = b.recorder("b").checkpoint(0, {"b": 0})
        real = BatchOwners.queued
        done: list[bool] = []

        def queued(self: Any, op: Any) -> None:
            real(self, op)
            if not done:  # a collection inside A's commit(), as a finalizer runs it
                done.append(flush_collected(b._backend))  # type: ignore[arg-type]

        monkeypatch.setattr(BatchOwners, "queued", queued)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            a.recorder("r").checkpoint(0, {"r": 0})
            monkeypatch.undo()
            b.flush()  # waits for a helper thread's flush, if it was handed one
        assert not [str(w.message) for w in seen if issubclass(w.category, RuntimeWarning)]
        assert done and b.pending == 0
        assert a.ref("b") == cid
    finally:
        b.close()
        a.close()
