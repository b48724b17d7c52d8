"""PostgreSQL, batched mode: a batch whose connection was lost BEFORE its COMMIT was sent
is "not stored" to every thread whose checkpoints were in it.

Such a loss is a plain ``StoreConnectionError`` ("nothing of this transaction was
committed"): a COMMIT lost on the wire is ``CommitLostError`` instead (pg_errors.translate),
settled by reading the store back (tests/test_pg_batch_commit_settled.py). The thread that
flushed was told "nothing ... was committed", the exit flush's warning says "were NOT
written", but every other owner of the batch was told "they may or may not be stored
(read the branch heads)" (batch_fates.dropped_error took every StoreConnectionError for a
lost COMMIT, as it was before CommitLostError existed). Now it says "not stored" there too;
"may or may not" stays for a lost COMMIT the read-back could not settle.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures
from test_pg_batch_commit_settled import _Other

import cpstore
from cpstore.errors import CommitLostError, StoreConnectionError
from cpstore.store.pg_backend import PgBackend
from cpstore.store.pg_open import parse_url
from cpstore.store.pg_txn import PgTxn


@pytest.fixture
def store(pg_url: str) -> Iterator[cpstore.Store]:
    with cpstore.open(pg_url, durability="batched", batch_size=100) as s:
        yield s


def _kill_the_next_batch_before_commit(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    """The server ends the next batch txn's session once it holds the writer lock, before
    its writes and COMMIT are sent (pg_terminate_backend: a real loss, not a mock)."""
    armed = {"on": True}
    real_apply = PgBackend._apply_all
    conninfo = parse_url(url).conninfo

    def apply_all(self: PgBackend, txn: PgTxn, ops: list[Any]) -> None:
        if armed["on"]:
            armed["on"] = False
            pid = txn._conn.info.backend_pid  # type: ignore[union-attr]
            with psycopg.connect(conninfo, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,))
        real_apply(self, txn, ops)

    monkeypatch.setattr(PgBackend, "_apply_all", apply_all)


def test_a_batch_lost_before_commit_is_not_stored_to_every_owner(
    store: cpstore.Store,
    pg_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store.recorder("a").checkpoint(0, {"a": 0})
    other = _Other(store)
    assert store.pending == 2
    _kill_the_next_batch_before_commit(monkeypatch, pg_url)
    nothing = "nothing of this transaction was committed"
    with pytest.raises(StoreConnectionError, match=nothing) as err:
        store.flush()
    assert not isinstance(err.value, CommitLostError)  # COMMIT was never sent
    other.flush()
    got = other.outcome
    assert isinstance(got, StoreConnectionError) and not isinstance(got, CommitLostError)
    assert "not stored" in str(got), str(got)
    assert "may or may not" not in str(got), str(got)  # said "may or may not" before
    assert store.pending == 0
    assert store.ref("a") is None and store.ref("b") is None  # the truth: not stored


def test_the_exit_flush_of_a_batch_lost_before_commit_names_it_not_written(
    store: cpstore.Store,
    pg_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = store.recorder("a").checkpoint(0, {"a": 0})
    _kill_the_next_batch_before_commit(monkeypatch, pg_url)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        store.flush_at_exit()
    [said] = [str(w.message) for w in seen if issubclass(w.category, RuntimeWarning)]
    assert "were NOT written" in said and first in said
    assert store.ref("a") is None
