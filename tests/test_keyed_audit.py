"""Keyed audit: MACs make the audit log and sign-offs tamper-evident against a data-file writer."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import lmdb
import pytest

import cpstore
from cpstore import AuditChainError, StoreError, Verdict

KEY = b"k" * 32
_INDEX = struct.Struct(">Q")


def _quarantined(store: cpstore.Store) -> tuple[str, cpstore.Decision]:
    """A checkpoint and a QUARANTINE decision about it (releasable by sign-off)."""
    rec = store.recorder("run")
    rec.token("rng", 1)
    cid = rec.checkpoint(1, {"a": 1})
    with store.read(cid) as cp:
        replay = cpstore.Run(
            "run",
            1,
            cp.manifest.state_digest,
            tokens=cpstore.PackedTokens(bytes(cp.tokens())),
            transcript_digest=cp.manifest.transcript_digest,
            mode=cpstore.ReplayMode.BEST_EFFORT,
        )
    decision = cpstore.validate(cid, replay, store=store)
    assert decision.verdict is Verdict.QUARANTINE and decision.releasable
    return cid, decision


def _forge(path: Path, kind: str, body: dict[str, Any]) -> str:
    """Append a well-formed, correctly chained record straight into LMDB (no key)."""
    env = lmdb.open(str(path), max_dbs=16)
    audit, index_db, meta = (env.open_db(n) for n in (b"audit", b"audit_index", b"meta"))
    with env.begin(write=True) as txn:
        with txn.cursor(db=audit) as cur:
            assert cur.last()
            index = _INDEX.unpack(cur.key())[0] + 1
            prev = cpstore.native.digest(cur.value())
        rec = cpstore.native.decode_value(txn.get(_INDEX.pack(index - 1), db=audit))
        raw = cpstore.native.encode_value(
            {"index": index, "prev": prev, "kind": kind, "body": body, "time": rec["time"] + 1}
        )
        key = cpstore.native.digest(raw)
        txn.put(_INDEX.pack(index), raw, db=audit)
        txn.put(key, _INDEX.pack(index), db=index_db)
        txn.put(b"audit_head", cpstore.native.encode_value([index + 1, key]), db=meta)
    env.close()
    return key.hex()


def test_keyed_store_verifies_and_its_gates_work(tmp_path: Path) -> None:
    """With the key, decisions, sign-offs and gates work and verify reports nothing."""
    with cpstore.open(tmp_path / "s", audit_key=KEY) as store:
        assert store.audit_keyed
        cid, decision = _quarantined(store)
        signed = cpstore.sign_off(store, decision, operator="op", reason="checked")
        cpstore.resume_gate(store, cid, decision, sign_off=signed)
        assert store.verify().ok


def test_a_forged_sign_off_never_releases_a_gate_and_verify_names_it(tmp_path: Path) -> None:
    """A sign-off written into the data file without the key fails its MAC."""
    path = tmp_path / "s"
    with cpstore.open(path, audit_key=KEY) as store:
        cid, decision = _quarantined(store)
        audit_digest = decision.audit_digest
    forged = _forge(
        path,
        "signoff",
        {
            "decision_id": decision.id,
            "decision_audit": audit_digest,
            "checkpoint_id": cid,
            "operator": "mallory",
            "reason": "trust me",
        },
    )
    with cpstore.open(path, audit_key=KEY) as store:
        with pytest.raises(AuditChainError):
            cpstore.resume_gate(store, cid, decision, sign_off=forged)
        report = store.verify()
    assert not report.ok
    assert any("MAC" in p.what for p in report.problems)
    with cpstore.open(path) as store:  # without the key the plain chain cannot tell
        plain = store.verify()
    assert plain.ok


def test_an_altered_decision_record_fails_its_mac(tmp_path: Path) -> None:
    """Rewriting a recorded decision (and its digest chain) is caught by the MAC walk."""
    path = tmp_path / "s"
    with cpstore.open(path, audit_key=KEY) as store:
        _quarantined(store)
    env = lmdb.open(str(path), max_dbs=16)
    audit, index_db, meta = (env.open_db(n) for n in (b"audit", b"audit_index", b"meta"))
    with env.begin(write=True) as txn:
        rec = cpstore.native.decode_value(txn.get(_INDEX.pack(0), db=audit))
        rec["body"]["verdict"] = "ACCEPT"
        raw = cpstore.native.encode_value(rec)
        txn.put(_INDEX.pack(0), raw, db=audit)
        txn.put(cpstore.native.digest(raw), _INDEX.pack(0), db=index_db)
        head = cpstore.native.encode_value([1, cpstore.native.digest(raw)])
        txn.put(b"audit_head", head, db=meta)
    env.close()
    with cpstore.open(path, audit_key=KEY) as store:
        problems = store.verify().problems
    assert [p.where for p in problems if "MAC" in p.what] == ["audit/0"]


def test_a_wrong_key_is_refused_on_open(tmp_path: Path) -> None:
    """Opening a keyed store with another key is a clear error, not a pile of MAC failures."""
    with cpstore.open(tmp_path / "s", audit_key=KEY) as store:
        store.append_audit("note", {"n": 1})
    with pytest.raises(StoreError, match="wrong audit key"):
        cpstore.open(tmp_path / "s", audit_key=b"x" * 32)


def test_a_key_cannot_be_added_to_a_log_with_unkeyed_records(tmp_path: Path) -> None:
    """Records written before the key could already be forged: keying them later is refused."""
    with cpstore.open(tmp_path / "s") as store:
        store.append_audit("note", {"n": 1})
    with pytest.raises(StoreError, match="unkeyed records"):
        cpstore.open(tmp_path / "s", audit_key=KEY)


def test_without_the_key_a_keyed_log_is_readable_but_closed_to_appends(tmp_path: Path) -> None:
    """A handle without the key reads and verifies the chain but cannot append or gate."""
    with cpstore.open(tmp_path / "s", audit_key=KEY) as store:
        _quarantined(store)
    with cpstore.open(tmp_path / "s") as store:
        assert store.audit_keyed
        assert len(list(store.audit_records())) == 1
        with pytest.raises(StoreError, match="keyed"):
            store.append_audit("note", {"n": 2})
        with pytest.raises(AuditChainError):
            store.check_audit_mac(0)


@pytest.mark.parametrize("bad", [b"short", "a str key of enough length!", b"x" * 65])
def test_bad_keys_are_invalid_input(tmp_path: Path, bad: Any) -> None:
    """Keys must be 16 to 64 bytes."""
    with pytest.raises(cpstore.InvalidInputError):
        cpstore.open(tmp_path / "s", audit_key=bad)
