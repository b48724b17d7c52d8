"""Audit 22: PostgreSQL's apply path keeps no TxnChecked (commit.TxnChecked is LMDB's):
each checkpoint of a batched flush (PostgreSQL has no group commit) reads its parent
and its objects' existence in the txn's own prefetch, so damage planted between
batches, a batch whose later checkpoint inherits what an earlier one wrote, and a batch
refused for one conflict behave on PostgreSQL as each checkpoint alone would.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from pg_cluster import fresh_url, pg_cluster  # noqa: F401 - fixtures

import cpstore
from cpstore.errors import ConflictError, IntegrityError
from cpstore.store import commit
from cpstore.store.model import CheckpointWrite
from cpstore.store.pg_open import parse_url


@pytest.fixture
def url(request: pytest.FixtureRequest) -> str:
    """A new, empty store on this process's test cluster (started once)."""
    request.getfixturevalue("pg_cluster")
    return fresh_url()


class _Refused(commit.TxnChecked):
    """A TxnChecked that fails the test if any apply path makes one."""

    def __init__(self) -> None:
        raise AssertionError("PostgreSQL's apply path made a TxnChecked")


def _sql(url: str, statement: str, params: tuple[Any, ...] = ()) -> None:
    """Run one statement on the store's database (damage behind the store's back)."""
    with psycopg.connect(parse_url(url).conninfo, autocommit=True) as conn:
        conn.execute(statement, params)


def _states(steps: int, tag: str = "") -> list[dict[str, str]]:
    """``steps`` states of 10 parts, one part new per step."""
    state = {f"p{i}": f"value {i} {tag}" * 30 for i in range(10)}
    out = []
    for step in range(steps):
        state[f"p{step % 10}"] = f"step {step} {tag}" * 30
        out.append(dict(state))
    return out


def test_a_pg_batch_inheriting_its_own_writes_lands_without_a_txn_record(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PostgreSQL batch (forks and shared parts among its checkpoints) lands whole and
    verifies while making a TxnChecked is an error: the PG path never keeps one."""
    monkeypatch.setattr(commit, "TxnChecked", _Refused)
    with cpstore.open(url, durability="batched", batch_size=1000) as store:
        rec, other = store.recorder("a"), store.recorder("b")
        ids = []
        for step, state in enumerate(_states(12)):
            ids.append(rec.checkpoint(step, state))
            ids.append(other.checkpoint(step, state))  # the same parts again
        store.flush()
        for cid, state in zip(ids, [s for s in _states(12) for _ in (0, 1)], strict=True):
            with store.read(cid) as view:
                assert view.state() == state
        assert store.verify().ok


def test_a_pg_object_deleted_between_batches_refuses_the_next_batch_inheriting_it(
    url: str,
) -> None:
    """An inherited part's row is deleted between two PostgreSQL batches: the next batch
    (every checkpoint inherits it) is refused whole with IntegrityError."""
    with cpstore.open(url, durability="batched", batch_size=1000) as store:
        rec = store.recorder("r")
        states = _states(15)
        head = ""
        for step, s in enumerate(states[:12]):
            head = rec.checkpoint(step, s)
        store.flush()
        with store.read(head) as view:
            victim = bytes(view.manifest.raw["state"]["parts"]["p5"])
        schema = parse_url(url).schema
        _sql(url, f'DELETE FROM "{schema}".objects WHERE k = %s', (victim,))
        for step, s in enumerate(states[12:], start=12):
            rec.checkpoint(step, s)
        with pytest.raises(IntegrityError):
            store.flush()
        assert store.ref("r") == head


def test_a_pg_batch_refused_for_one_conflict_lands_whole_applied_again_without_it(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PostgreSQL batch [a1, c conflicting, a2 inheriting a1] is refused whole
    (ConflictError, no ref moves); a1 and a2 queued again land and read back whole."""
    with cpstore.open(url, durability="batched", batch_size=1000) as store:
        c_first, c_late = store.recorder("c"), store.recorder("c")
        c_head = c_first.checkpoint(0, {"x": "c"})
        store.flush()
        ops: list[CheckpointWrite] = []
        monkeypatch.setattr(store.backend, "commit", ops.append)
        a = store.recorder("a")
        a.checkpoint(0, _states(1, "a")[0])
        c_late.checkpoint(0, {"x": "stale"})
        a2 = a.checkpoint(1, _states(2, "a")[1])
        monkeypatch.undo()
        monkeypatch.setattr(commit, "TxnChecked", _Refused)
        for op in ops:
            store.backend.commit(op)
        with pytest.raises(ConflictError):
            store.flush()
        assert store.ref("a") is None and store.ref("c") == c_head
        store.backend.commit(ops[0])
        store.backend.commit(ops[2])
        store.flush()
        assert store.ref("a") == a2
        with store.read(a2) as view:
            assert view.state() == _states(2, "a")[1]
        assert store.verify().ok
