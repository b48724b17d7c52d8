"""PostgreSQL: a checkpoint whose COMMIT lost its connection is settled by reading the
store back, as LMDB settles a commit that reported an error (commit.landed).

Before, every such put raised "the transaction either committed whole or not at all;
read the ref again before retrying", even when it had committed: the runtime was told
its acknowledged-by-the-server checkpoint might be missing, and a retry of it met its own
result as a conflict. Now a put the store shows committed returns (its id, its ref); one
it shows absent says "not stored"; only a store that cannot be read back leaves the
outcome open (CommitLostError, as before). The loss is made here where it happens: the
COMMIT reaches the server (or not), then the connection is reported broken.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import psycopg
import pytest
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures

import cpstore
from cpstore.errors import CommitLostError, StoreConnectionError
from cpstore.store.pg_backend import PgBackend
from cpstore.store.pg_txn import PgTxn

_LOST = psycopg.OperationalError("server closed the connection unexpectedly")


@pytest.fixture
def store(pg_url: str) -> Iterator[cpstore.Store]:
    with cpstore.open(pg_url) as s:
        yield s


def _arm_the_next_checkpoint_commit(
    monkeypatch: pytest.MonkeyPatch, armed_commit: Callable[[PgTxn], None]
) -> None:
    """The next checkpoint txn's COMMIT runs ``armed_commit`` instead; every other txn
    commits as it would."""
    armed = {"on": False, "spent": False}
    real_apply, real_commit = PgBackend._apply_all, PgTxn.commit

    def apply_all(self: PgBackend, txn: PgTxn, ops: list[object]) -> None:
        armed["on"] = not armed["spent"]  # the next checkpoint txn only
        real_apply(self, txn, ops)  # type: ignore[arg-type]

    def commit(txn: PgTxn) -> None:
        if not (armed["on"] and txn.write):
            real_commit(txn)
            return
        armed["on"], armed["spent"] = False, True
        armed_commit(txn)

    monkeypatch.setattr(PgBackend, "_apply_all", apply_all)
    monkeypatch.setattr(PgTxn, "commit", commit)


def _lose_the_next_checkpoint_commit(
    monkeypatch: pytest.MonkeyPatch, *, sent: bool, readable: bool = True
) -> None:
    """The next checkpoint txn's COMMIT runs on the server (``sent``) or is rolled back,
    then the connection is reported lost; ``readable`` False: the read-back fails too."""
    real_commit = PgTxn.commit

    def lost(txn: PgTxn) -> None:
        if sent:
            real_commit(txn)
        else:
            txn.abort()
        from cpstore.store.pg_errors import translate  # noqa: PLC0415

        raise translate(_LOST, "test", None, committing=True)

    _arm_the_next_checkpoint_commit(monkeypatch, lost)
    if not readable:

        def unreadable(self: PgBackend, ops: object) -> bool | None:
            raise StoreConnectionError("the server could not be reached")

        monkeypatch.setattr(PgBackend, "_landed", unreadable)


def test_a_commit_that_landed_is_acknowledged(
    store: cpstore.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = store.recorder("run")
    first = rec.checkpoint(0, {"i": 0})
    _lose_the_next_checkpoint_commit(monkeypatch, sent=True)
    second = rec.checkpoint(1, {"i": 1})  # raised CommitLostError before
    assert store.ref("run") == second
    with store.read(second) as cp:
        assert cp.state() == {"i": 1} and cp.manifest.parent == first
    third = rec.checkpoint(2, {"i": 2})  # the recorder goes on from it
    assert [m.step for m in store.history("run")] == [2, 1, 0] and store.ref("run") == third
    assert store.verify().ok


def test_a_commit_that_did_not_land_says_not_stored(
    store: cpstore.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = store.recorder("run")
    first = rec.checkpoint(0, {"i": 0})
    _lose_the_next_checkpoint_commit(monkeypatch, sent=False)
    with pytest.raises(CommitLostError, match="the commit wrote nothing: not stored"):
        rec.checkpoint(1, {"i": 1})
    assert store.ref("run") == first
    assert [m.step for m in store.history("run")] == [0]
    again = store.recorder("run").checkpoint(1, {"i": 1})
    assert store.ref("run") == again and store.verify().ok


def test_an_unreadable_store_leaves_the_outcome_open(
    store: cpstore.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = store.recorder("run")
    rec.checkpoint(0, {"i": 0})
    _lose_the_next_checkpoint_commit(monkeypatch, sent=True, readable=False)
    with pytest.raises(CommitLostError, match="committed whole or not at all") as err:
        rec.checkpoint(1, {"i": 1})
    assert "not stored" not in str(err.value)
    monkeypatch.undo()
    assert [m.step for m in store.history("run")] == [1, 0]  # it had landed
