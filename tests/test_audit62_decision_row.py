"""audit62: a damaged decision-index row (meta ``decision/<id>``) is refused by every
reader and never overwritten by a new decision.

``validate(record=True)`` (and ``cpstore validate --record``) once appended its decision
over a damaged row: the row was overwritten unread, nothing was reported and ``verify()``
found nothing afterwards. A row decoding to a negative int made every latest-decision
lookup (the gates, ``check_resume``) raise a bare ``struct.error``. Both backends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures
from test_decision_support import stored_replay

from cpstore.cli import main
from cpstore.cli.exit_codes import EXIT_INTEGRITY
from cpstore.decision.gates import certify_rollback, check_resume, resume_gate
from cpstore.decision.validate import validate
from cpstore.errors import AuditChainError
from cpstore.native.canonical import encode_value
from cpstore.store.audit import DECISION_PREFIX
from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    with open_store(url) as st:
        yield st


def _checkpoint(store: Store, run: str) -> str:
    rec = store.recorder(run)
    rec.observe(1, "clock", b"t", pinned_at=1.0)
    rec.token("rng", 1)
    return str(rec.checkpoint(1, b"state"))


def _row(store: Store, cid: str) -> bytes:
    with store.backend.read_txn() as txn:
        raw = txn.get(DECISION_PREFIX + bytes.fromhex(cid), db=store.backend.dbs["meta"])
        assert raw is not None
        return bytes(raw)


def _put_row(store: Store, cid: str, value: bytes) -> None:
    meta = store.backend.dbs["meta"]
    store.backend.write_txn(lambda t: t.put(DECISION_PREFIX + bytes.fromhex(cid), value, db=meta))


def _count(store: Store) -> int:
    return len(list(store.audit_records()))


def _problems(store: Store) -> list[tuple[str, str]]:
    return [(p.what, p.where) for p in store.verify().problems]


#: Damage to a row naming record ``i`` of the log (``n`` records): each must be refused.
DAMAGE: dict[str, Callable[[bytes, int, int], bytes]] = {
    "flipped to -1": lambda raw, i, n: b"\xff",
    "flipped past the log": lambda raw, i, n: encode_value(n + 5),
    "truncated": lambda raw, i, n: b"",
    "not canonical": lambda raw, i, n: b"\xc1",
    "a str": lambda raw, i, n: encode_value("0"),
    "nil": lambda raw, i, n: encode_value(None),
    "names another checkpoint's decision": lambda raw, i, n: encode_value(0),
}


def _two_decided(store: Store) -> tuple[str, str, int]:
    """Checkpoint ``other`` decided at record 0, ``cid`` decided at record 1 (ACCEPTs)."""
    other = _checkpoint(store, "o")
    validate(other, stored_replay(store, other), store=store)
    cid = _checkpoint(store, "r")
    validate(cid, stored_replay(store, cid), store=store)
    assert _row(store, cid) == encode_value(1)
    return other, cid, _count(store)


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_record_over_a_damaged_row_is_refused(store: Store, damage: str) -> None:
    _, cid, n = _two_decided(store)
    _put_row(store, cid, DAMAGE[damage](_row(store, cid), 1, n))
    with pytest.raises(AuditChainError) as caught:
        validate(cid, stored_replay(store, cid), store=store, record=True)
    assert caught.value.where == f"meta/decision/{cid}"
    assert _count(store) == n  # nothing appended
    # The damage is still there for verify to report (it was erased before).
    assert ("decision index disagrees with the audit log", f"meta/decision/{cid}") in (
        _problems(store)
    )


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_every_latest_decision_reader_refuses_a_damaged_row(store: Store, damage: str) -> None:
    _, cid, n = _two_decided(store)
    with store.audit_view() as log:
        latest = log.latest_decision(cid)
        assert latest is not None
        decision_id = latest.body["decision_id"]
    _put_row(store, cid, DAMAGE[damage](_row(store, cid), 1, n))
    calls: list[Callable[[], Any]] = [
        lambda: resume_gate(store, cid, decision_id),
        lambda: certify_rollback(store, cid, decision_id),
        lambda: check_resume(store, cid, run_id="r", branch="main"),
    ]
    for call in calls:
        with pytest.raises(AuditChainError):
            call()
    with store.audit_view() as log, pytest.raises(AuditChainError):
        log.latest_decision(cid)
    assert _count(store) == n


def test_cli_record_over_a_damaged_row_is_an_integrity_error(url: str) -> None:
    with open_store(url) as store:
        _, cid, n = _two_decided(store)
        _put_row(store, cid, b"\xff")
    code = main(["validate", cid, cid, "--store", url, "--record"])
    assert code == EXIT_INTEGRITY
    with open_store(url) as store:
        assert _count(store) == n


def test_record_over_a_sound_row_still_lands(store: Store) -> None:
    """The check refuses damage only: a second decision supersedes the first."""
    _, cid, n = _two_decided(store)
    second = validate(cid, stored_replay(store, cid), store=store, record=True)
    with store.audit_view() as log:
        latest = log.latest_decision(cid)
    assert latest is not None and latest.digest == second.audit_digest
    assert latest.index == n
    assert _problems(store) == []
