"""An append never vouches for an altered last record (found in session 26's review).

A record's successor vouches for it by its ``prev``, taken from the digest of the last
record's bytes as stored. When the last record was altered in place (a byte flipped that
still decodes), the head's digest and the digest index still name the original, so
every gate refuses it (audit62) and ``verify()`` reports the head. But the next append
of any kind took ``prev`` from the altered bytes and rewrote the head: the chain then
vouched for the altered record, the gates trusted it again, and only the digest index
still told. Now an append whose last record neither the digest index nor the head
vouches for is ``AuditChainError``, nothing appended. A damaged head alone (the
record sound, its digest indexed) still lets appends through and is rewritten, as
before. Both backends.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import pytest
from audit_damage import flip_time
from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures
from test_audit62_altered_record import _checkpoint
from test_decision_support import stored_replay

from cpstore.decision.gates import check_resume, resume_gate
from cpstore.decision.validate import validate
from cpstore.errors import AuditChainError
from cpstore.store.audit import HEAD_KEY
from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store

_INDEX = struct.Struct(">Q")


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    with open_store(url) as st:
        yield st


def test_an_append_after_an_altered_last_decision_is_refused(store: Store) -> None:
    """The altered decision is the last record: neither a plain append, nor a decision
    about another checkpoint, nor one about the same checkpoint lands; the gates still
    refuse the altered one and verify still reports it."""
    cid = _checkpoint(store, "r")
    other = _checkpoint(store, "o")
    d = validate(cid, stored_replay(store, cid), store=store)
    n = len(list(store.audit_records()))
    flip_time(store, n - 1)
    with pytest.raises(AuditChainError) as caught:
        store.append_audit("note", {"what": "after the damage"})
    assert caught.value.where == f"audit/{n - 1}"
    with pytest.raises(AuditChainError):
        validate(other, stored_replay(store, other), store=store)
    with pytest.raises(AuditChainError):
        validate(cid, stored_replay(store, cid), store=store)
    assert len(list(store.audit_records())) == n  # nothing appended
    with pytest.raises(AuditChainError):
        resume_gate(store, cid, d.id)
    with pytest.raises(AuditChainError):
        check_resume(store, cid, run_id="r", branch="main")
    assert not store.verify().ok


def test_a_damaged_head_alone_does_not_stop_appends(store: Store) -> None:
    """The last record sound (its digest indexed), only ``meta/audit_head`` damaged:
    the append goes on and rewrites the head, and the store verifies clean again."""
    cid = _checkpoint(store, "r")
    validate(cid, stored_replay(store, cid), store=store)
    meta = store.backend.dbs["meta"]
    store.backend.write_txn(lambda t: t.put(HEAD_KEY, b"\x92\x01\xc4\x00", db=meta))
    assert not store.verify().ok
    store.append_audit("note", {"what": "after the head's damage"})
    assert store.verify().ok
