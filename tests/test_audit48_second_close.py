"""Audit 48: a second close waiting for a close whose flush an interrupt cut short.

Thread T queued checkpoints (batched) and closes the store while the main thread's close
commits them; T's close waits for that one (one close releases the handle). The main
close's flush is interrupted while applying the batch: it requeues the batch and keeps
the handle open (audit42). T's close then returned as if it had closed the store, its
checkpoints only queued: T was told they were durable while no commit held them (a
kill, or an exit flush that fails, lost them with no error to T). Now a close that waited
for one which kept the handle open closes it itself: it commits the queue (fails before).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from flush_threads import close_in_the_next_apply
from pg_cluster import backend_url, pg_cluster, pg_url  # noqa: F401 - fixtures

import cpstore
from cpstore.errors import StoreError
from cpstore.store.lmdb_backend import LmdbBackend
from cpstore.store.model import CheckpointWrite
from cpstore.store.pg_backend import PgBackend


def _waiting_in_close(thread: threading.Thread) -> bool:
    frame = sys._current_frames().get(thread.ident or -1)
    names = []
    while frame is not None:
        names.append(frame.f_code.co_name)
        frame = frame.f_back
    return "close" in names and "wait" in names


def test_a_close_waiting_for_an_interrupted_close_commits_its_checkpoints(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    st = cpstore.open(url, durability="batched", batch_size=10_000)
    ids: list[str] = []

    def record() -> None:
        rec = st.recorder("t")
        ids.extend(rec.checkpoint(i, {"i": i}) for i in range(3))

    worker = threading.Thread(target=record)
    worker.start()
    worker.join(60)
    assert len(ids) == 3 and st.pending == 3
    closer, told = close_in_the_next_apply(monkeypatch, st, _waiting_in_close)
    with pytest.raises(KeyboardInterrupt):
        st.close()
    closer.join(60)
    assert not closer.is_alive()
    assert len(told) == 1, told
    if told[0] is None:  # T was told its checkpoints are stored: they must be
        assert st.backend.closed, "T's close returned with the store open"  # before
        assert st.pending == 0
    monkeypatch.undo()
    st.close()
    with cpstore.open(url, readonly=True, create=False) as ro:
        assert [m.id for m in ro.history("t")] == ids[::-1]


def test_a_close_waiting_for_another_close_raises_what_its_thread_is_owed(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Thread T's checkpoints were in the main thread's batch, whose commit failed (a store
    error: dropped, T owed "not stored"). T then closes while the main thread's close
    commits a checkpoint of its own, so T's close waits for that one. Before: T's close
    returned ok, T never told its checkpoints were not stored (alone, its close's flush
    raised it). Now it raises the error T is owed (fails before)."""
    st = cpstore.open(url, durability="batched", batch_size=10_000)
    ids: list[str] = []
    recorded, go = threading.Event(), threading.Event()
    calls = [0]
    told: list[BaseException | None] = []

    def record_then_close() -> None:
        rec = st.recorder("t")
        ids.extend(rec.checkpoint(i, {"i": i}) for i in range(3))
        recorded.set()
        assert go.wait(60)
        try:
            st.close()
            told.append(None)
        except BaseException as exc:  # what it was told is the point
            told.append(exc)

    closer = threading.Thread(target=record_then_close, name="second-closer")
    closer.start()
    assert recorded.wait(60)
    for cls, name in ((LmdbBackend, "_apply"), (PgBackend, "_apply_all")):
        real: Callable[..., None] = getattr(cls, name)

        def apply(owner: Any, txn: Any, ops: Sequence[CheckpointWrite], real: Any = real) -> None:
            calls[0] += 1
            if calls[0] == 1:  # the main thread's flush of T's batch: fails, dropped
                raise StoreError("injected failure of the batch's apply", where="test")
            if calls[0] == 2:  # the main thread's close: T closes meanwhile
                go.set()
                deadline = time.monotonic() + 30
                while not _waiting_in_close(closer) and time.monotonic() < deadline:
                    time.sleep(0.01)
            real(owner, txn, ops)

        monkeypatch.setattr(cls, name, apply)
    with pytest.raises(StoreError):
        st.flush()
    main = st.recorder("main").checkpoint(0, {"m": 0})
    st.close()
    closer.join(60)
    assert not closer.is_alive()
    assert len(told) == 1
    assert isinstance(told[0], StoreError), told  # before: None, told ok
    assert "not stored" in str(told[0])
    monkeypatch.undo()
    with cpstore.open(url, readonly=True, create=False) as ro:
        assert [m.id for m in ro.history("t")] == []
        assert ro.ref("main") == main
