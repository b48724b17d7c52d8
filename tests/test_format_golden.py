"""Golden bytes: the stored formats (docs/format.md, docs/store.md) must never drift."""

from __future__ import annotations

import math
import struct
from pathlib import Path
from typing import Any, cast

import pytest
import xxhash

import cpstore
from cpstore.decision.table import FindingCode
from cpstore.native import records
from cpstore.native import reference as ref
from cpstore.native.binding import digest
from cpstore.native.canonical import encode_value
from cpstore.store.audit_gates import GATE_INDEX_VERSION
from cpstore.store.audit_named import AUDITED_INDEX_VERSION
from cpstore.store.chunk_tree import build_tree, load_tree, tree_objects, value_cuts
from cpstore.store.codec import decode_frame, encode_frame
from cpstore.store.content import KIND_RECORD, entry_header, objects_of, records_of
from cpstore.store.facade import open as open_store
from cpstore.store.model import READABLE_VERSIONS, STORE_VERSION
from cpstore.store.record_codec import inflate_record
from cpstore.store.refs import REFS_DIGEST_KEY, pack_ref, write_ref
from cpstore.store.retained import RETAINED_VERSION, decode_holds, encode_holds
from cpstore.store.transfer import transfer

CANONICAL = [
    (None, "c0"),
    (False, "c2"),
    (True, "c3"),
    (0, "00"),
    (1, "01"),
    (-1, "ff"),
    (127, "7f"),
    (128, "cc80"),
    (-33, "d0df"),
    (2**32, "cf0000000100000000"),
    (2**64 - 1, "cfffffffffffffffff"),
    (-(2**63), "d38000000000000000"),
    (2**64, "c70901010000000000000000"),
    (-(2**63) - 1, "c70901ff7fffffffffffffff"),
    (1.0, "cb3ff0000000000000"),
    (-0.0, "cb0000000000000000"),
    (0.0, "cb0000000000000000"),
    (math.nan, "cb7ff8000000000000"),
    (math.inf, "cb7ff0000000000000"),
    ("", "a0"),
    ("1", "a131"),
    ("é", "a2c3a9"),
    (b"", "c400"),
    (b"1", "c40131"),
    ([], "90"),
    ([1, "a"], "9201a161"),
    ((1, "a"), "9201a161"),
    ({}, "80"),
    ({"b": 1, "a": 2}, "82a16102a16201"),
    ({1: "x", "1": "y"}, "8201a178a131a179"),
    ({"k": [None, {"z": b"\x00"}]}, "81a16b92c081a17ac40100"),
]


@pytest.mark.parametrize(("value", "hexbytes"), CANONICAL, ids=[repr(v) for v, _ in CANONICAL])
def test_canonical_encoding_bytes_are_pinned(value: object, hexbytes: str) -> None:
    """Each canonical encoding is exactly the documented bytes and decodes back."""
    encoded = cpstore.native.encode_value(value)
    assert encoded.hex() == hexbytes
    again = cpstore.native.decode_value(encoded)
    assert cpstore.native.encode_value(again) == encoded


def test_nan_with_other_payload_bits_encodes_as_the_one_nan() -> None:
    """Every NaN, whatever its payload bits, has the one documented encoding."""
    odd_nan = struct.unpack(">d", bytes.fromhex("7ff8000000000abc"))[0]
    assert math.isnan(odd_nan)
    assert cpstore.native.encode_value(odd_nan).hex() == "cb7ff8000000000000"


def test_values_of_different_types_have_different_digests() -> None:
    """1, 1.0, True, "1" and b"1" are five different values (seed 002)."""
    digests = {cpstore.native.value_digest(v) for v in (1, 1.0, True, "1", b"1")}
    assert len(digests) == 5


def test_value_digest_is_xxh3_128_of_the_canonical_bytes() -> None:
    """value_digest(42) is pinned and is XXH3-128 of encode_value(42)."""
    assert cpstore.native.value_digest(42).hex() == "14c9ae9594c463c479d03016b7aeed0d"
    assert cpstore.native.value_digest(42) == xxhash.xxh3_128_digest(b"\x2a")


def test_standard_and_custom_kind_codes_are_pinned() -> None:
    """The standard kinds have fixed codes; custom kinds hash with the top bit set."""
    assert [records.kind_code(k) for k in ("rng", "clock", "tool", "env")] == [1, 2, 3, 4]
    assert records.kind_code("cache") == 0x964101EE


def test_token_record_bytes_are_pinned() -> None:
    """A token record is seq|kind|provenance|reserved|value digest, little-endian."""
    native = cpstore.native
    record = native.pack_token(7, "rng", native.Provenance.RECORDED, native.value_digest(42))
    assert record.hex() == ("0700000000000000010000000100000014c9ae9594c463c479d03016b7aeed0d")
    assert records.unpack_token(record) == (
        7,
        1,
        cpstore.native.Provenance.RECORDED,
        cpstore.native.value_digest(42),
    )


def test_observation_record_bytes_are_pinned() -> None:
    """An observation record carries step, pinned_at, flags, source and payload."""
    source = records.string_digest("read_config")
    record = cpstore.native.pack_observation(12, source, bytes(range(16)), 1700000000.5)
    assert record.hex() == (
        "0c00000000000000"
        "00002040fc54d941"
        "01000000"
        "00000000"
        "2239b1eabe27dbe6d90e0431171a9cd8"
        "000102030405060708090a0b0c0d0e0f"
    )
    assert records.unpack_observation(record) == (12, source, bytes(range(16)), 1700000000.5)
    unpinned = cpstore.native.pack_observation(12, source, bytes(range(16)), None)
    assert unpinned[8:20] == bytes(12)
    assert records.unpack_observation(unpinned)[3] is None


def test_decision_and_effect_record_bytes_are_pinned() -> None:
    """Decision and effect records have the documented layouts."""
    assert cpstore.native.pack_decision(3, bytes(range(16))).hex() == (
        "03000000000000000000000000000000000102030405060708090a0b0c0d0e0f"
    )
    assert cpstore.native.pack_effect(2, bytes(16), b"\xff" * 16).hex() == (
        "0200000000000000" + "00" * 8 + "00" * 16 + "ff" * 16
    )
    assert records.unpack_decision(cpstore.native.pack_decision(3, bytes(16))) == (3, bytes(16))
    assert records.unpack_effect(cpstore.native.pack_effect(2, bytes(16), b"\xff" * 16)) == (
        2,
        bytes(16),
        b"\xff" * 16,
    )


def test_record_sizes_are_pinned() -> None:
    """Record sizes are part of the format."""
    assert dict(cpstore.native.RECORD_SIZE) == {
        cpstore.native.RecordType.TOKEN: 32,
        cpstore.native.RecordType.OBSERVATION: 56,
        cpstore.native.RecordType.DECISION: 32,
        cpstore.native.RecordType.EFFECT: 48,
    }


def test_sequence_digest_is_prefix_records_trailer() -> None:
    """The sequence digest hashes the 16-byte prefix, the records and the u64 count."""
    record = cpstore.native.pack_token(7, "rng", 1, cpstore.native.value_digest(42))
    prefix = records.seq_prefix(cpstore.native.RecordType.TOKEN)
    assert prefix.hex() == "43505351010001002000000000000000"
    by_hand = xxhash.xxh3_128_digest(prefix + record + (1).to_bytes(8, "little"))
    assert cpstore.native.sequence_digest(cpstore.native.RecordType.TOKEN, record) == by_hand
    assert by_hand.hex() == "043fb2cd4c1fa1f1a43ecd12041a2a24"
    assert cpstore.native.sequence_digest(1, b"").hex() == "aeb4d2e868a304eb3bbf15bc73d7c551"


def test_sequence_digest_binds_record_type_and_count() -> None:
    """The same bytes as another record type, or one record fewer, give another digest."""
    two = cpstore.native.pack_decision(1, bytes(16)) * 2
    native = cpstore.native
    assert native.sequence_digest(native.RecordType.DECISION, two) != native.sequence_digest(
        native.RecordType.TOKEN, two
    )
    assert cpstore.native.sequence_digest(3, two) != cpstore.native.sequence_digest(3, two[:32])
    assert ref.sequence_digest(3, two) == cpstore.native.sequence_digest(3, two)


def test_a_kind_table_refuses_two_names_with_one_hashed_code() -> None:
    """Names that hash to one code would compare equal; the second is refused."""
    table = records.KindTable()
    assert table.code("k9870") == records.kind_code("k9870") and table.code("rng") == 1
    with pytest.raises(cpstore.errors.RecordFormatError, match="same code"):
        table.code("k53003")  # same 31-bit hashed code as k9870
    assert table.label(records.kind_code("k9870")) == "k9870" and table.label(1) == "rng"
    assert table.label(0x80000001) == "kind#2147483649"


def test_store_layout_2_ref_values_and_refs_digest_are_pinned(tmp_path: Path) -> None:
    """A ref value is id, origin, XXH3-128(id || origin || key)[:8]; meta holds XOR + count."""
    main, side = bytes(range(16)), bytes(range(16, 32))
    assert pack_ref(b"run\0main", main, 0).hex() == (
        "000102030405060708090a0b0c0d0e0f" + "00" + "d3527d18098437b1"
    )
    assert pack_ref(b"run\0main", main, 1).hex() == (
        "000102030405060708090a0b0c0d0e0f" + "01" + "5fb0dd95afae89d6"
    )
    assert (
        pack_ref(b"run\0main", main, 0)[17:]
        == xxhash.xxh3_128_digest(main + b"\x00" + b"run\0main")[:8]
    )
    with open_store(tmp_path / "s") as st:
        with st.backend.env.env.begin(write=True) as txn:
            write_ref(txn, st.backend.env.dbs, b"run\0main", main, 0, old=None)
            write_ref(txn, st.backend.env.dbs, b"run\0side", side, 1, old=None)
        with st.backend.env.env.begin() as txn:
            raw = bytes(txn.get(REFS_DIGEST_KEY, db=st.backend.db("meta")))
            fmt = cpstore.native.decode_value(txn.get(b"format", db=st.backend.db("meta")))
    assert raw.hex() == "0961205f4cf21499361b3e1d164a506e" + "0200000000000000"
    assert fmt == {"layout": "cpstore", "version": STORE_VERSION, "digest": "xxh3-128"}


# -- store layout 3/4: chunk trees and framed chunks (issue 16, docs/format.md) -----

#: Twelve 480-byte strs: one element per chunk (each >= RUN_MIN), the array header in the root.
_TREE_VALUE = [f"message {i:03d} " * 40 for i in range(12)]
#: Root v2 (layout 4): [2, head, size, level 1's tail (5 chunks), upper-spine digest].
_TREE_ROOT = (
    "9502c4019ccd16a5c450156916c4c37604817fbb975cb3c8e05d69791cb1cd5953a6778c95bc1259ad2b"
    "7638cf324489515990a34c0b6da3f1ba7c1f51ae96fa8ecc8e0edd011474e15d9c44d261a303365000cf"
    "e75067cffa8fc41052babff0baaea89410d74919311d1877"
)
#: Its upper spine: [level 2's tail], one level-1 node.
_TREE_UPPER = "91c4107946170c918997af6fd6953eb4dede21"
#: The same tree's root v1 (what layout 3 wrote: every level's tail inline).
_TREE_ROOT_V1 = (
    "83a468656164c4019ca473697a65cd16a5a57370696e6592c450156916c4c37604817fbb975cb3c8e05d"
    "69791cb1cd5953a6778c95bc1259ad2b7638cf324489515990a34c0b6da3f1ba7c1f51ae96fa8ecc8e0e"
    "dd011474e15d9c44d261a303365000cfe75067cffa8fc4107946170c918997af6fd6953eb4dede21"
)


def test_chunk_tree_of_a_fixed_list_is_pinned() -> None:
    """Cuts, root v2 and upper-spine bytes, a complete node and the frame keys never drift."""
    enc = encode_value(_TREE_VALUE)
    assert value_cuts(enc, canonical=True) == (1, [967, 1933, 2899, 3865, 4831, 5797])
    tree = build_tree(enc, canonical=True)
    assert tree.whole.hex() == "18ce8c89dffcfd66e50d468e5010cc95"
    assert tree.root.hex() == "f1d6381803a1344a43b64218e08904fb"
    assert tree.nodes[tree.root].hex() == _TREE_ROOT
    upper = bytes.fromhex("52babff0baaea89410d74919311d1877")
    assert tree.nodes[upper].hex() == _TREE_UPPER
    node = bytes.fromhex("7946170c918997af6fd6953eb4dede21")
    assert tree.nodes[node].hex() == "9301cd03c6c4108a82a82f23a6e7ca7c0120cda1de0bf4"
    assert set(tree.nodes) == {tree.root, upper, node}
    assert (tree.chunks[0][0].hex(), tree.chunks[0][1:]) == (
        "8a82a82f23a6e7ca7c0120cda1de0bf401",
        (1, 967),
    )


class _Objects:
    """The one read a tree walk makes, over a dict of objects."""

    def __init__(self, objects: dict[bytes, bytes]) -> None:
        self.objects = objects

    def get(self, key: bytes, default: object = None, db: object = None) -> object:
        value = self.objects.get(bytes(key))
        return default if value is None else memoryview(value)


@pytest.mark.parametrize("root_hex", [_TREE_ROOT, _TREE_ROOT_V1], ids=["root-v2", "root-v1"])
def test_pinned_roots_of_both_versions_read_back_the_value(root_hex: str) -> None:
    """A layout-3 root v1 and a layout-4 root v2 over the same nodes read the same bytes."""
    enc = encode_value(_TREE_VALUE)
    tree = build_tree(enc, canonical=True)
    root = bytes.fromhex(root_hex)
    upper = bytes.fromhex("52babff0baaea89410d74919311d1877")  # named by root v2 only
    objects = {**tree.nodes, digest(root): root}
    objects.update((k, encode_frame(enc[a:b])) for k, a, b in tree.chunks)
    txn = cast(Any, _Objects(objects))
    direct = objects_of({"objects": None})  # no heap: every get is the fake txn's
    got = load_tree(txn, direct, digest(root), tree.whole, verify=True, where="golden")
    assert got == enc
    unreached = {digest(root)} if root_hex == _TREE_ROOT else {digest(root), tree.root, upper}
    assert set(tree_objects(txn, direct, digest(root))) == set(objects) - unreached


def test_frame_bytes_are_pinned() -> None:
    """A stored frame is 0x00 + bytes; a pinned zstd frame (0x01, size LE32, zstd) decodes."""
    assert encode_frame(b"abc", compress=False).hex() == "00616263"
    # Compressor output may change between zstd releases; what was written must still read.
    written = bytes.fromhex("012c01000028b52ffd602c0055000018616263010026aa6e08")
    assert decode_frame(written, "golden") == b"abc" * 100
    assert encode_frame(b"abc" * 100)[:5] == written[:5]


def test_store_layout_version_is_6() -> None:
    """Layout 6 (compact records in the heap) is what this build writes; 1 to 5 are still read."""
    assert STORE_VERSION == 6
    assert set(READABLE_VERSIONS) >= {1, 2, 3, 4, 5, 6}


def test_audited_checkpoint_index_rows_are_pinned(tmp_path: Path) -> None:
    """Index version 1: meta "audited/" + id (16 B) -> canonical first naming record's index;
    "audited_indexed" -> canonical [1, records covered] (docs/store.md)."""
    a, b, c = "11" * 16, "22" * 16, "33" * 16
    with open_store(tmp_path / "s") as st:
        st.append_audit(
            "decision", {"recorded": {"checkpoint_id": a}, "replayed": {"checkpoint_id": b}}
        )
        st.append_audit("note", {"checkpoint_id": c})
        st.append_audit("signoff", {"checkpoint_id": c})
        st.append_audit("gate", {"checkpoint_id": a})
        with st.backend.read_txn() as txn:
            rows = [
                (bytes(k).hex(), bytes(v).hex())
                for k, v in txn.cursor(db=st.backend.db("meta"))
                if bytes(k).startswith(b"audited")
            ]
    assert AUDITED_INDEX_VERSION == 1
    prefix = b"audited/".hex()
    assert rows == [
        (prefix + a, "00"),
        (prefix + b, "00"),
        (prefix + c, "02"),
        (b"audited_indexed".hex(), "920104"),
    ]


def test_gate_index_rows_are_pinned(tmp_path: Path) -> None:
    """Index version 3 (2 counted only QUARANTINE verdicts in "quarantined/"): meta
    "decision_id/" + UTF-8 id -> canonical list of indexes;
    "signed/" + decision digest -> nil or the first sign-off's index; "signoff_used/" +
    sign-off digest -> nil or the first gate's index; "permit_used/" + resume gate digest
    -> nil or the first resume's index; "quarantined/" + canonical [run_id, branch] -> nil
    or the index of the first decision that found the replay unverified (a QUARANTINE, or
    a REJECT with a QUARANTINE-level finding); "odd_id/" + hex run + "/" + digest -> index;
    "gates_indexed" -> [3, count] (docs/store.md)."""
    branch = {"run_id": "r", "branch": "main"}
    with open_store(tmp_path / "s") as st:
        d0 = st.append_audit("decision", {"decision_id": "d-é", "recorded": branch}).digest
        d1 = st.append_audit("decision", {"decision_id": "d-é"}).digest
        s2 = st.append_audit("signoff", {"decision_audit": d0}).digest
        s3 = st.append_audit("signoff", {"decision_audit": d0}).digest
        g4 = st.append_audit("gate", {"sign_off": s2, "gate": "resume"}).digest
        st.append_audit("gate", {"sign_off": s2.upper()})  # names nothing, no permit
        st.append_audit("resume", {"permit": g4})
        st.append_audit("resume", {"permit": g4})  # a second use: the row keeps the first
        quarantine = {"decision_id": 1234567890, "recorded": branch, "verdict": "QUARANTINE"}
        d8 = st.append_audit("decision", quarantine).digest
        short = {**quarantine, "decision_id": 12345}  # a run of 5: no odd_id row
        d9 = st.append_audit("decision", short).digest
        families = (b"decision_id/", b"signed/", b"signoff_used/", b"gates_", b"permit_used/")
        with st.backend.read_txn() as txn:
            rows = [
                (bytes(k), bytes(v).hex())
                for k, v in txn.cursor(db=st.backend.db("meta"))
                if bytes(k).startswith((*families, b"quarantined/", b"odd_id/"))
            ]
    assert GATE_INDEX_VERSION == 3
    want = [
        (b"decision_id/d-\xc3\xa9", "920001"),
        (b"gates_indexed", "92030a"),
        (b"odd_id/1234567890/" + bytes.fromhex(d8), "08"),
        (b"permit_used/" + bytes.fromhex(g4), "06"),
        (b"quarantined/\x92\xa1r\xa4main", "08"),
        (b"quarantined/\x92\xc0\xc0", "c0"),
        *sorted(
            [
                (b"signed/" + bytes.fromhex(d0), "02"),
                *((b"signed/" + bytes.fromhex(d), "c0") for d in (d1, d8, d9)),
            ]
        ),
        *sorted(
            [
                (b"signoff_used/" + bytes.fromhex(s2), "04"),
                (b"signoff_used/" + bytes.fromhex(s3), "c0"),
            ]
        ),
    ]
    assert rows == want


def test_heap_entry_and_location_bytes_are_pinned(tmp_path: Path) -> None:
    """An object in a new store: heap key 1 (8 bytes BE) -> b"o", key length, key, bytes;
    its oloc row maps the digest to that key (docs/format.md, "Heap entries")."""
    with open_store(tmp_path / "s") as st:
        key = st.put_object(b"abc")
        with st.backend.read_txn() as txn:
            heap = [
                (bytes(k).hex(), bytes(v).hex()) for k, v in txn.cursor(db=st.backend.db("heap"))
            ]
            oloc = [
                (bytes(k).hex(), bytes(v).hex()) for k, v in txn.cursor(db=st.backend.db("oloc"))
            ]
            legacy = txn.stat(st.backend.db("objects"))["entries"]
    assert key.hex() == "06b05ab6733a618578af5f94892f3950"
    assert heap == [("0000000000000001", "6f10" + "06b05ab6733a618578af5f94892f3950" + "616263")]
    assert oloc == [("06b05ab6733a618578af5f94892f3950", "0000000000000001")]
    assert legacy == 0
    assert entry_header(KIND_RECORD, bytes(16)).hex() == "6310" + "00" * 16


def test_a_record_entry_carries_its_parts_location_hints_before_the_record(
    tmp_path: Path,
) -> None:
    """A checkpoint of one part in a new store: the part at heap 1, the record at heap 2 as
    b"r", 16, id, hint count 1, hint 1 (uint32 BE each), then the record's zstd frame."""
    with open_store(tmp_path / "s") as st:
        cid = bytes.fromhex(st.recorder("r").checkpoint(0, {"a": 1}))
        with st.backend.read_txn() as txn:
            heap = {bytes(k): bytes(v) for k, v in txn.cursor(db=st.backend.db("heap"))}
            record = bytes(records_of(st.backend.dbs).get(txn, cid) or b"")
    entry = heap[(2).to_bytes(8, "big")]
    assert entry[:26] == b"r\x10" + cid + bytes.fromhex("0000000100000001")
    assert inflate_record(entry[26:]) == record
    assert heap[(1).to_bytes(8, "big")] == b"o\x10" + digest(encode_value(1)) + encode_value(1)


def test_a_carried_decision_record_is_pinned(tmp_path: Path) -> None:
    """push/pull append the source's standing non-ACCEPT decision as kind "decision" whose
    body is the source record's body plus "imported": {"store", "audit", "index"}
    (docs/format.md, "Carried decisions")."""
    src_at = tmp_path / "src"
    with open_store(src_at) as src, open_store(tmp_path / "dst") as dst:
        cid = src.recorder("r").checkpoint(1, b"state")
        body = {
            "decision_id": "d-1",
            "verdict": "REJECT",
            "findings": [{"code": FindingCode.STATE_MISMATCH.value}],
            "recorded": {"checkpoint_id": cid, "run_id": "r", "branch": "main"},
        }
        rec = src.append_audit("decision", body)
        assert transfer(src.backend, dst.backend).decisions == 1
        (carried,) = dst.audit_records()
    imported = {"store": str(src_at), "audit": rec.digest, "index": 0}
    assert (carried.kind, carried.body) == ("decision", {**body, "imported": imported})
    assert set(carried.body["imported"]) == {"store", "audit", "index"}


def test_a_quarantine_carried_for_its_branch_only_is_pinned(tmp_path: Path) -> None:
    """A source QUARANTINE the destination's own REJECT of the checkpoint keeps out is
    carried with ``recorded.checkpoint_id`` nil and "imported" holding it plus
    "branch_only": true (docs/format.md, "Carried decisions")."""
    src_at = tmp_path / "src"
    with open_store(src_at) as src, open_store(tmp_path / "dst") as dst:
        cid = src.recorder("r").checkpoint(1, b"state")
        transfer(src.backend, dst.backend)
        recorded = {"checkpoint_id": cid, "run_id": "r", "branch": "main"}
        reject = {
            "decision_id": "mine",
            "verdict": "REJECT",
            "findings": [{"code": FindingCode.STATE_MISMATCH.value}],
            "recorded": recorded,
        }
        dst.append_audit("decision", reject)
        body = {
            "decision_id": "d-q",
            "verdict": "QUARANTINE",
            "findings": [{"code": FindingCode.BEST_EFFORT.value}],
            "recorded": recorded,
        }
        rec = src.append_audit("decision", body)
        assert transfer(src.backend, dst.backend).decisions == 1
        carried = list(dst.audit_records())[-1]
    imported = {
        "store": str(src_at),
        "audit": rec.digest,
        "index": 0,
        "checkpoint_id": cid,
        "branch_only": True,
    }
    only = {**recorded, "checkpoint_id": None}
    assert (carried.kind, carried.body) == (
        "decision",
        {**body, "recorded": only, "imported": imported},
    )


def test_retained_head_rows_are_pinned() -> None:
    """holders69: a retained head's row (meta ``retained/`` + checkpoint id) is the v1 map
    of its one hold, as every cpstore wrote; two or more holds are ``[2, holds]``, oldest
    first. Both read back; ``[2, [one hold]]`` is no row a writer makes: malformed."""
    one = {"run": "r", "branch": "main", "audit": "ab" * 16}
    two = {"run": "r", "branch": "exp", "audit": "cd" * 16}
    v1 = (
        "83a372756ea172a56175646974d920" + "6162" * 16 + "a66272616e6368a46d61696e"
    )  # fmt: skip
    v2 = (
        "9202" "92"
        "83a372756ea172a56175646974d920" + "6162" * 16 + "a66272616e6368a46d61696e"
        "83a372756ea172a56175646974d920" + "6364" * 16 + "a66272616e6368a3657870"
    )  # fmt: skip
    assert RETAINED_VERSION == 2
    assert encode_holds([one]).hex() == v1
    assert encode_holds([one, two]).hex() == v2
    assert decode_holds(bytes.fromhex(v1)) == [one]
    assert decode_holds(bytes.fromhex(v2)) == [one, two]
    assert decode_holds(encode_value([2, [one]])) is None
    assert decode_holds(encode_value([3, [one, two]])) is None
    assert decode_holds(encode_value([2, [one, one]])) is None  # one holder twice
