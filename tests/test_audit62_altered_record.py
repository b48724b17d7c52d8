"""audit62: a gate trusts an audit record only if the chain vouches for it.

A byte flipped inside a record that still decodes (here: its ``time``) changes its
digest, so the next record's ``prev`` (or, for the last record, the head's digest) no
longer names it. The gates checked only that the record chained to its predecessor and
let such a record through: a resume permit, a rollback certificate and a recorder were
granted on an altered decision. Now each is an ``AuditChainError``. Both backends.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import pytest
from audit_damage import flip_time
from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures
from test_decision_support import stored_replay

from cpstore.decision.gates import certify_rollback, check_resume, resume_gate, sign_off
from cpstore.decision.validate import validate
from cpstore.errors import AuditChainError
from cpstore.run.model import ReplayMode
from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store

_INDEX = struct.Struct(">Q")


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    with open_store(url) as st:
        yield st


def _checkpoint(store: Store, run: str) -> str:
    rec = store.recorder(run)
    rec.observe(1, "clock", b"t", pinned_at=1.0)
    rec.token("rng", 1)
    return str(rec.checkpoint(1, b"state"))


@pytest.mark.parametrize("last", [False, True], ids=["middle", "last"])
def test_gates_refuse_an_altered_decision(store: Store, last: bool) -> None:
    cid = _checkpoint(store, "r")
    d = validate(cid, stored_replay(store, cid), store=store)
    if not last:
        other = _checkpoint(store, "o")
        validate(other, stored_replay(store, other), store=store)
    n = len(list(store.audit_records()))
    flip_time(store, 0)
    with pytest.raises(AuditChainError):
        resume_gate(store, cid, d.id)
    with pytest.raises(AuditChainError):
        certify_rollback(store, cid, d.id)
    with pytest.raises(AuditChainError):
        check_resume(store, cid, run_id="r", branch="main")
    with store.audit_view() as log, pytest.raises(AuditChainError):
        log.latest_decision(cid)  # every reader of the standing decision (transfer's too)
    assert len(list(store.audit_records())) == n  # nothing granted, nothing appended
    assert not store.verify().ok


def test_an_altered_sign_off_releases_nothing(store: Store) -> None:
    cid = _checkpoint(store, "r")
    d = validate(cid, stored_replay(store, cid, mode=ReplayMode.BEST_EFFORT), store=store)
    so = sign_off(store, d, operator="op", reason="drill")
    other = _checkpoint(store, "o")
    validate(other, stored_replay(store, other), store=store)  # a record after the sign-off
    with store.audit_view() as log:
        index = next(r.index for r in log.audit_records(kind="signoff"))
    flip_time(store, index)
    with pytest.raises(AuditChainError):
        resume_gate(store, cid, d.id, sign_off=so.audit_digest)
