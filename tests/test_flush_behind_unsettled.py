"""A batch taken from the queue whose fate is not settled yet holds back every other flush.

The main thread's flush takes [w0 (thread W's), r0]; an interrupt ends its write txn with
the batch's fate unknown, and it is settled (read back, then requeued in front of the
queue, or found stored, or left in doubt) only after the writer lock was let go. Thread W
queues w1 (extending w0) and flushes in between. Before: W's flush took [w1] alone and
failed ConflictError (w0 not committed yet; no other writer involved), dropping w1,
which was acknowledged as queued; or, w0's fate unknown, W was told ConflictError for
w1 instead of the doubt on w0. Now a flush that finds another batch in flight under the
writer lock takes nothing, lets the lock go (the read-back waits for it), waits for that
batch to settle and flushes again (BatchOwners.take).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
from flush_threads import assert_all_committed, flush_interrupted_beside_writer
from pg_cluster import Cluster, backend_url, fresh_url, pg_cluster  # noqa: F401 - fixtures

import cpstore
from cpstore.errors import OutcomeUnknownError, StoreConnectionError
from cpstore.store import lmdb_backend, pg_backend, pg_settle
from cpstore.store.batch_owners import BatchOwners
from cpstore.store.pg_txn import PgTxn


def _on_main_once(fn: Callable[[], None]) -> Callable[[], bool]:
    """A trigger that runs ``fn`` on its first call on the main thread (True then)."""
    armed = [True]

    def trigger() -> bool:
        if armed[0] and threading.current_thread() is threading.main_thread():
            armed[0] = False
            fn()
            return True
        return False

    return trigger


def _interrupt() -> None:
    raise KeyboardInterrupt("injected")


def test_an_interrupt_as_the_apply_returns_requeues_before_another_thread_takes_the_queue(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The interrupt lands as BatchOwners.applying returns (the batch applied in the txn,
    not yet marked applied): the txn aborts and the batch is requeued without a read-back,
    after the writer lock was let go (applying's own requeue, under the lock, is for an
    interrupt inside the apply). Before: W told ConflictError, w1 dropped (both backends)."""
    st = cpstore.open(url, durability="batched", batch_size=1000)
    try:
        real = BatchOwners.applying
        trigger = _on_main_once(_interrupt)

        def applying(owners: BatchOwners[Any], *args: Any) -> None:
            real(owners, *args)
            trigger()

        arm = partial(monkeypatch.setattr, BatchOwners, "applying", applying)
        w = flush_interrupted_beside_writer(st, monkeypatch, [lmdb_backend, pg_backend], arm)
        assert_all_committed(st, w)
    finally:
        st.close()


def _read_back_fails(how: str) -> Callable[[], None]:
    if how == "server gone":

        def gone() -> None:
            raise StoreConnectionError("the server is gone (injected)", where="test")

        return gone
    return _interrupt


@pytest.mark.parametrize(
    ("how", "times", "pool_max"),
    [
        ("interrupted", 0, "1"),
        ("interrupted", 1, "8"),
        ("interrupted", 2, "8"),
        ("server gone", 1, "8"),
    ],
)
def test_a_commit_whose_read_back_fails_holds_back_another_threads_flush(
    pg_cluster: Cluster,  # noqa: F811 - the fixture
    monkeypatch: pytest.MonkeyPatch,
    how: str,
    times: int,
    pool_max: str,
) -> None:
    """PgTxn.commit is interrupted (before COMMIT is sent: w0 and r0 not stored), then the
    read-back that settles it fails ``times`` times. Not at all, with one pooled
    connection (W holds it while it waits under the writer lock; the read-back needs it),
    or once (a second Ctrl-C; interrupted() reads again): requeued, W's flush commits w0,
    r0, w1. Twice, or the server gone: the batch's fate stays unknown, and W is told so
    (OutcomeUnknownError on w0) while w1 stays queued; it never lands on the missing w0:
    the next flush reads w's head in its txn, finds not w0 and takes w1 off the queue (told
    to W; inflight102: before, its compare-and-set failed that whole batch, ConflictError).
    Before: W's flush of w1 ran before the settle, and W was told ConflictError every time."""
    st = cpstore.open(fresh_url(pool_max=pool_max), durability="batched", batch_size=10_000)
    try:
        real_commit = PgTxn.commit
        in_commit = _on_main_once(_interrupt)

        def commit(txn: PgTxn) -> None:
            if not txn.write or not in_commit():
                real_commit(txn)

        real_landed = pg_settle.landed_on_server
        fails = [_on_main_once(_read_back_fails(how)) for _ in range(times)]

        def landed(*args: Any) -> bool | None:
            for fail in fails:
                if fail():
                    break  # raised; never here
            return real_landed(*args)

        def arm() -> None:
            monkeypatch.setattr(PgTxn, "commit", commit)
            monkeypatch.setattr(pg_backend, "landed_on_server", landed)

        w = flush_interrupted_beside_writer(st, monkeypatch, [pg_backend], arm)
        if how == "interrupted" and times <= 1:
            assert_all_committed(st, w)
            return
        assert len(w.told) == 1 and isinstance(w.told[0], OutcomeUnknownError), w.told
        assert st.pending == 1  # w1, behind the doubt on w0
        st.flush()  # w1 taken off (its head read: not w0), W's and told to W (inflight102)
        assert st.pending == 0
        assert st.ref("w") is None
    finally:
        st.close()
