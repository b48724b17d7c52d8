"""The read path's msgspec decoders give exactly what msgpack gives, or step aside (issue 12).

Whole-state reads decode manifests and parts with msgspec (about twice as fast
on manifests) and keep a value only when :func:`decoded_alike` says msgpack
builds the same one from those bytes; otherwise msgpack decodes (and names a
failure) as before. These tests prove the equality on canonical values, on
arbitrary and adversarial bytes, and through the store on forged objects.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from stored import forge_checkpoint
from test_canonical import values

from cpstore.errors import IntegrityError
from cpstore.native.binding import digest
from cpstore.native.canonical import _ext_hook, encode_value
from cpstore.store.content import Content
from cpstore.store.decode import decode_part, decoded_alike
from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store
from cpstore.store.fast_read import contents, read_parts
from cpstore.store.manifest import check_manifest_state

#: msgpack headers an adversary would reach for: ext -1 (timestamps), ext 1,
#: arrays and maps (array keys), deep nesting, raw strings.
_PIECES = st.sampled_from(
    [
        *(b"\xd6\xff", b"\xd7\xff", b"\xc7\x0c\xff", b"\xd4\x01", b"\x81", b"\x91", b"\x92"),
        *(b"\xa1a", b"\x00", b"\xc0", b"\xc3", b"\xc4\x01x", b"\xcb" + bytes(8), b"\xdc\x00\x01"),
    ]
)
adversarial = st.lists(_PIECES | st.binary(max_size=4), max_size=24).map(b"".join)


def _msgpack(data: bytes) -> Any:
    return msgpack.unpackb(data, strict_map_key=False, ext_hook=_ext_hook)


def _same(a: Any, b: Any) -> bool:
    """Equal with equal types all the way down, keys included (NaN equals NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, list):
        return len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, dict):
        ka, kb = list(a), list(b)
        return len(ka) == len(kb) and all(map(_same, ka, kb)) and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)


class TestDecodersAgree:
    @settings(max_examples=300, deadline=None)
    @given(values)
    def test_every_canonical_value_decodes_to_msgpacks_value(self, value: Any) -> None:
        """msgspec and msgpack build the same value from a canonical encoding, and say so."""
        data = encode_value(value)
        got = decode_part(data)
        assert _same(got, _msgpack(data))
        assert decoded_alike(got)

    @settings(max_examples=600, deadline=None)
    @given(st.binary(max_size=64) | adversarial)
    def test_any_bytes_msgspec_keeps_decode_to_msgpacks_value(self, data: bytes) -> None:
        """Whatever msgspec decodes and decoded_alike keeps, msgpack decodes to the same value."""
        try:
            got = decode_part(data)
        except Exception:
            return
        if not decoded_alike(got):
            return
        assert _same(got, _msgpack(data))

    @pytest.mark.parametrize(
        "data",
        [
            b"\xd6\xff\x00\x00\x00\x01",  # a timestamp: msgspec datetime, msgpack Timestamp
            b"\x81\x92\x01\x02\x03",  # an array map key: msgspec tuple, msgpack refuses
            b"\x91\x81\xd6\xff\x00\x00\x00\x01\x01",  # a timestamp as a nested map key
            b"\x91" * 3000 + b"\xc0",  # deeper than either decoder walks
        ],
    )
    def test_what_the_decoders_disagree_on_is_never_kept(self, data: bytes) -> None:
        """A timestamp, an array key or a too-deep value is flagged (or refused) by msgspec."""
        try:
            got = decode_part(data)
        except (RecursionError, ValueError):
            return
        assert not decoded_alike(got)

    def test_empty_and_trailing_bytes_are_refused(self) -> None:
        """No value and two values are refused, as msgpack refuses them."""
        for data in (b"", encode_value(1) + encode_value(2)):
            with pytest.raises(ValueError):
                decode_part(data)
            with pytest.raises(ValueError):
                _msgpack(data)


def _manifest_bytes(metadata: bytes) -> bytes:
    """A manifest map (version, a one-part state) with the given encoded metadata."""
    parts = {"a": digest(encode_value(1))}
    state = {"kind": "parts", "parts": parts, "digest": digest(encode_value(parts))}
    head: bytes = b"\x83" + encode_value("cpstore") + encode_value(1) + encode_value("state")
    return head + encode_value(state) + encode_value("metadata") + metadata


class TestManifestDecode:
    def test_a_timestamp_in_metadata_decodes_as_msgpack_decodes_it(self) -> None:
        """A forged manifest's timestamp is msgpack's Timestamp, never msgspec's datetime."""
        data = _manifest_bytes(msgpack.packb({"t": msgpack.Timestamp(1, 0)}))
        m = check_manifest_state(digest(data), data)
        assert type(m["metadata"]["t"]) is msgpack.Timestamp

    def test_an_array_key_in_metadata_is_refused_as_msgpack_refuses_it(self) -> None:
        """A map key msgpack cannot hold is refused, named, never kept as a tuple key."""
        data = _manifest_bytes(b"\x81\x92\x01\x02\x03")
        with pytest.raises(IntegrityError, match="manifest is not canonical"):
            check_manifest_state(digest(data), data)

    @settings(max_examples=200, deadline=None)
    @given(st.dictionaries(st.text(max_size=5), values, max_size=4))
    def test_manifests_with_any_canonical_metadata_decode_to_msgpacks_map(
        self, metadata: dict[str, Any]
    ) -> None:
        """The manifest map equals msgpack's decode of the same bytes."""
        data = _manifest_bytes(encode_value(metadata))
        assert _same(check_manifest_state(digest(data), data), _msgpack(data))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(tmp_path / "s") as st_:
        yield st_


def _forge_parts(store: Store, parts_bytes: dict[str, bytes], extra: bytes = b"") -> str:
    """A hash-valid checkpoint whose parts are the given raw object bytes; ``extra``: one
    more raw (key, value) pair appended to its manifest map."""
    cid = store.recorder("run").checkpoint(0, {k: 0 for k in parts_bytes})
    m = store.manifest(cid).raw
    parts = {name: store.put_object(data) for name, data in parts_bytes.items()}
    m["state"] = {**m["state"], "parts": parts, "digest": digest(encode_value(parts))}
    return forge_checkpoint(store, m, extra).hex()


class TestThroughTheStore:
    def test_a_forged_timestamp_part_reads_as_msgpack_reads_it(self, store: Store) -> None:
        """The whole-state read gives the part-by-part path's value for a timestamp part."""
        cid = _forge_parts(store, {"a": encode_value("x"), "t": b"\xd6\xff\x00\x00\x00\x01"})
        with store.read(cid) as cp:
            state = cp.state()
            one = cp.state_part("t")
        assert isinstance(state, dict)
        assert type(state["t"]) is msgpack.Timestamp
        assert state == {"a": "x", "t": one}

    def test_a_forged_array_key_part_is_refused_naming_the_part(self, store: Store) -> None:
        """A part msgspec would decode with a tuple key is refused as not canonical."""
        cid = _forge_parts(store, {"a": encode_value("x"), "bad": b"\x81\x92\x01\x02\x03"})
        with store.read(cid) as cp, pytest.raises(IntegrityError, match="bad") as info:
            cp.state()
        assert "canonical" in info.value.what

    def test_fast_reads_equal_part_by_part_reads(self, store: Store) -> None:
        """read_parts gives state_part's value for every part of varied states."""
        states = [
            {"s": "text", "b": b"\x00\xff", "n": 2**70, "l": [1, {"k": [None, 1.5]}]},
            {"s": "other", "m": {1: "int key", "x": {"y": []}}, "f": float("inf")},
        ]
        rec = store.recorder("r")
        for i, state in enumerate(states):
            cid = rec.checkpoint(i, state)
            with store.read(cid) as cp:
                assert cp.state() == {name: cp.state_part(name) for name in state}
                assert cp.state() == state
        got = [e.state for e in store.history_states("r")]
        assert got == states[::-1]

    def test_fast_read_without_hints_goes_through_the_index(self, store: Store) -> None:
        """No hint block: every part is found by its index row, compared and hashed."""
        cid = store.recorder("r").checkpoint(0, {"a": "one", "b": [2]})
        backend = store.backend
        objects = contents(backend.dbs)[0]
        with backend.read_txn() as txn:
            raw, _ = backend.load_raw(txn, bytes.fromhex(cid), verify=True, full=False)
            assert read_parts(txn, objects, raw["state"]["parts"], b"") == {"a": "one", "b": [2]}


class TestContents:
    def test_contents_are_rebuilt_when_the_heap_is_adopted(self) -> None:
        """The cached handles follow the dict: a new heap handle gives new Content."""
        dbs: dict[str, Any] = {"objects": object(), "checkpoints": object()}
        objects, records = contents(dbs)
        assert contents(dbs) == (objects, records)
        assert objects.heap is None
        dbs.update(heap=object(), oloc=object(), cloc=object())
        objects2, records2 = contents(dbs)
        assert isinstance(objects2, Content)
        assert objects2.heap is dbs["heap"] and objects2.index is dbs["oloc"]
        assert records2.index is dbs["cloc"]
