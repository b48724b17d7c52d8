"""PostgreSQL, batched mode: a flush whose COMMIT lost its connection is settled by reading
the store back, as a single put is (tests/test_pg_commit_settled.py) and as LMDB's flush
settles a commit that reported an error (commit.landed).

Before, every owner of the batch was told it failed: the flushing thread "committed whole
or not at all", every other thread whose checkpoints were in it "may or may not be
stored", even when the server had committed it, and a retry met its own result as a
ConflictError. Now a batch the store shows committed is acknowledged to every owner; one
it shows absent is CommitLostError "not stored" to every owner; only a store that cannot
be read back leaves the outcome open. The loss is made where it happens: the COMMIT
reaches the server (or is rolled back), then the connection is reported broken.
"""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Callable, Iterator
from threading import Thread
from typing import Any

import psycopg
import pytest
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures
from test_pg_commit_settled import (
    _LOST,
    _arm_the_next_checkpoint_commit,
    _lose_the_next_checkpoint_commit,
)

import cpstore
from cpstore.errors import CommitLostError, StoreConnectionError
from cpstore.store.pg_backend import PgBackend
from cpstore.store.pg_errors import translate
from cpstore.store.pg_open import parse_url
from cpstore.store.pg_txn import PgTxn


def url_conninfo(url: str) -> str:
    """The libpq conninfo of a store URL (its schema parameter dropped)."""
    return parse_url(url).conninfo


@pytest.fixture
def store(pg_url: str) -> Iterator[cpstore.Store]:
    with cpstore.open(pg_url, durability="batched", batch_size=100) as s:
        yield s


class _Other:
    """Another thread that queues a checkpoint on run ``b``, then, once told, flushes and
    keeps what its flush said (None: it returned)."""

    def __init__(self, store: cpstore.Store) -> None:
        self.store = store
        self.queued = threading.Event()
        self.go = threading.Event()
        self.first: str | None = None
        self.outcome: BaseException | None = None
        self.returned = False
        self.thread = threading.Thread(target=self._run, name="other-owner")
        self.thread.start()
        assert self.queued.wait(60), "the other thread never queued its checkpoint"

    def _run(self) -> None:
        try:
            self.first = self.store.recorder("b").checkpoint(0, {"b": 0})  # queued only
        finally:
            self.queued.set()
        self.go.wait(60)
        try:
            self.store.flush()  # its checkpoint was in the main thread's batch
            self.returned = True
        except BaseException as exc:
            self.outcome = exc

    def flush(self) -> None:
        self.go.set()
        self.thread.join(60)
        assert not self.thread.is_alive(), "the other thread's flush never returned"


def _one_batch_of_two_owners(
    store: cpstore.Store, lose: Callable[[], None]
) -> tuple[str, _Other, Callable[[], None]]:
    """Main queues a0, the other thread b0; ``lose`` arms the loss; returns main's flush."""
    first_a = store.recorder("a").checkpoint(0, {"a": 0})
    other = _Other(store)
    assert store.pending == 2
    lose()
    return first_a, other, store.flush


def test_a_batch_that_landed_is_acknowledged_to_every_owner(
    store: cpstore.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    first_a, other, flush = _one_batch_of_two_owners(
        store, lambda: _lose_the_next_checkpoint_commit(monkeypatch, sent=True)
    )
    flush()  # raised CommitLostError "committed whole or not at all" before
    other.flush()
    assert other.outcome is None and other.returned  # was StoreConnectionError before
    assert store.pending == 0
    assert store.ref("a") == first_a and store.ref("b") == other.first
    with store.read(first_a) as cp:
        assert cp.state() == {"a": 0}
    assert other.first is not None
    with store.read(other.first) as cp:
        assert cp.state() == {"b": 0}
    # No retry needed: the recorders go on from their stored heads, nothing conflicts.
    second_a = store.recorder("a").checkpoint(1, {"a": 1})
    store.flush()
    assert store.manifest(second_a).parent == first_a
    assert [m.step for m in store.history("a")] == [1, 0]
    assert store.verify().ok


def test_a_batch_that_did_not_land_says_not_stored_to_every_owner(
    store: cpstore.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, other, flush = _one_batch_of_two_owners(
        store, lambda: _lose_the_next_checkpoint_commit(monkeypatch, sent=False)
    )
    with pytest.raises(CommitLostError, match="the commit wrote nothing: not stored") as err:
        flush()
    assert err.value.stored is False
    other.flush()
    got = other.outcome
    assert isinstance(got, CommitLostError), repr(got)  # StoreConnectionError before
    assert "not stored" in str(got) and "may or may not" not in str(got)
    assert got.stored is False
    assert store.pending == 0
    assert store.ref("a") is None and store.ref("b") is None
    again = store.recorder("a").checkpoint(0, {"a": 0})  # the same checkpoint, stored now
    store.flush()
    assert store.ref("a") == again and store.verify().ok


def test_an_unreadable_store_leaves_the_batch_open_to_every_owner(
    store: cpstore.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    first_a, other, flush = _one_batch_of_two_owners(
        store,
        lambda: _lose_the_next_checkpoint_commit(monkeypatch, sent=True, readable=False),
    )
    with pytest.raises(CommitLostError, match="committed whole or not at all") as err:
        flush()
    assert "not stored" not in str(err.value) and err.value.stored is None
    other.flush()
    got = other.outcome
    assert isinstance(got, StoreConnectionError), repr(got)
    assert "may or may not be stored" in str(got) and "wrote nothing" not in str(got)
    assert isinstance(got, CommitLostError) and got.stored is None  # StoreConnectionError before
    monkeypatch.undo()
    assert store.ref("a") == first_a and store.ref("b") == other.first  # it had landed


def _exit_flush(store: cpstore.Store) -> list[str]:
    """The exit hook's flush of ``store`` (as at interpreter exit); its warnings."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        store.flush_at_exit()
    return [str(w.message) for w in seen if issubclass(w.category, RuntimeWarning)]


def test_the_exit_flush_of_a_batch_that_landed_warns_of_nothing(
    store: cpstore.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = store.recorder("a")
    first = rec.checkpoint(0, {"a": 0})
    _lose_the_next_checkpoint_commit(monkeypatch, sent=True)
    assert _exit_flush(store) == []  # warned "were NOT written" before
    assert store.ref("a") == first


def test_the_exit_flush_of_a_batch_that_did_not_land_names_it_not_written(
    store: cpstore.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = store.recorder("a").checkpoint(0, {"a": 0})
    _lose_the_next_checkpoint_commit(monkeypatch, sent=False)
    [said] = _exit_flush(store)
    assert "were NOT written" in said and first in said and "not stored" in said
    assert store.ref("a") is None


def test_the_exit_flush_of_an_unreadable_batch_says_it_may_have_been_written(
    store: cpstore.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = store.recorder("a").checkpoint(0, {"a": 0})
    _lose_the_next_checkpoint_commit(monkeypatch, sent=True, readable=False)
    [said] = _exit_flush(store)
    assert "may or may not have been written" in said and first in said  # "NOT" before
    monkeypatch.undo()
    assert store.ref("a") == first


def _commit_once_a_reader_waits(monkeypatch: pytest.MonkeyPatch, url: str) -> list[Thread]:
    """The next checkpoint txn's connection is reported lost with its COMMIT not yet run:
    its session (holding the writer lock) commits only once another session waits for an
    advisory lock, as a COMMIT still on the wire or awaiting a synchronous standby does
    (or after 10 s when none waits). Returns the committing thread, to join."""
    late: list[Thread] = []

    def commit_later(conn: psycopg.Connection[Any], release: Callable[..., None]) -> None:
        with psycopg.connect(url_conninfo(url), autocommit=True) as look:
            for _ in range(200):  # a reader waiting for the lock, or 10 s
                row = look.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                ).fetchone()
                if row is not None and row[0] > 0:
                    break
                time.sleep(0.05)
        conn.execute("COMMIT")
        release(conn, True)

    def commit(txn: PgTxn) -> None:
        conn = txn._ensure()
        for sql, params in txn._flush_statements():
            conn.execute(sql, params)  # written, not committed: the session holds the lock
        release, txn._conn, txn._done = txn._release, None, True  # the late thread's now
        late.append(Thread(target=commit_later, args=(conn, release)))
        late[-1].start()
        raise translate(_LOST, "test", None, committing=True)

    _arm_the_next_checkpoint_commit(monkeypatch, commit)
    return late


def test_a_batch_still_committing_when_read_back_is_waited_for(
    store: cpstore.Store, monkeypatch: pytest.MonkeyPatch, pg_url: str
) -> None:
    """The read-back waits for the writer lock the lost txn's session holds: read at once,
    it found the batch absent and said "not stored" of a batch that then committed."""
    late: list[Thread] = []
    first_a, other, flush = _one_batch_of_two_owners(
        store, lambda: late.extend(_commit_once_a_reader_waits(monkeypatch, pg_url))
    )
    try:
        flush()  # raised CommitLostError "not stored" before, and then it committed
    finally:
        for t in late:
            t.join(60)
    other.flush()
    assert other.outcome is None and other.returned
    assert store.ref("a") == first_a and store.ref("b") == other.first
    assert store.verify().ok


def test_a_put_still_committing_when_read_back_is_waited_for(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same for a single put (sync mode), which shares the read-back."""
    with cpstore.open(pg_url) as st:
        rec = st.recorder("run")
        first = rec.checkpoint(0, {"i": 0})
        late = _commit_once_a_reader_waits(monkeypatch, pg_url)
        try:
            second = rec.checkpoint(1, {"i": 1})  # raised "not stored" before, then committed
        finally:
            for t in late:
                t.join(60)
        assert st.ref("run") == second and st.manifest(second).parent == first
        assert st.verify().ok


def test_a_read_back_that_waits_too_long_for_the_writer_lock_leaves_it_open(
    store: cpstore.Store, monkeypatch: pytest.MonkeyPatch, pg_url: str
) -> None:
    """Another session takes the writer lock between the lost commit and the read-back and
    holds it past the read-back's bound: the outcome stays open, never read as settled
    while a writer holds the lock."""
    first = store.recorder("a").checkpoint(0, {"a": 0})
    monkeypatch.setattr("cpstore.store.pg_backend.SETTLE_WAIT", 0.2)
    _lose_the_next_checkpoint_commit(monkeypatch, sent=True)
    backend = store.backend
    assert isinstance(backend, PgBackend)
    real_landed = PgBackend._landed
    with psycopg.connect(url_conninfo(pg_url), autocommit=True) as holder:

        def landed(self: PgBackend, ops: list[Any]) -> bool | None:
            holder.execute("SELECT pg_advisory_lock(%s)", (self._lock_key,))
            return real_landed(self, ops)

        monkeypatch.setattr(PgBackend, "_landed", landed)
        with pytest.raises(CommitLostError, match="committed whole or not at all") as err:
            store.flush()
        holder.execute("SELECT pg_advisory_unlock(%s)", (backend._lock_key,))
    assert err.value.stored is None and "not stored" not in str(err.value)
    monkeypatch.undo()
    assert store.ref("a") == first  # it had landed: only the read was refused


def test_the_read_backs_lock_timeout_ends_with_it(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The read-back's ``SET LOCAL lock_timeout`` ends with its txn, read or refused: the one
    pooled connection (pool_max=1) shows the server's default after both, idle, and a
    write on it goes on (a session-wide SET would leave later writes cancelled after the
    settle wait for a lock another writer holds)."""
    with cpstore.open(pg_url + "&pool_max=1", durability="batched", batch_size=100) as st:
        backend = st.backend
        assert isinstance(backend, PgBackend)

        def pooled() -> tuple[str, str]:
            conn = backend._pool.getconn(timeout=30)
            try:
                row = conn.execute("SHOW lock_timeout").fetchone()
                return (str(row[0]) if row else "?", conn.info.transaction_status.name)
            finally:
                backend._pool.putconn(conn)

        default = pooled()
        assert default[1] == "IDLE"
        first = st.recorder("a").checkpoint(0, {"a": 0})
        _lose_the_next_checkpoint_commit(monkeypatch, sent=True)
        st.flush()  # read back, found committed
        assert st.ref("a") == first and pooled() == default
        st.recorder("a").checkpoint(1, {"a": 1})
        monkeypatch.setattr("cpstore.store.pg_backend.SETTLE_WAIT", 0.2)
        _lose_the_next_checkpoint_commit(monkeypatch, sent=True)
        real_landed = PgBackend._landed
        with psycopg.connect(url_conninfo(pg_url), autocommit=True) as holder:

            def landed(self: PgBackend, ops: list[Any]) -> bool | None:
                holder.execute("SELECT pg_advisory_lock(%s)", (self._lock_key,))
                return real_landed(self, ops)

            monkeypatch.setattr(PgBackend, "_landed", landed)
            with pytest.raises(CommitLostError, match="committed whole or not at all"):
                st.flush()  # the read-back's lock wait was refused
            holder.execute("SELECT pg_advisory_unlock(%s)", (backend._lock_key,))
        monkeypatch.undo()
        assert pooled() == default
        third = st.recorder("a").checkpoint(2, {"a": 2})
        st.flush()
        assert st.ref("a") == third and st.verify().ok
