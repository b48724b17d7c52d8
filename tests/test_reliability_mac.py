"""Keyed audit MACs: a forger who can rewrite the data file is caught; the key holder is not."""

from __future__ import annotations

import struct
from pathlib import Path

import lmdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cpstore.errors import InvalidInputError
from cpstore.native.binding import digest
from cpstore.native.canonical import decode_value, encode_value
from cpstore.store.audit_mac import (
    MAC_SIZE,
    chain_macs,
    check_key,
    check_record_mac,
    key_id,
    mac_head,
    mac_record,
    verify_macs,
)
from cpstore.store.facade import open as open_store

KEY = bytes(range(32))
OTHER = bytes(range(1, 33))
_INDEX = struct.Struct(">Q")


def _log(n: int) -> list[bytes]:
    return [encode_value({"index": i, "kind": "k", "body": {"i": i}}) for i in range(n)]


def _entries(
    records: list[bytes], macs: list[bytes | None]
) -> list[tuple[int, bytes, bytes | None]]:
    return [(i, r, m) for i, (r, m) in enumerate(zip(records, macs, strict=True))]


class TestKeys:
    @pytest.mark.parametrize("bad", [b"", b"x" * 15, b"x" * 65, "a" * 32, None, 12])
    def test_keys_outside_16_to_64_bytes_are_refused(self, bad: object) -> None:
        """A short, long or non-bytes key is InvalidInputError before any hashing."""
        with pytest.raises(InvalidInputError):
            check_key(bad)

    def test_key_id_tells_keys_apart_and_is_stable(self) -> None:
        """The fingerprint is deterministic and differs between keys."""
        # Any bytes-like key is accepted at run time; the signature says only bytes.
        assert key_id(KEY) == key_id(bytearray(KEY))  # type: ignore[arg-type]
        assert key_id(KEY) != key_id(OTHER)
        assert len(key_id(KEY)) == 32


class TestMacs:
    def test_a_record_mac_depends_on_key_predecessor_and_bytes(self) -> None:
        """Changing the key, the previous MAC or one byte of the record changes the MAC."""
        base = mac_record(KEY, None, b"record")
        assert len(base) == MAC_SIZE
        assert mac_record(OTHER, None, b"record") != base
        assert mac_record(KEY, bytes(32), b"record") != base
        assert mac_record(KEY, None, b"recorD") != base
        assert check_record_mac(KEY, None, b"record", base)
        assert not check_record_mac(KEY, None, b"record", None)

    def test_mac_bytes_are_pinned(self) -> None:
        """The construction is versioned by its personalisation; its output must not drift."""
        assert mac_record(KEY, None, b"").hex() == mac_record(KEY, None, memoryview(b"")).hex()
        assert chain_macs(KEY, [b"a", b"b"])[1] == mac_record(
            KEY, mac_record(KEY, None, b"a"), b"b"
        )

    def test_an_untouched_chain_verifies_with_its_head(self) -> None:
        """verify_macs reports nothing for a chain it computed itself."""
        records = _log(5)
        macs = chain_macs(KEY, records)
        head = (5, mac_head(KEY, 5, macs[-1]))
        assert verify_macs(_entries(records, list(macs)), KEY, head=head) == []
        assert verify_macs([], KEY, head=(0, mac_head(KEY, 0, None))) == []

    def test_an_altered_record_is_reported_at_its_index_only(self) -> None:
        """One changed record is one problem, at that record; the rest still verify."""
        records = _log(6)
        macs: list[bytes | None] = list(chain_macs(KEY, records))
        records[3] = records[3].replace(b"k", b"K")
        problems = verify_macs(_entries(records, macs), KEY)
        assert [p.where for p in problems] == ["audit/3"]

    def test_an_inserted_record_without_the_key_is_reported(self) -> None:
        """A record appended by someone without the key has no valid MAC."""
        records = _log(3)
        macs: list[bytes | None] = list(chain_macs(KEY, records))
        records.append(encode_value({"forged": True}))
        macs.append(mac_record(OTHER, macs[-1], records[-1]))  # wrong key
        assert [p.where for p in verify_macs(_entries(records, macs), KEY)] == ["audit/3"]
        macs[-1] = None
        assert [p.what for p in verify_macs(_entries(records, macs), KEY)] == [
            "audit record has no MAC"
        ]

    def test_reordering_or_replaying_a_record_breaks_the_chain(self) -> None:
        """A valid record copied to another position does not verify there."""
        records = _log(4)
        macs: list[bytes | None] = list(chain_macs(KEY, records))
        records[3], macs[3] = records[1], macs[1]  # replay record 1 (with its MAC) as record 3
        assert [p.where for p in verify_macs(_entries(records, macs), KEY)] == ["audit/3"]

    def test_a_cut_tail_is_found_by_the_head(self) -> None:
        """Dropping the newest records leaves a head that no longer matches."""
        records = _log(5)
        macs = chain_macs(KEY, records)
        head = (5, mac_head(KEY, 5, macs[-1]))
        problems = verify_macs(_entries(records[:3], list(macs[:3])), KEY, head=head)
        assert [p.where for p in problems] == ["audit_mac/head"]

    def test_the_wrong_key_fails_every_record(self) -> None:
        """Verifying with another key reports every record (check key_id first)."""
        records = _log(3)
        macs: list[bytes | None] = list(chain_macs(KEY, records))
        assert len(verify_macs(_entries(records, macs), OTHER)) == 3

    @settings(max_examples=60, deadline=None)
    @given(
        st.lists(st.binary(max_size=64), min_size=1, max_size=12),
        st.data(),
    )
    def test_any_single_byte_change_is_detected(
        self, records: list[bytes], data: st.DataObject
    ) -> None:
        """Property: flipping any bit of any record or MAC is reported."""
        macs: list[bytes | None] = list(chain_macs(KEY, records))
        i = data.draw(st.integers(0, len(records) - 1))
        target = data.draw(st.sampled_from(["record", "mac"]))
        if target == "record" and records[i]:
            j = data.draw(st.integers(0, len(records[i]) - 1))
            b = bytearray(records[i])
            b[j] ^= 1 << data.draw(st.integers(0, 7))
            records[i] = bytes(b)
        else:
            m = bytearray(macs[i] or b"")
            m[data.draw(st.integers(0, MAC_SIZE - 1))] ^= 1
            macs[i] = bytes(m)
        problems = verify_macs(_entries(records, macs), KEY)
        assert f"audit/{i}" in [p.where for p in problems]


def _raw_audit(path: Path) -> list[bytes]:
    env = lmdb.open(str(path), max_dbs=16, readonly=True, lock=False)
    try:
        db = env.open_db(b"audit", create=False)
        with env.begin() as txn:
            return [bytes(v) for _, v in txn.cursor(db=db)]
    finally:
        env.close()


def _rewrite_audit(path: Path, index: int, body: dict[str, object]) -> None:
    """What a forger with write access does: edit one record, re-chain every digest after it
    and re-key the gate index rows named by a record digest (``signed/``, ``signoff_used/``)."""
    env = lmdb.open(str(path), max_dbs=16)
    try:
        audit, idx, meta = (env.open_db(n) for n in (b"audit", b"audit_index", b"meta"))
        with env.begin(write=True) as txn:
            raws = [bytes(v) for _, v in txn.cursor(db=audit)]
            prev: bytes | None = None
            for i, raw in enumerate(raws):
                rec = decode_value(raw)
                if i == index:
                    rec["body"] = body
                rec["prev"] = prev
                new = encode_value(rec)
                txn.delete(digest(raw), db=idx)
                txn.put(_INDEX.pack(i), new, db=audit)
                txn.put(digest(new), _INDEX.pack(i), db=idx)
                for prefix in (b"signed/", b"signoff_used/"):
                    row = txn.get(prefix + digest(raw), db=meta)
                    if row is not None:
                        txn.delete(prefix + digest(raw), db=meta)
                        txn.put(prefix + digest(new), row, db=meta)
                prev = digest(new)
            txn.put(b"audit_head", encode_value([len(raws), prev]), db=meta)
    finally:
        env.close()


class TestAgainstAStore:
    def test_a_rechained_forgery_passes_verify_but_not_the_macs(self, tmp_path: Path) -> None:
        """The threat the option exists for: store.verify() is fooled, verify_macs is not."""
        path = tmp_path / "s"
        with open_store(path) as st_:
            for i in range(4):
                st_.append_audit("signoff" if i == 2 else "decision", {"i": i, "operator": "ann"})
        macs: list[bytes | None] = list(chain_macs(KEY, _raw_audit(path)))  # kept outside
        head = (4, mac_head(KEY, 4, macs[-1]))
        _rewrite_audit(path, 2, {"i": 2, "operator": "mallory"})
        with open_store(path) as st_:
            assert st_.verify().ok  # the unkeyed chain was rewritten consistently
            assert [r.body.get("operator") for r in st_.audit_records()][2] == "mallory"
        raws = _raw_audit(path)
        problems = verify_macs(_entries(raws, macs), KEY, head=head)
        # Record 2 was changed; 3 was re-chained (its prev changed) so its bytes changed too.
        assert [p.where for p in problems] == ["audit/2", "audit/3"]

    def test_a_record_appended_without_the_key_is_reported(self, tmp_path: Path) -> None:
        """An append_audit by someone who lacks the key (a forged sign-off) is flagged."""
        path = tmp_path / "s"
        with open_store(path) as st_:
            st_.append_audit("decision", {"verdict": "QUARANTINE"})
        macs: list[bytes | None] = list(chain_macs(KEY, _raw_audit(path)))
        with open_store(path) as st_:
            st_.append_audit("signoff", {"operator": "mallory"})
        raws = _raw_audit(path)
        problems = verify_macs(_entries(raws, [*macs, None]), KEY)
        assert [(p.where, p.what) for p in problems] == [("audit/1", "audit record has no MAC")]
