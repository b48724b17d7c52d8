"""Audit 48: a PostgreSQL checkpoint committed inside an ``except`` block whose COMMIT fails.

``pg_errors.interrupt_in`` takes the first exception in a psycopg error's context chain
that is neither psycopg's nor cpstore's for an interrupt psycopg's pipeline replaced
(pgfollow). But a checkpoint saved while the caller handles an exception of its own
(``except RuntimeError: rec.checkpoint(...); raise``, the usual "save before dying")
has that exception in the context of every error raised inside it: a COMMIT lost with
the connection raised the caller's own, already handled, RuntimeError from
``checkpoint()`` instead of CommitLostError "not stored", and a batched flush took it
for an interrupt (the batch requeued, the flush raising the stale error). Now only an
exception raised inside the commit counts (fails before).
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures
from test_pgfollow_handler_exception import STRIDE, _interrupt_in_the_commit

import cpstore
from cpstore.errors import CommitLostError
from cpstore.store.facade import Durability
from cpstore.store.pg_backend import PgBackend


def _conninfo(url: str) -> str:
    socket_dir = url.split("host=")[1].split("&", maxsplit=1)[0]
    return f"host={socket_dir} user=postgres dbname=postgres"


def _cut_after_apply(backend: PgBackend, url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The session of the next write txn terminated once its checkpoints are applied:
    its COMMIT (sent with the buffered writes) meets a lost connection."""
    real = backend._apply_all

    def apply_then_cut(txn: Any, ops: Any) -> None:
        real(txn, ops)
        pid = txn._conn.info.backend_pid
        with psycopg.connect(_conninfo(url), autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        monkeypatch.setattr(backend, "_apply_all", real)

    monkeypatch.setattr(backend, "_apply_all", apply_then_cut)


class _MineError(RuntimeError):
    """The caller's own exception, handled while it saves a checkpoint."""


@pytest.mark.parametrize("durability", ["sync", "none"])
def test_a_lost_commit_inside_an_except_block_is_commit_lost(
    pg_url: str,  # noqa: F811 - the fixture
    durability: Durability,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with cpstore.open(pg_url, durability=durability) as store:
        rec = store.recorder("run")
        first = rec.checkpoint(0, {"i": 0})
        backend = store.backend
        assert isinstance(backend, PgBackend)
        _cut_after_apply(backend, pg_url, monkeypatch)
        try:
            raise _MineError("the training step failed")
        except _MineError:
            with pytest.raises(CommitLostError) as info:  # before: _MineError, raised again
                rec.checkpoint(1, {"i": 1})
        assert info.value.stored is False
        assert store.ref("run") == first
        assert rec.checkpoint(2, {"i": 2}) == store.ref("run")


def test_a_batched_flush_inside_an_except_block_drops_a_lost_batch(
    pg_url: str,  # noqa: F811 - the fixture
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with cpstore.open(pg_url, durability="batched", batch_size=100) as store:
        rec = store.recorder("run")
        rec.checkpoint(0, {"i": 0})
        store.flush()
        first = store.ref("run")
        rec.checkpoint(1, {"i": 1})
        backend = store.backend
        assert isinstance(backend, PgBackend)
        _cut_after_apply(backend, pg_url, monkeypatch)
        try:
            raise _MineError("the training step failed")
        except _MineError:
            with pytest.raises(CommitLostError):  # before: _MineError, the batch requeued
                store.flush()
        assert store.pending == 0
        assert store.ref("run") == first


def test_an_interrupt_in_the_commit_inside_an_except_block_is_raised_as_itself(
    pg_url: str,  # noqa: F811 - the fixture
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """pgfollow's sweep (KeyboardInterrupt at every STRIDE-th psycopg function entry of the
    COMMIT's round trip), each checkpoint saved inside an ``except`` block: the interrupt
    is raised (never the handled exception, never swallowed) and the recorder stays on
    the branch's head. A guard for the fix (passes before it too: the interrupt comes
    before the handled exception in the chain): the chain's walk stopping at the handled
    exception never hides an interrupt psycopg's error replaced."""
    st = cpstore.open(pg_url, durability="sync")
    problems: list[str] = []
    try:
        rec = st.recorder("m")
        rec.checkpoint(0, {"m": 0})
        step = 1
        for k in range(1, 10_000, STRIDE):
            landed = _interrupt_in_the_commit(monkeypatch, k)
            raised: BaseException | None = None
            try:
                raise _MineError("the training step failed")
            except _MineError:
                try:
                    rec.checkpoint(step, {"m": step})
                except BaseException as exc:  # what came out is the point
                    raised = exc
            monkeypatch.undo()
            step += 1
            if not landed:
                break  # the commit ran through: every entry was tried
            if not isinstance(raised, KeyboardInterrupt):
                problems.append(f"k={k} {landed}: raised {raised!r}"[:200])
            if rec.head != st.ref("m"):
                problems.append(f"k={k} {landed}: recorder at {rec.head}, not the head")
                rec = st.recorder("m")
        else:
            pytest.fail("the commit never ran through")
    finally:
        st.close()
    assert not problems, problems[:10]
