"""A signal handler's exception landing in the read-back that settles a commit error.

A checkpoint commit that reports an error is settled by reading the store back
(commit.settle_by_reading). A SIGTERM handler raising an ``Exception`` (a watchdog's
TimeoutError) in the main thread during that read was taken for "the store cannot be
read": the caller got OutcomeUnknownError "may or may not be stored", the handler's
exception lost, and the recorder did not follow its stored checkpoint. Now the
handler's exception is raised (as a KeyboardInterrupt there always was), the store is
read back once more, and a stored checkpoint is marked so its recorder follows it.
A second handler exception landing in that second read (a watchdog firing twice, a
second Ctrl-C, ``sys.exit()``: ``terms=2``) was taken for an unreadable store too, or
left it unread (batch_fates.interrupted; audit49, audit50): that read is tried once
more, and the first handler's exception is still the one raised.
Real LMDB underneath (test_group_commit_errors.fail_commits: the txn really commits,
then its commit raises); a real PostgreSQL server (its COMMIT runs, then the connection
is reported lost: test_pg_commit_settled).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from handler_signals import HOW, arm, raised_by, sigterm_restored
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures
from test_group_commit_errors import fail_commits
from test_pg_commit_settled import _lose_the_next_checkpoint_commit

import cpstore
from cpstore.store import lmdb_backend, lmdb_interrupted, lmdb_settle
from cpstore.store.pg_backend import PgBackend


@pytest.fixture
def handled() -> Iterator[list[threading.Event]]:
    with sigterm_restored() as events:
        yield events


def _term_in_the_first_calls(
    monkeypatch: pytest.MonkeyPatch, owners: list[Any], name: str, terms: int
) -> list[int]:
    """``name`` of each of ``owners`` (the read-back, as each module holds it) sends
    SIGTERM to this (main) thread in its first ``terms`` calls; the handler runs there.
    Returns a one-item list counting the calls."""
    real = getattr(owners[0], name)
    calls = [0]

    def landed(*args: Any) -> Any:
        calls[0] += 1
        if calls[0] <= terms:
            signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
        return real(*args)

    for owner in owners:
        monkeypatch.setattr(owner, name, landed)
    return calls


def _check(
    st: cpstore.Store,
    *,
    terms: int,
    how: str,
    handled: list[threading.Event],
    monkeypatch: pytest.MonkeyPatch,
    arm_fault: Callable[[], list[int]],
) -> None:
    """Checkpoint 1 of branch m commits, its commit then reports an error (``arm_fault``:
    the fault, and SIGTERM in the first ``terms`` read-backs); the call raises the first
    handler's exception, and the recorder follows the stored checkpoint."""
    rec = st.recorder("m")
    first = rec.checkpoint(0, {"m": 0})
    st.flush()
    ran = arm(how, handled)
    calls = arm_fault()
    with pytest.raises(raised_by(how)):
        rec.checkpoint(1, {"m": 1})
        st.flush()
    monkeypatch.undo()
    assert ran.is_set()
    assert calls[0] >= terms
    head = st.ref("m")
    assert head is not None and head != first  # it landed
    assert rec.head == head  # the recorder follows what the store holds
    nxt = rec.checkpoint(2, {"m": 2})
    st.flush()
    assert [m.id for m in st.history("m")][:2] == [nxt, head]
    assert [m.step for m in st.history("m")] == [2, 1, 0]
    assert st.ref("m") == nxt


@pytest.mark.parametrize("terms", [1, 2])
@pytest.mark.parametrize("durability", ["sync", "none", "batched"])
@pytest.mark.parametrize("how", HOW)
def test_a_handler_exception_in_the_read_back_is_raised_and_the_recorder_follows(
    tmp_path: Path,
    *,
    terms: int,
    durability: str,
    how: str,
    handled: list[threading.Event],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """LMDB: the txn commits, then its commit reports EIO."""

    def fault() -> list[int]:
        held = [lmdb_settle, lmdb_interrupted, lmdb_backend]
        calls = _term_in_the_first_calls(monkeypatch, held, "batch_landed", terms)
        fail_commits(st, lands=True)
        return calls

    with cpstore.open(str(tmp_path / "s"), durability=durability) as st:  # type: ignore[arg-type]
        _check(st, terms=terms, how=how, handled=handled, monkeypatch=monkeypatch, arm_fault=fault)


@pytest.mark.parametrize("terms", [1, 2])
@pytest.mark.parametrize("durability", ["sync", "none", "batched"])
@pytest.mark.parametrize("how", HOW)
def test_postgresql_a_handler_exception_in_the_read_back_is_raised_and_the_recorder_follows(
    pg_url: str,  # noqa: F811 - the fixture
    *,
    terms: int,
    durability: str,
    how: str,
    handled: list[threading.Event],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PostgreSQL: the COMMIT runs on the server, then the connection is reported lost."""

    def fault() -> list[int]:
        calls = _term_in_the_first_calls(monkeypatch, [PgBackend], "_landed", terms)
        _lose_the_next_checkpoint_commit(monkeypatch, sent=True)
        return calls

    with cpstore.open(pg_url, durability=durability) as st:  # type: ignore[arg-type]
        _check(st, terms=terms, how=how, handled=handled, monkeypatch=monkeypatch, arm_fault=fault)
