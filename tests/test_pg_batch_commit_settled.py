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
import warnings
from collections.abc import Callable, Iterator

import pytest
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures
from test_pg_commit_settled import _lose_the_next_checkpoint_commit

import cpstore
from cpstore.errors import CommitLostError, StoreConnectionError


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
