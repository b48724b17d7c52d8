"""The store enforces gates: recording on from a checkpoint its decision forbids needs a permit."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import lmdb
import pytest
from test_decision_support import stored_replay

from cpstore.decision.gates import AUDIT_RESUME, resume_gate, sign_off
from cpstore.decision.table import Verdict
from cpstore.decision.validate import validate
from cpstore.errors import GateError
from cpstore.native.canonical import decode_value, encode_value
from cpstore.run.model import ReplayMode
from cpstore.store.audit import DECISION_PREFIX, DECISIONS_INDEXED
from cpstore.store.facade import open as open_store

if TYPE_CHECKING:
    from cpstore import Decision, ResumePermit, Store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(tmp_path / "s") as s:
        yield s


def checkpoint(store: Store, run: str = "r", step: int = 1) -> str:
    rec = store.recorder(run)
    rec.observe(step, "clock", b"t", pinned_at=1.0)
    rec.token("rng", step)
    return str(rec.checkpoint(step, b"state"))


def rejected(store: Store, cid: str) -> Decision:
    d = validate(cid, stored_replay(store, cid, state_digest="other"), store=store)
    assert d.verdict is Verdict.REJECT and not d.releasable
    return d


def permit_for(store: Store, cid: str) -> ResumePermit:
    d = validate(cid, stored_replay(store, cid, mode=ReplayMode.BEST_EFFORT), store=store)
    assert d.verdict is Verdict.QUARANTINE
    so = sign_off(store, d, operator="op", reason="checked")
    return resume_gate(store, cid, d, sign_off=so)


def test_recording_on_after_a_reject_is_refused(store: Store) -> None:
    """REJECT about the branch head, then a recorder on that branch: GateError, nothing written."""
    cid = checkpoint(store)
    d = rejected(store, cid)
    with pytest.raises(GateError, match="permit") as err:
        store.recorder("r")
    assert err.value.got == d.id
    assert store.ref("r") == cid and len(list(store.history("r"))) == 1


def test_forking_from_a_rejected_checkpoint_is_refused(store: Store) -> None:
    """A new branch forked from the REJECTed checkpoint resumes from it too: GateError."""
    cid = checkpoint(store)
    rejected(store, cid)
    with pytest.raises(GateError):
        store.recorder("r", branch="retry", parent=cid)
    assert store.ref("r", "retry") is None


def test_a_valid_permit_allows_recording_on_once(store: Store) -> None:
    """QUARANTINE, sign-off, resume_gate: the permit opens one recorder and is recorded as used."""
    cid = checkpoint(store)
    permit = permit_for(store, cid)
    rec = store.recorder("r", permit=permit)
    new = rec.checkpoint(2, b"next")
    assert store.ref("r") == new
    (used,) = list(store.audit_records(kind=AUDIT_RESUME))
    assert used.body["permit"] == permit.audit_digest and used.body["checkpoint_id"] == cid


def test_a_used_permit_is_refused(store: Store) -> None:
    """The same permit a second time: GateError (a permit releases one resume)."""
    cid = checkpoint(store)
    permit = permit_for(store, cid)
    store.recorder("r", permit=permit)
    with pytest.raises(GateError, match="already used"):
        store.recorder("r", permit=permit)
    with pytest.raises(GateError, match="already used"):
        store.recorder("r", permit=permit.audit_digest)


def test_a_permit_for_another_checkpoint_is_refused(store: Store) -> None:
    """A permit given for run a's checkpoint does not open run b's rejected branch."""
    a = checkpoint(store, "a")
    b = checkpoint(store, "b")
    rejected(store, b)
    permit = permit_for(store, a)
    with pytest.raises(GateError, match="another checkpoint"):
        store.recorder("b", permit=permit)
    store.recorder("a", permit=permit)  # still unused: the refusal used nothing


def test_a_permit_superseded_by_a_newer_decision_is_refused(store: Store) -> None:
    """A REJECT recorded after the permit: the permit no longer opens the branch."""
    cid = checkpoint(store)
    permit = permit_for(store, cid)
    rejected(store, cid)
    with pytest.raises(GateError, match="supersedes"):
        store.recorder("r", permit=permit)


def test_a_forged_permit_is_refused(store: Store) -> None:
    """A permit object naming no audit record, or a non-gate record, opens nothing."""
    cid = checkpoint(store)
    rejected(store, cid)
    note = store.append_audit("note", {"checkpoint_id": cid})
    for forged in ("0" * 32, note.digest, "not hex"):
        with pytest.raises(GateError):
            store.recorder("r", permit=forged)


def test_an_accept_needs_no_permit(store: Store) -> None:
    """The head's standing decision is ACCEPT: a recorder continues freely."""
    cid = checkpoint(store)
    assert validate(cid, stored_replay(store, cid), store=store).verdict is Verdict.ACCEPT
    store.recorder("r").checkpoint(2, b"next")


def test_a_branch_with_no_decision_needs_no_permit(store: Store) -> None:
    """No decision about the head: a recorder continues freely; a new run never needs one."""
    checkpoint(store)
    store.recorder("r").checkpoint(2, b"next")
    store.recorder("fresh").checkpoint(0, b"s")


def test_only_the_latest_decision_stands(store: Store) -> None:
    """REJECT then ACCEPT about the same head: the ACCEPT stands, no permit needed."""
    cid = checkpoint(store)
    rejected(store, cid)
    validate(cid, stored_replay(store, cid), store=store)
    store.recorder("r").checkpoint(2, b"next")


def _drop_decision_index(path: Path) -> None:
    env = lmdb.open(str(path), max_dbs=16)
    meta = env.open_db(b"meta")
    with env.begin(write=True, db=meta) as txn:
        keys = [bytes(k) for k, _ in txn.cursor() if bytes(k).startswith(DECISION_PREFIX)]
        for k in [*keys, DECISIONS_INDEXED]:
            txn.delete(k)
    env.close()


def test_a_store_without_the_decision_index_is_still_enforced(tmp_path: Path) -> None:
    """An older store (no decision index): the log tail is read, and the next append indexes it."""
    path = tmp_path / "s"
    with open_store(path) as st:
        cid = checkpoint(st)
        d = rejected(st, cid)
    _drop_decision_index(path)
    with open_store(path) as st:
        with st.audit_view() as log:
            latest = log.latest_decision(cid)
            assert latest is not None and latest.body["decision_id"] == d.id
        with pytest.raises(GateError):
            st.recorder("r")
        st.append_audit("note", {})
        report = st.verify()
        assert report.ok, report.problems
        with pytest.raises(GateError):
            st.recorder("r")


def test_verify_finds_a_decision_index_pointing_at_an_older_decision(tmp_path: Path) -> None:
    """An index entry rewound to an older ACCEPT is a named verify problem."""
    path = tmp_path / "s"
    with open_store(path) as st:
        cid = checkpoint(st)
        validate(cid, stored_replay(st, cid), store=st)
        rejected(st, cid)
    env = lmdb.open(str(path), max_dbs=16)
    meta = env.open_db(b"meta")
    with env.begin(write=True, db=meta) as txn:
        key = DECISION_PREFIX + bytes.fromhex(cid)
        txn.put(key, encode_value(decode_value(txn.get(key)) - 1))
    env.close()
    with open_store(path) as st:
        report = st.verify()
        assert not report.ok
        assert any("decision index" in p.what for p in report.problems)
