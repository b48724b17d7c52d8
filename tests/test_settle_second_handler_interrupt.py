"""A second signal handler's KeyboardInterrupt or SystemExit landing in the read-back that
settles the first (test_settle_second_handler_exception's case with a watchdog's
``Exception``): the checkpoint, stored, must be marked so and the recorder follow it."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from handler_signals import arm, raised_by, sigterm_restored
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


@pytest.mark.parametrize("how", ["interrupt", "exit"])
@pytest.mark.parametrize("durability", ["sync", "none", "batched"])
def test_a_second_handler_interrupt_in_the_read_back_leaves_the_recorder_on_its_checkpoint(
    tmp_path: Path,
    durability: str,
    how: str,
    handled: list[threading.Event],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with cpstore.open(str(tmp_path / "s"), durability=durability) as st:  # type: ignore[arg-type]
        rec = st.recorder("m")
        first = rec.checkpoint(0, {"m": 0})
        st.flush()
        ran = arm(how, handled)
        real = lmdb_settle.batch_landed
        calls = [0]

        def landed(backend: Any, ops: Any) -> bool | None:
            calls[0] += 1
            if calls[0] <= 2:  # the first read-back and the one that follows it
                signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
            return real(backend, ops)

        monkeypatch.setattr(lmdb_settle, "batch_landed", landed)
        monkeypatch.setattr(lmdb_interrupted, "batch_landed", landed)
        monkeypatch.setattr(lmdb_backend, "batch_landed", landed)
        fail_commits(st, lands=True)  # committed, then the commit reports EIO
        with pytest.raises(raised_by(how)):
            rec.checkpoint(1, {"m": 1})
            st.flush()
        assert ran.is_set()
        assert calls[0] >= 2
        head = st.ref("m")
        assert head is not None and head != first  # it landed
        assert rec.head == head  # the recorder follows what the store holds
        nxt = rec.checkpoint(2, {"m": 2})
        st.flush()
        assert [m.step for m in st.history("m")] == [2, 1, 0]
        assert st.ref("m") == nxt


@pytest.mark.parametrize("how", ["interrupt", "exit"])
@pytest.mark.parametrize("durability", ["sync", "none", "batched"])
def test_postgresql_a_second_handler_interrupt_in_the_read_back_leaves_the_recorder_on_it(
    pg_url: str,  # noqa: F811 - the fixture
    durability: str,
    how: str,
    handled: list[threading.Event],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same when PostgreSQL's COMMIT lost its connection after committing."""
    with cpstore.open(pg_url, durability=durability) as st:  # type: ignore[arg-type]
        rec = st.recorder("m")
        first = rec.checkpoint(0, {"m": 0})
        st.flush()
        ran = arm(how, handled)
        real = PgBackend._landed
        calls = [0]

        def landed(self: PgBackend, ops: Any) -> bool | None:
            calls[0] += 1
            if calls[0] <= 2:
                signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
            return real(self, ops)

        monkeypatch.setattr(PgBackend, "_landed", landed)
        _lose_the_next_checkpoint_commit(monkeypatch, sent=True)
        with pytest.raises(raised_by(how)):
            rec.checkpoint(1, {"m": 1})
            st.flush()
        monkeypatch.undo()
        assert ran.is_set()
        head = st.ref("m")
        assert head is not None and head != first  # it landed
        assert rec.head == head  # the recorder follows what the store holds
        rec.checkpoint(2, {"m": 2})
        st.flush()
        assert [m.step for m in st.history("m")] == [2, 1, 0]
