"""audit31: a branch whose replay was unverified is never rolled back, whatever else failed.

``certify_rollback`` refuses a branch once any decision about it was QUARANTINE
(seed 002: an unverified branch is quarantined, never rolled back). A decision
that found the same unverified conditions (a BEST_EFFORT replay, a live token,
an unrecorded effect...) *and* a proven divergence is a REJECT, and the branch
index counted only QUARANTINE verdicts: so adding a divergence to a quarantined
replay let a later ACCEPT certify the rollback — the worse decision was the
milder one for the branch. Pinned on LMDB and PostgreSQL.
"""

from __future__ import annotations

from typing import Any

import pytest
from pg_cluster import backend_store  # noqa: F401 - fixture
from test_decision_support import stored_replay

from cpstore.decision.gates import certify_rollback
from cpstore.decision.table import FindingCode, Verdict
from cpstore.decision.validate import validate
from cpstore.errors import GateError
from cpstore.native.canonical import encode_value
from cpstore.run.model import ReplayMode
from cpstore.store.audit_gates import GATES_INDEXED
from cpstore.store.audit_permits import branch_key
from cpstore.store.facade import Store


def _checkpoint(store: Store, run: str) -> str:
    rec = store.recorder(run, branch="main")
    rec.observe(1, "clock", b"t", pinned_at=1.0)
    rec.token("rng", 1)
    cid = rec.checkpoint(1, b"state")
    rec.close()
    return cid


@pytest.mark.parametrize("divergence", [False, True], ids=["quarantine", "reject"])
def test_an_unverified_replay_bars_the_rollback_even_when_it_also_diverged(
    store: Store, divergence: bool
) -> None:
    cid = _checkpoint(store, f"r-{divergence}")
    changes: dict[str, object] = {"mode": ReplayMode.BEST_EFFORT}
    if divergence:
        changes["state_digest"] = "another state"
    first = validate(cid, stored_replay(store, cid, **changes), store=store)
    assert FindingCode.BEST_EFFORT in {f.code for f in first.findings}
    assert first.verdict is (Verdict.REJECT if divergence else Verdict.QUARANTINE)
    later = validate(cid, stored_replay(store, cid), store=store)
    assert later.verdict is Verdict.ACCEPT
    with pytest.raises(GateError, match="quarantined"):
        certify_rollback(store, cid, later)  # the REJECT case was certified
    assert store.verify().ok


def test_a_plain_reject_does_not_bar_a_later_rollback(store: Store) -> None:
    # A replay that was verified (strict, pinned, sealed) but diverged is a failed
    # replay, not an unverified branch (seed 002): a later faithful replay certifies.
    cid = _checkpoint(store, "plain")
    first = validate(cid, stored_replay(store, cid, state_digest="x"), store=store)
    assert {f.code for f in first.findings} == {FindingCode.STATE_MISMATCH}
    later = validate(cid, stored_replay(store, cid), store=store)
    cert = certify_rollback(store, cid, later)
    assert (cert.run_id, cert.branch) == ("plain", "main")


def test_a_version_2_index_is_not_trusted_for_the_new_rule(store: Store) -> None:
    # A store whose gate index was built by a release that counted only QUARANTINE
    # verdicts: its row for the branch is nil and its count row says version 2. The
    # index covers nothing of this version, so the gate reads the log (and the next
    # append rebuilds the rows): the unverified REJECT still bars the rollback.
    cid = _checkpoint(store, "old-index")
    changes: dict[str, object] = {"mode": ReplayMode.BEST_EFFORT, "state_digest": "other"}
    first = validate(cid, stored_replay(store, cid, **changes), store=store)
    assert first.verdict is Verdict.REJECT
    meta = store.backend.dbs["meta"]
    key = branch_key("old-index", "main")
    assert key is not None
    count = len(list(store.audit_records()))

    def as_v2(txn: Any) -> None:
        txn.put(key, encode_value(None), db=meta)
        txn.put(GATES_INDEXED, encode_value([2, count]), db=meta)

    store.backend.write_txn(as_v2)
    later = validate(cid, stored_replay(store, cid), store=store)
    with pytest.raises(GateError, match="quarantined"):
        certify_rollback(store, cid, later)
    assert store.verify().ok
