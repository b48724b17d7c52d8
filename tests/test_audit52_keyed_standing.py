"""audit52: on a keyed audit log, the standing decision that lets a recorder continue
without a permit is trusted only once its MAC verifies.

``check_resume`` read the checkpoint's standing decision and, when it was an ACCEPT,
let the recorder continue, without checking that decision record's MAC: an ACCEPT
written into the data file without the key (correct digest chain, no MAC) after a
QUARANTINE made the QUARANTINEd checkpoint resumable with no sign-off and no permit,
where docs/security.md says a forged record "never releases a gate"."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures
from test_decision_support import stored_replay
from test_keyed_audit import KEY, _forge, _quarantined

import cpstore
import cpstore.store.audit as audit_module
from cpstore import AuditChainError, GateError


def _forge_accept(path: Path, cid: str) -> str:
    """An ACCEPT decision about ``cid`` written straight into LMDB, without the key."""
    return _forge(
        path,
        "decision",
        {
            "decision_id": "f" * 32,
            "verdict": "ACCEPT",
            "findings": [],
            "mode": "strict",
            "recorded": {"checkpoint_id": cid, "run_id": "run", "branch": "main"},
        },
    )


def test_a_forged_accept_does_not_let_a_recorder_continue_without_a_permit(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s"
    with cpstore.open(path, audit_key=KEY) as store:
        cid, _ = _quarantined(store)
        with pytest.raises(GateError):
            store.recorder("run")  # the QUARANTINE stands: a permit is needed
    _forge_accept(path, cid)
    with cpstore.open(path, audit_key=KEY) as store:
        with pytest.raises(AuditChainError):
            store.recorder("run")
        with pytest.raises(AuditChainError):
            store.recorder("run", branch="other", parent=cid)
        assert store.ref("run") == cid
        assert store.ref("run", "other") is None


def test_without_the_key_a_keyed_logs_accept_is_not_trusted_either(tmp_path: Path) -> None:
    """A handle without the key cannot check any MAC: the standing decision it would rely
    on to record on without a permit is refused as the gates refuse any record."""
    path = tmp_path / "s"
    with cpstore.open(path, audit_key=KEY) as store:
        cid, _ = _quarantined(store)
    _forge_accept(path, cid)
    with cpstore.open(path) as store, pytest.raises(AuditChainError):
        store.recorder("run")


def test_a_true_accept_on_a_keyed_log_lets_the_recorder_continue(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with cpstore.open(path, audit_key=KEY) as store:
        rec = store.recorder("run")
        rec.token("rng", 1)
        cid = rec.checkpoint(1, {"a": 1})
        rec.close()
        replay = stored_replay(store, cid)
        assert cpstore.validate(cid, replay, store=store).verdict is cpstore.Verdict.ACCEPT
        store.recorder("run").close()


def test_a_record_with_a_wrong_mac_stops_the_recorder_on_both_backends(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same on PostgreSQL: the forged ACCEPT is appended through the API with a MAC
    made under another key (what a writer of the tables without the key can do at best)."""
    real = audit_module.mac_append  # type: ignore[attr-defined]

    def wrong_key(txn: Any, dbs: Any, _key: bytes, index: int, raw: bytes) -> None:
        real(txn, dbs, b"x" * 32, index, raw)

    with cpstore.open(url, audit_key=KEY) as store:
        cid, _ = _quarantined(store)
        body = {
            "decision_id": "f" * 32,
            "verdict": "ACCEPT",
            "findings": [],
            "mode": "strict",
            "recorded": {"checkpoint_id": cid, "run_id": "run", "branch": "main"},
        }
        with monkeypatch.context() as m:
            m.setattr(audit_module, "mac_append", wrong_key)
            store.append_audit("decision", body)
        with pytest.raises(AuditChainError):
            store.recorder("run")
        assert store.ref("run") == cid
