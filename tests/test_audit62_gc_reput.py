"""audit62: a decided checkpoint swept by gc and recorded again.

A checkpoint's id is the digest of its content, so recording the same content again
after a sweep gives the same id, and the decisions the log holds about it stand: they
were about those very bytes (the sweep listed it in ``GcReport.decided`` and its ``gc``
record). A REJECT still stops recording on from it; a new validation supersedes it as
any later decision does; a checkpoint of other content has no decision. Both backends.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures
from test_decision_support import stored_replay

from cpstore.decision.gates import check_resume
from cpstore.decision.validate import validate
from cpstore.errors import GateError
from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    with open_store(url) as st:
        yield st


def _checkpoint(store: Store, state: bytes = b"state") -> str:
    rec = store.recorder("r")
    rec.observe(1, "clock", b"t", pinned_at=1.0)
    rec.token("rng", 1)
    return str(rec.checkpoint(1, state))


def _standing(store: Store, cid: str) -> object:
    with store.audit_view() as log:
        rec = log.latest_decision(cid)
        return None if rec is None else rec.body["decision_id"]


def test_a_reput_checkpoint_keeps_its_decisions(store: Store) -> None:
    cid = _checkpoint(store)
    rejected = validate(cid, stored_replay(store, cid, state_digest="x"), store=store)
    assert rejected.verdict.name == "REJECT"
    report = store.gc(delete_run="r")
    assert report.checkpoints == (cid,) and report.decided == (cid,)
    assert _checkpoint(store) == cid  # the same content: the same id
    assert _standing(store, cid) == rejected.id
    with pytest.raises(GateError):
        check_resume(store, cid, run_id="r", branch="main")
    accepted = validate(cid, stored_replay(store, cid), store=store)
    assert _standing(store, cid) == accepted.id
    check_resume(store, cid, run_id="r", branch="main")
    assert store.verify().ok


def test_other_content_after_a_sweep_has_no_decision(store: Store) -> None:
    cid = _checkpoint(store)
    validate(cid, stored_replay(store, cid, state_digest="x"), store=store)
    store.gc(delete_run="r")
    other = _checkpoint(store, b"other state")
    assert other != cid
    assert _standing(store, other) is None
    check_resume(store, other, run_id="r", branch="main")
