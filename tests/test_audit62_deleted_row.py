"""audit62: a deleted decision-index row is not "no decision".

With the row of a QUARANTINE'd checkpoint deleted, the standing decision read as None
and ``check_resume`` (what ``Store.recorder`` asks before recording on) let a recorder
on with no permit; a new decision appended over the gap hid it from ``verify()``. The
first record naming the checkpoint (its audited-checkpoint row) is a covered decision
about it, so the row must exist: an ``AuditChainError`` now. Both backends.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from audit_damage import quarantined
from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures
from test_decision_support import stored_replay

from cpstore.decision.gates import check_resume
from cpstore.decision.table import Verdict
from cpstore.decision.validate import validate
from cpstore.errors import AuditChainError, GateError
from cpstore.store.audit import DECISION_PREFIX
from cpstore.store.audit_named import AUDITED_PREFIX
from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    with open_store(url) as st:
        yield st


def _quarantined(store: Store) -> str:
    cid = quarantined(store)
    with store.audit_view() as log:
        d = log.latest_decision(cid)
    assert d is not None and d.body["verdict"] == Verdict.QUARANTINE.name
    with pytest.raises(GateError):
        check_resume(store, cid, run_id="r", branch="main")
    return cid


def _delete(store: Store, key: bytes) -> None:
    meta = store.backend.dbs["meta"]
    store.backend.write_txn(lambda t: t.delete(key, db=meta))


def test_a_deleted_row_lets_no_recorder_on(store: Store) -> None:
    cid = _quarantined(store)
    _delete(store, DECISION_PREFIX + bytes.fromhex(cid))
    with pytest.raises(AuditChainError) as caught:
        check_resume(store, cid, run_id="r", branch="main")
    assert caught.value.where == f"meta/decision/{cid}"
    with store.audit_view() as log, pytest.raises(AuditChainError):
        log.latest_decision(cid)


def test_a_decision_is_not_appended_over_a_deleted_row(store: Store) -> None:
    cid = _quarantined(store)
    _delete(store, DECISION_PREFIX + bytes.fromhex(cid))
    n = len(list(store.audit_records()))
    with pytest.raises(AuditChainError):
        validate(cid, stored_replay(store, cid), store=store)
    assert len(list(store.audit_records())) == n
    wheres = [p.where for p in store.verify().problems]
    assert f"meta/decision/{cid}" in wheres


def test_an_undecided_checkpoint_still_reads_no_decision(store: Store) -> None:
    """No row and no record naming the checkpoint: None, as before."""
    rec = store.recorder("r")
    rec.observe(1, "clock", b"t", pinned_at=1.0)
    rec.token("rng", 1)
    cid = str(rec.checkpoint(1, b"state"))
    with store.audit_view() as log:
        assert log.latest_decision(cid) is None
    check_resume(store, cid, run_id="r", branch="main")


def test_both_rows_deleted_is_found_by_verify_only(store: Store) -> None:
    """The documented limit: with its audited-checkpoint row gone too nothing names the
    checkpoint's first decision for the lookup; verify() reports both rows."""
    cid = _quarantined(store)
    _delete(store, DECISION_PREFIX + bytes.fromhex(cid))
    _delete(store, AUDITED_PREFIX + bytes.fromhex(cid))
    check_resume(store, cid, run_id="r", branch="main")
    wheres = {p.where for p in store.verify().problems}
    assert {f"meta/decision/{cid}", f"meta/audited/{cid}"} <= wheres
