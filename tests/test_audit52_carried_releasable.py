"""audit52: a carried decision never makes a destination's standing decision releasable.

push/pull carried the source's standing decision over the destination's when its verdict
was at least as strict (``_severity(standing) <= _severity(carried)``), by verdict alone.
A REJECT has releasable findings (OBSERVATION_MISMATCH) and non-releasable ones
(STATE_MISMATCH, ...): a destination whose own REJECT no sign-off can release (recording
on from the checkpoint frozen there) took the source's releasable REJECT of the same
checkpoint as its standing decision, and then an operator's sign-off, ``resume_gate`` and
the permit let the runtime record on from a checkpoint the destination had refused for
good. The rule: findings no sign-off can release stay refused."""

from __future__ import annotations

import multiprocessing
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from pg_cluster import backend_url, pg_cluster, pg_url  # noqa: F401 - fixtures
from test_decision_support import stored_replay
from test_transfer_gates import _checkpoint, _rejected, _standing, _where

import cpstore
from cpstore.decision.gates import resume_gate, sign_off
from cpstore.decision.table import FindingCode, Verdict
from cpstore.decision.validate import validate
from cpstore.errors import GateError, SignOffError
from cpstore.store.transfer import transfer

if TYPE_CHECKING:
    from cpstore import Decision, Store

PAIRS = [("lmdb", "lmdb"), ("lmdb", "pg"), ("pg", "lmdb")]


def _releasable_reject(store: Store, cid: str) -> Decision:
    """A REJECT whose only finding is OBSERVATION_MISMATCH: an operator may release it."""
    faithful = stored_replay(store, cid)
    diverged = tuple(replace(o, payload_digest="0" * 32) for o in faithful.observations)
    d = validate(cid, replace(faithful, observations=diverged), store=store)
    assert d.verdict is Verdict.REJECT and d.releasable
    assert {f.code for f in d.findings} == {FindingCode.OBSERVATION_MISMATCH}
    return d


@pytest.mark.parametrize(("src_kind", "dst_kind"), PAIRS)
def test_a_carried_releasable_reject_does_not_supersede_a_non_releasable_one(
    src_kind: str,
    dst_kind: str,
    tmp_path: Path,
    pg_url: str,  # noqa: F811
) -> None:
    src_at = _where(src_kind, tmp_path, "src", pg_url)
    dst_at = _where(dst_kind, tmp_path, "dst", pg_url)
    with cpstore.open(src_at) as src, cpstore.open(dst_at) as dst:
        cid = _checkpoint(src)
        transfer(src.backend, dst.backend)
        own = _rejected(dst, cid)  # STATE_MISMATCH: no sign-off releases it
        assert not own.releasable
        _releasable_reject(src, cid)
        transfer(src.backend, dst.backend)
        assert _standing(dst, cid) == own.id
        with pytest.raises(SignOffError):
            sign_off(dst, own.id, operator="mallory", reason="a releasable one came")
        with pytest.raises(GateError):
            dst.recorder("r")
        assert dst.verify().ok


@pytest.mark.parametrize(("src_kind", "dst_kind"), PAIRS[:1])
def test_a_carried_non_releasable_reject_still_supersedes_a_releasable_one(
    src_kind: str,
    dst_kind: str,
    tmp_path: Path,
    pg_url: str,  # noqa: F811
) -> None:
    """The other way round the carried REJECT is stricter: it stands (a permit given for the
    destination's releasable REJECT is refused after it)."""
    src_at = _where(src_kind, tmp_path, "src", pg_url)
    dst_at = _where(dst_kind, tmp_path, "dst", pg_url)
    with cpstore.open(src_at) as src, cpstore.open(dst_at) as dst:
        cid = _checkpoint(src)
        transfer(src.backend, dst.backend)
        mild = _releasable_reject(dst, cid)
        so = sign_off(dst, mild.id, operator="alice", reason="seen")
        permit = resume_gate(dst, cid, mild.id, sign_off=so)
        strict = _rejected(src, cid)
        assert transfer(src.backend, dst.backend).decisions == 1
        assert _standing(dst, cid) == strict.id
        with pytest.raises(GateError, match="supersedes"):
            dst.recorder("r", permit=permit)
        assert dst.verify().ok


ROUNDS = 16


def _local_rejecter(dst_at: str, barrier: Any, cids: list[str]) -> int:
    """Each round: wait, then record the destination's own non-releasable REJECT."""
    with cpstore.open(dst_at) as dst:
        for cid in cids:
            barrier.wait()
            _rejected(dst, cid)
    return len(cids)


def _pusher(src_at: str, barrier: Any, runs: list[str], dst_at: str) -> int:
    """Each round: wait, then push the round's run (its releasable REJECT goes with it)."""
    with cpstore.open(src_at) as src, cpstore.open(dst_at) as dst:
        for i, run in enumerate(runs):
            barrier.wait()
            if i % 2:  # let the local REJECT go first in every other round: both orders
                time.sleep(0.05)
            transfer(src.backend, dst.backend, run_id=run)
    return len(runs)


def test_a_push_racing_the_destinations_own_reject_never_leaves_it_releasable(
    url: str,
    tmp_path: Path,
) -> None:
    """Two processes each round: one records the destination's non-releasable REJECT, one
    pushes the source's releasable REJECT of the same checkpoint. Whichever lands first,
    nobody can sign the checkpoint's standing decision off afterwards (before the fix the
    rounds the local REJECT won ended releasable), on LMDB and PostgreSQL."""
    src_at = str(tmp_path / "src")
    runs, cids = [f"r{i}" for i in range(ROUNDS)], []
    with cpstore.open(src_at) as src, cpstore.open(url) as dst:
        for run in runs:
            cids.append(_checkpoint(src, run))
        transfer(src.backend, dst.backend)
        for cid in cids:
            _releasable_reject(src, cid)
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    procs = [
        ctx.Process(target=_local_rejecter, args=(url, barrier, cids)),
        ctx.Process(target=_pusher, args=(src_at, barrier, runs, url)),
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    with cpstore.open(url) as dst:
        for cid in cids:
            standing = _standing(dst, cid)
            assert isinstance(standing, str)
            with pytest.raises(SignOffError, match="no sign-off can release"):
                sign_off(dst, standing, operator="mallory", reason="the push won")
        assert dst.verify().ok
