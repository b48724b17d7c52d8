"""verify(): every object re-hashed, every reference resolved, the audit chain checked."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from stored import raw_delete, raw_get, raw_put

from cpstore.errors import AuditChainError, IntegrityError, InvalidInputError, NotFoundError
from cpstore.native.binding import digest
from cpstore.native.canonical import encode_value
from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store
from cpstore.store.model import pack_checkpoint_value, unpack_checkpoint_value
from cpstore.store.refs import SET, write_ref


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(tmp_path / "s") as st:
        yield st


def _raw(store: Store, db: str, key: bytes, value: bytes | None) -> None:
    with store.backend.env.env.begin(write=True) as txn:
        if value is None:
            raw_delete(txn, store.backend.dbs, db, key)
        else:
            raw_put(txn, store.backend.dbs, db, key, value)


def _sample(store: Store) -> str:
    rec = store.recorder("run")
    rec.observe(1, "cfg", b"pinned payload bytes", pinned_at=1.0)
    rec.tokens([("rng", i) for i in range(10)])
    rec.effect("sink", b"effect payload")
    return rec.checkpoint(1, {"a": b"A" * 100, "b": b"B" * 100})


class TestVerify:
    def test_a_healthy_store_verifies(self, store: Store) -> None:
        """verify() is ok and counts what it walked."""
        _sample(store)
        store.append_audit("decision", {"v": 1})
        report = store.verify()
        assert report.ok and report.problems == ()
        assert report.counts["checkpoints"] == 1 and report.counts["audit"] == 1

    def test_a_flipped_byte_in_the_data_file_is_found(self, tmp_path: Path) -> None:
        """Corrupting a blob's bytes on disk is caught by verify and by the read."""
        path = tmp_path / "s"
        marker = b"FIND-ME-" * 64
        with open_store(path) as st:
            key = st.put_object(marker)
        data = bytearray((path / "data.mdb").read_bytes())
        at = data.find(marker)
        assert at >= 0
        data[at + 100] ^= 0x01
        (path / "data.mdb").write_bytes(bytes(data))
        with open_store(path) as st:
            report = st.verify()
            assert not report.ok
            assert report.problems[0].where == f"objects/{key.hex()}"
            with pytest.raises(IntegrityError):
                st.get_object(key)

    def test_a_missing_object_is_a_dangling_reference(self, store: Store) -> None:
        """A deleted payload is reported where the manifest names it."""
        cid = _sample(store)
        with store.read(cid) as cp:
            payload = bytes.fromhex(cp.observations()[0][2])
        _raw(store, "objects", payload, None)
        report = store.verify()
        assert not report.ok
        assert any(
            p.what == "reference does not resolve" and cid in p.where for p in report.problems
        )

    def test_a_tampered_manifest_is_found(self, store: Store) -> None:
        """Manifest bytes must hash to the checkpoint id."""
        cid = _sample(store)
        with store.backend.env.env.begin() as txn:
            stored = raw_get(txn, store.backend.dbs, "checkpoints", bytes.fromhex(cid))
            value = bytearray(stored or b"")
        value[-1] ^= 0x01
        _raw(store, "checkpoints", bytes.fromhex(cid), bytes(value))
        assert not store.verify().ok
        with pytest.raises(IntegrityError), store.read(cid):
            pass

    def test_a_dangling_ref_is_found(self, store: Store) -> None:
        """A ref (with a true check) to a missing checkpoint is a problem."""
        with store.backend.env.env.begin(write=True) as txn:
            write_ref(txn, store.backend.env.dbs, b"run\x00ghost", bytes(16), SET, old=None)
        problems = store.verify().problems
        assert [p.what for p in problems] == ["ref does not resolve"]


class TestVerifyCheckpoint:
    def test_an_intact_checkpoint_has_no_problems(self, store: Store) -> None:
        """verify_checkpoint of a healthy checkpoint is ()."""
        cid = _sample(store)
        store.append_audit("note", {})
        assert store.verify_checkpoint(cid) == ()

    @pytest.mark.parametrize("what", ["part", "payload", "values"])
    def test_every_object_a_checkpoint_names_is_re_hashed(self, store: Store, what: str) -> None:
        """A flipped state part, observation payload or token values object is named."""
        cid = _sample(store)
        m = store.manifest(cid)
        with store.read(cid) as cp:
            key = {
                "part": bytes.fromhex(m.state_parts["b"]),
                "payload": bytes.fromhex(cp.observations()[0][2]),
                "values": bytes(m.raw["tokens"]["values"]),
            }[what]
        data = bytearray(store.get_object(key))
        data[0] ^= 0x20
        _raw(store, "objects", key, bytes(data))
        (problem,) = store.verify_checkpoint(cid)
        assert problem.what == "object bytes do not match their digest"
        assert cid in problem.where and key.hex() in problem.where
        assert problem.expected == key.hex()

    def test_a_missing_object_is_named(self, store: Store) -> None:
        """A deleted effect payload is reported as missing, with its ledger position."""
        cid = _sample(store)
        with store.read(cid) as cp:
            key = bytes.fromhex(cp.effects()[0][2])
        _raw(store, "objects", key, None)
        problems = store.verify_checkpoint(cid)
        assert any(
            p.what == "object not in the store" and p.position == 0 and "effects[0]" in p.where
            for p in problems
        ), problems


class TestCreatedAt:
    def test_a_flipped_created_at_byte_is_found_by_verify_and_by_reads(self, store: Store) -> None:
        """created_at has its own check: verify reports it, a verified read raises."""
        cid = _sample(store)
        key = bytes.fromhex(cid)
        with store.backend.read_txn() as txn:
            stored = raw_get(txn, store.backend.dbs, "checkpoints", key)
            assert stored is not None
            value = bytearray(stored)
        value[3] ^= 0x01
        _raw(store, "checkpoints", key, bytes(value))
        report = store.verify()
        assert [p.where for p in report.problems] == [f"checkpoints/{cid}.created_at"]
        with pytest.raises(IntegrityError, match="created_at"):
            store.manifest(cid)
        assert store.manifest(cid, verify=False).id == cid  # the explicit opt-out

    def test_the_checkpoint_value_layout_is_pinned(self) -> None:
        """created_at (float64 LE), XXH3-128(id || created_at)[:8], then the manifest."""
        manifest = b"\x81\xa1a\x01"
        cid = digest(manifest)
        value = pack_checkpoint_value(1.5, manifest)
        created = bytes.fromhex("000000000000f83f")  # 1.5, float64 LE
        assert value == created + digest(cid + created)[:8] + manifest
        assert unpack_checkpoint_value(value, cid) == (1.5, memoryview(manifest))


class TestVerifyNeverRaises:
    def test_an_audit_record_without_prev_is_reported(self, store: Store) -> None:
        """A damaged audit record lacking 'prev' is a problem naming it, not a KeyError."""
        store.append_audit("note", {"i": 0})
        bad = encode_value({"index": 0, "kind": "note", "body": {}, "time": 1.0})
        _raw(store, "audit", (0).to_bytes(8, "big"), bad)
        report = store.verify()
        assert any(p.where == "audit/0" and "shape" in p.what for p in report.problems)

    def test_a_damaged_sealed_ledger_is_reported(self, store: Store) -> None:
        """A sealed ledger object that no longer decodes is a problem naming it."""
        cid = _sample(store)
        key = bytes(store.manifest(cid).raw["effects"])
        _raw(store, "objects", key, b"\xc1 not msgpack")
        report = store.verify()
        assert any(p.where == f"ledgers/{key.hex()}" for p in report.problems), report.problems
        assert any(p.where == f"objects/{key.hex()}" for p in report.problems)


class TestAuditLog:
    def test_records_are_chained_by_digest(self, store: Store) -> None:
        """Each record carries the previous record's digest."""
        a = store.append_audit("decision", {"verdict": "ACCEPT"})
        b = store.append_audit("signoff", {"operator": "kim"})
        assert (a.index, a.prev) == (0, None)
        assert (b.index, b.prev) == (1, a.digest)
        assert store.get_audit(b.digest) == b
        assert [r.kind for r in store.audit_records()] == ["decision", "signoff"]
        assert list(store.audit_records(kind="signoff")) == [b]
        assert [r.index for r in store.audit_records(start=1)] == [1]

    def test_a_tampered_record_breaks_the_chain(self, store: Store) -> None:
        """Changing an old record is found by verify and by get_audit."""
        a = store.append_audit("decision", {"verdict": "REJECT"})
        store.append_audit("decision", {"verdict": "ACCEPT"})
        forged = encode_value(
            {
                "index": 0,
                "prev": None,
                "kind": "decision",
                "body": {"verdict": "ACCEPT"},
                "time": a.time,
            }
        )
        _raw(store, "audit", (0).to_bytes(8, "big"), forged)
        assert any(p.what == "audit chain broken" for p in store.verify().problems)
        with pytest.raises(AuditChainError):
            store.get_audit(a.digest)

    def test_losing_the_newest_record_is_found(self, store: Store) -> None:
        """The audit head in meta catches a truncated tail."""
        store.append_audit("decision", {"n": 1})
        store.append_audit("decision", {"n": 2})
        _raw(store, "audit", (1).to_bytes(8, "big"), None)
        assert any("audit head" in p.what for p in store.verify().problems)

    def test_unknown_audit_digest_and_bad_bodies(self, store: Store) -> None:
        """Lookups of unknown digests raise NotFoundError; bodies must be str-keyed maps."""
        with pytest.raises(NotFoundError):
            store.get_audit("00" * 16)
        with pytest.raises(InvalidInputError):
            store.append_audit("decision", {1: "x"})  # type: ignore[dict-item]
        with pytest.raises(InvalidInputError):
            store.append_audit("", {})
