"""The typed manifest decode gives exactly the generic path's map, or steps aside (issue 12).

A whole-state read decodes a manifest of the common shape in one typed msgspec
pass (decode.decode_manifest_typed) instead of a generic decode, a walk and
the state's shape checks. These tests prove that whatever the typed decode
returns is the map the generic path returns (values, types and key order), on
recorded manifests, on every field given other values, and on damaged bytes;
that everything else falls back to the generic path; and that forged
manifests are refused through the store with the same error classes as before.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import given, reject, settings
from hypothesis import strategies as st
from stored import forge_checkpoint
from test_canonical import values
from test_store_read_decoders import _same

from cpstore.errors import CanonicalEncodingError, FormatVersionError, IntegrityError
from cpstore.native.binding import digest
from cpstore.native.canonical import encode_value
from cpstore.store import decode
from cpstore.store.decode import MSGSPEC_SAFE_LIMIT, decode_manifest_typed
from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store
from cpstore.store.fast_read import contents
from cpstore.store.manifest import _check_manifest_state_generic, check_manifest_state
from cpstore.store.model import MANIFEST_VERSION


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(tmp_path / "s") as st_:
        yield st_


def _recorded(tmp_path: Path) -> list[bytes]:
    """The manifest bytes of a few recorded checkpoints (tags, metadata, parents, logs)."""
    out = []
    with open_store(tmp_path / "m") as s:
        rec = s.recorder("run")
        ids = [
            rec.checkpoint(0, {"a": 1}),
            rec.checkpoint(1, {"a": 2, "b": [1, {"k": None}]}, metadata={"m": {"n": [1.5]}}),
            rec.checkpoint(2, {"a": 2, "b": "x", "c": b"\x00"}),
        ]
        for cid in ids:
            out.append(encode_value(s.manifest(cid).raw))
    return out


def _generic(data: bytes) -> Any:
    """The generic path's map, or the class of what it raises."""
    try:
        return _check_manifest_state_generic(digest(data), data)
    except Exception as exc:
        return type(exc)


def _agrees(data: bytes) -> bool:
    """Typed gives None, or exactly the generic path's map (the generic path accepting)."""
    typed = decode_manifest_typed(data)
    return typed is None or _same(typed, _generic(data))


def _pack(m: dict[str, Any]) -> bytes:
    """``m`` encoded canonically, or by msgpack where the canonical encoder refuses a value
    (a Timestamp, an ext); a map neither encodes (a big int beside a Timestamp) is skipped."""
    try:
        return encode_value(m)
    except CanonicalEncodingError:
        pass
    try:
        packed: bytes = msgpack.packb(m, use_bin_type=True)
    except (OverflowError, TypeError):
        reject()
    return packed


@pytest.fixture(scope="module")
def manifest(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A recorded manifest map (second checkpoint: parent, metadata)."""
    data = _recorded(tmp_path_factory.mktemp("typed"))[1]
    m: dict[str, Any] = msgpack.unpackb(data, strict_map_key=False)
    return m


#: Values a field may be given: canonical values, near-misses of the fixed shapes,
#: and what the two msgspec decoders and msgpack disagree on.
_ODD = st.sampled_from(
    [
        True, False, 0, 1, 2, -1, 2**64 - 1, None, "", "parts", "bytes", b"", bytes(15),
        bytes(16), bytes(17), [], ["t"], [1], {}, {"a": bytes(16)}, {1: bytes(16)},
        msgpack.Timestamp(1, 0), msgpack.ExtType(5, b"x"), 1.0,
    ]
)  # fmt: skip
_FIELD_VALUES = _ODD | values


class TestTypedEqualsGeneric:
    def test_recorded_manifests_decode_typed_to_the_generic_map(self, tmp_path: Path) -> None:
        """A recorded manifest takes the typed path and gives the generic map, key order too."""
        for data in _recorded(tmp_path):
            typed = decode_manifest_typed(data)
            assert typed is not None
            assert _same(typed, _generic(data))
            assert _same(check_manifest_state(digest(data), data), typed)

    @settings(max_examples=400, deadline=None)
    @given(st.data())
    def test_any_field_given_any_value_decodes_alike_or_falls_back(
        self, manifest: dict[str, Any], data: st.DataObject
    ) -> None:
        """A manifest with fields (and state fields) replaced, removed or added: typed is
        None or the generic map."""
        m = dict(manifest)
        state = dict(m["state"])
        for _ in range(data.draw(st.integers(1, 3))):
            where = data.draw(st.sampled_from(["top", "state"]))
            target = m if where == "top" else state
            name = data.draw(st.sampled_from([*target, "extra"]))
            if data.draw(st.booleans()) and name in target:
                del target[name]
            else:
                target[name] = data.draw(_FIELD_VALUES)
        m["state"] = state
        assert _agrees(_pack(m))

    @settings(max_examples=600, deadline=None)
    @given(st.data())
    def test_damaged_manifest_bytes_decode_alike_or_fall_back(
        self, manifest: dict[str, Any], data: st.DataObject
    ) -> None:
        """Bytes flipped, cut or inserted in a manifest: typed is None or the generic map."""
        raw = bytearray(encode_value(manifest))
        for _ in range(data.draw(st.integers(1, 3))):
            at = data.draw(st.integers(0, len(raw)))
            how = data.draw(st.sampled_from(["flip", "cut", "insert"]))
            if how == "flip" and at < len(raw):
                raw[at] ^= data.draw(st.integers(1, 255))
            elif how == "cut":
                del raw[at:]
            else:
                raw[at:at] = data.draw(st.binary(min_size=1, max_size=4))
        assert _agrees(bytes(raw))

    def test_empty_tiny_and_huge_inputs_fall_back(self, manifest: dict[str, Any]) -> None:
        """No bytes, one byte, and a manifest with a 1 MB metadata value: None, or the same map."""
        assert decode_manifest_typed(b"") is None
        assert decode_manifest_typed(b"\x80") is None
        big = encode_value({**manifest, "metadata": {"big": "x" * 1_000_000}})
        assert _agrees(big) and decode_manifest_typed(big) is not None

    def test_the_typed_fields_are_the_fields_cpstore_writes(self) -> None:
        """The typed shape names exactly the manifest and state fields, at version 1."""
        assert set(decode._CommonManifest.__struct_fields__) == decode._FIELDS
        assert set(decode._CommonState.__struct_fields__) == decode._STATE_FIELDS
        assert MANIFEST_VERSION == 1  # decode._CommonManifest.cpstore is Literal[1]


def _with(manifest: dict[str, Any], **changes: Any) -> bytes:
    packed: bytes = msgpack.packb({**manifest, **changes}, use_bin_type=True)
    return packed


class TestFallsBack:
    @pytest.mark.parametrize(
        "change",
        [
            {"cpstore": True},
            {"cpstore": 2},
            {"extra": 1},
            {"step": True},
            {"tags": ("t", 1)},
            {"parent": "x" * 16},
            {"metadata": {"t": msgpack.Timestamp(1, 0)}},
            {"tokens": {"kinds": {1: msgpack.Timestamp(1, 0)}}},
        ],
    )
    def test_a_manifest_off_the_common_shape_is_left_to_the_generic_path(
        self, manifest: dict[str, Any], change: dict[str, Any]
    ) -> None:
        """Another version, an extra field, a wrong fixed type or a timestamp: None."""
        data = _with(manifest, **change)
        assert decode_manifest_typed(data) is None
        assert _agrees(data)

    @pytest.mark.parametrize(
        "state_change",
        [
            {"kind": "bytes"},
            {"parts": {}},
            {"parts": {"a": bytes(15)}},
            {"digest": bytes(17)},
            {"chunked": {"a": bytes(16)}},
            {"extra": 1},
        ],
    )
    def test_a_state_off_the_common_shape_is_left_to_the_generic_path(
        self, manifest: dict[str, Any], state_change: dict[str, Any]
    ) -> None:
        """A bytes state, no parts, a short digest, a chunked part or an extra field: None."""
        data = _with(manifest, state={**manifest["state"], **state_change})
        assert decode_manifest_typed(data) is None

    def test_an_array_key_in_metadata_is_left_to_msgpack(self, manifest: dict[str, Any]) -> None:
        """A map key msgpack cannot hold: None, and the generic path refuses it, named."""
        pairs = b"".join(
            encode_value(k) + (b"\x81\x92\x01\x02\x03" if k == "metadata" else encode_value(v))
            for k, v in manifest.items()
        )
        data = bytes([0x80 | len(manifest)]) + pairs
        assert decode_manifest_typed(data) is None
        with pytest.raises(IntegrityError, match="not canonical"):
            check_manifest_state(digest(data), data)

    def test_a_raised_recursion_limit_leaves_it_to_msgpack(self, manifest: dict[str, Any]) -> None:
        """Above msgspec's safe limit the typed decode steps aside (msgpack decodes)."""
        data = encode_value(manifest)
        old = sys.getrecursionlimit()
        sys.setrecursionlimit(MSGSPEC_SAFE_LIMIT + 1)
        try:
            assert decode_manifest_typed(data) is None
            assert _same(check_manifest_state(digest(data), data), _generic(data))
        finally:
            sys.setrecursionlimit(old)


class TestThroughTheStore:
    def test_a_forged_manifest_of_another_version_is_refused_on_entry(self, store: Store) -> None:
        """Version 2 (hash-valid) is refused as an unknown version, as before."""
        cid = store.recorder("run").checkpoint(0, {"a": 1})
        forged = forge_checkpoint(store, {**store.manifest(cid).raw, "cpstore": 2})
        with pytest.raises(FormatVersionError):
            store.read(forged.hex()).__enter__()

    def test_a_forged_unknown_ext_outside_the_state_is_refused_on_entry(self, store: Store) -> None:
        """An unknown ext in an extra field: refused as not canonical when entered, as before."""
        cid = store.recorder("run").checkpoint(0, {"a": 1})
        extra = encode_value("zz") + b"\xd4\x05\x00"
        forged = forge_checkpoint(store, store.manifest(cid).raw, extra)
        with pytest.raises(IntegrityError, match="not canonical"):
            store.read(forged.hex()).__enter__()

    def test_a_forged_short_part_digest_is_refused_naming_the_part(self, store: Store) -> None:
        """A 15-byte part digest is refused on entry naming state.parts, as before."""
        cid = store.recorder("run").checkpoint(0, {"a": 1})
        m = store.manifest(cid).raw
        m["state"] = {**m["state"], "parts": {"a": bytes(15)}}
        forged = forge_checkpoint(store, m)
        with pytest.raises(IntegrityError, match="not a digest") as info:
            store.read(forged.hex()).__enter__()
        assert "state.parts['a']" in (info.value.where or "")

    def test_a_recorded_read_takes_the_typed_path(
        self, store: Store, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A recorded checkpoint's read never reaches the generic manifest decode."""
        cid = store.recorder("run").checkpoint(0, {"a": 1, "b": "two"})

        def generic(*_: Any) -> Any:
            raise AssertionError("the generic manifest decode was used")

        monkeypatch.setattr("cpstore.store.manifest.decode_manifest_map", generic)
        with store.read(cid) as cp:
            assert cp.state() == {"a": 1, "b": "two"}
        with store.latest("run") as cp:
            assert cp.state() == {"a": 1, "b": "two"}


class TestDuplicatesAndRecords:
    def test_a_field_written_twice_decodes_as_the_generic_path_decodes_it(
        self, manifest: dict[str, Any]
    ) -> None:
        """A manifest naming ``state`` twice: typed gives the generic map (the last one wins)."""
        other = {**manifest["state"], "parts": {"zz": bytes(16)}}
        pairs = b"".join(encode_value(k) + encode_value(v) for k, v in manifest.items())
        data = b"\xde" + (len(manifest) + 1).to_bytes(2, "big") + pairs
        data += encode_value("state") + encode_value(other)
        typed = decode_manifest_typed(data)
        assert typed is not None and typed["state"]["parts"] == {"zz": bytes(16)}
        assert _same(typed, _generic(data))

    def test_the_compact_record_fast_path_gives_the_general_paths_record_and_hints(
        self, store: Store
    ) -> None:
        """Content.hinted on a compact entry equals the located entry's _record split."""
        rec = store.recorder("run")
        ids = [rec.checkpoint(i, {"a": i, "b": "x" * 50}) for i in range(3)]
        records = contents(store.backend.dbs)[1]
        with store.backend.read_txn() as txn:
            for cid in map(bytes.fromhex, ids):
                value, hints = records.hinted(txn, cid)
                found = records._located(txn, cid)
                assert found is not None and found[1][0] == ord("r")
                block, record = records._record(cid, found[0], found[1], 18)
                assert value is not None and bytes(value) == bytes(record)
                assert hints == bytes(block) and len(hints) == 8
