"""A batched thread told that another thread's failed commit dropped its checkpoints is
never told "not stored" when that commit lost its connection (found auditing the chaos
harness, which reads the error class; a caller reading the message was misled).

On PostgreSQL a connection lost while committing means the batch committed whole or not
at all (docs/store.md, "Faults"); the committing thread gets exactly that, and the other
threads whose checkpoints were in the batch got the same class saying "not stored".
Such a loss was a plain StoreConnectionError then; it is CommitLostError now
(pg_errors.translate), and a plain StoreConnectionError is a loss before COMMIT was sent:
nothing committed, "not stored" to every owner (tests/test_pg_batch_lost_before_commit.py).
"""

from __future__ import annotations

import threading

import pytest

from cpstore.errors import CommitLostError, ConflictError, CpstoreError, StoreConnectionError
from cpstore.store.batch_owners import BatchOwners

LOST = (
    "the connection to the server was lost while committing: the transaction either "
    "committed whole or not at all; read the ref again before retrying"
)


def _relayed(exc: BaseException) -> CpstoreError:
    """What the main thread's flush raises after thread B took its queued write into a
    batch whose commit raised ``exc``."""
    owners: BatchOwners[object] = BatchOwners("postgresql://x/db")
    queue: list[object] = [object()]
    owners.queued(queue[0])  # this thread's

    def b() -> None:
        batch: list[object] = []
        who: list[object] = []
        owners.taken(queue, who, batch)  # type: ignore[arg-type]
        owners.settled(who, exc)  # type: ignore[arg-type]

    t = threading.Thread(target=b)
    t.start()
    t.join()
    with pytest.raises(CpstoreError) as got:
        owners.wait_mine()
    return got.value


def test_a_drop_from_a_commit_that_lost_its_connection_says_it_may_be_stored() -> None:
    """The relayed error keeps the class (CommitLostError, outcome open) and says the
    checkpoints may or may not be stored, never "not stored"."""
    err = _relayed(CommitLostError(LOST, where="flush"))
    assert isinstance(err, CommitLostError) and err.stored is None
    assert "not stored" not in str(err) and "may or may not be stored" in str(err)


def test_a_drop_from_a_connection_lost_before_commit_says_not_stored() -> None:
    """Lost before COMMIT was sent (a plain StoreConnectionError): nothing committed."""
    err = _relayed(StoreConnectionError("nothing of this transaction was committed"))
    assert isinstance(err, StoreConnectionError) and not isinstance(err, CommitLostError)
    assert "not stored" in str(err) and "may or may not" not in str(err)


def test_a_drop_from_a_refused_commit_still_says_not_stored() -> None:
    """A commit refused (a compare-and-set conflict) wrote nothing: "not stored" stays."""
    err = _relayed(ConflictError("the head moved", where="refs/x"))
    assert isinstance(err, ConflictError) and "not stored" in str(err)
