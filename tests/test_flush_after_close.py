"""``flush()`` after ``close()``, the same on both backends (docs/durability.md).

``close()`` flushes the queue (batched mode), so a flush after it has nothing left to
commit: it returns, on LMDB and PostgreSQL, in every durability mode. Nothing can be
left queued in a closed handle: a checkpoint another thread queues while the close is
under way is either in the close's flush (committed, or its failure raised to that
thread's next flush) or refused with ``StoreClosedError``. Before, it could land in the
queue after the close's flush had taken it: its id was returned, the handle closed, and
it was never written, with no warning (the handle was closed: no exit flush, no
collection warning) unless that thread flushed again.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from pg_cluster import fresh_url

import cpstore
from cpstore.errors import StoreClosedError


def _where(backend: str, tmp_path: Path) -> str:
    return str(tmp_path / "s") if backend == "lmdb" else fresh_url()


@pytest.mark.parametrize("durability", ["batched", "sync", "none"])
@pytest.mark.parametrize("backend", ["lmdb", "postgresql"])
def test_flush_after_close_with_nothing_queued_returns(
    backend: str, durability: str, tmp_path: Path
) -> None:
    where = _where(backend, tmp_path)
    st = cpstore.open(where, durability=durability)  # type: ignore[arg-type]
    cid = str(st.recorder("a").checkpoint(0, {"a": 0}))
    st.close()
    st.flush()  # close() flushed: nothing left, nothing to refuse
    st.flush()
    assert st.pending == 0
    with cpstore.open(where) as again:
        assert again.ref("a") == cid


@pytest.mark.parametrize("backend", ["lmdb", "postgresql"])
def test_a_checkpoint_queued_during_close_is_committed_or_refused(
    backend: str, tmp_path: Path
) -> None:
    where = _where(backend, tmp_path)
    st = cpstore.open(where, durability="batched", batch_size=100)
    st.recorder("a").checkpoint(0, {"a": 0})
    backend_ = st._backend
    flush = backend_.flush
    outcome: list[object] = []

    def other_thread_queues() -> None:
        try:
            outcome.append(st.recorder("b").checkpoint(0, {"b": 1}))
        except StoreClosedError as exc:
            outcome.append(exc)

    def flush_then_another_thread_queues() -> None:
        flush()  # the close's flush has taken the queue; the handle is not closed yet
        if not outcome:
            th = threading.Thread(target=other_thread_queues)
            th.start()
            th.join(60)
            assert not th.is_alive()

    backend_.flush = flush_then_another_thread_queues  # type: ignore[method-assign]
    st.close()
    assert len(outcome) == 1
    assert st.pending == 0, "a checkpoint was left queued in a closed handle"
    with cpstore.open(where) as again:
        head = again.ref("b")
    if isinstance(outcome[0], StoreClosedError):
        assert head is None
    else:
        assert head == str(outcome[0])
    st.flush()  # nothing queued: returns
