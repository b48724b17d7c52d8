"""perf99's cheaper calls on the put and get paths hand over exactly what the keyword
calls did: the recorder builds its ``CheckpointWrite`` positionally, ``Store.read``
passes ``verify`` positionally, and the checkpoint id of a manifest and of a parsed hex
id come from functions typed as giving a ``Digest`` (no ``Digest()`` call). Each field
is checked by name here, so a positional argument out of its field's place fails.
``fast_read.contents`` returns its cached pair as it is (no tuple built per call);
``checked_metadata`` takes a dict without the ABC check, every other mapping with it;
``extension_records`` takes bytes as they are and copies any other buffer.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import msgpack
import pytest
from xxhash import xxh3_128_digest

import cpstore
from cpstore.errors import IntegrityError, InvalidInputError
from cpstore.native.binding import digest
from cpstore.store.content import KIND_OBJECT, KIND_RECORD
from cpstore.store.fast_read import contents
from cpstore.store.model import (
    CheckpointWrite,
    checked_metadata,
    extension_records,
    parse_id,
    unpack_checkpoint_value,
)


def _capture(st: Any) -> list[CheckpointWrite]:
    """The ops the recorder hands to the backend's commit, committed as before."""
    seen: list[CheckpointWrite] = []
    backend = st.backend
    commit = backend.commit

    def spy(op: CheckpointWrite) -> None:
        seen.append(op)
        commit(op)

    backend.commit = spy
    return seen


@pytest.mark.parametrize("seal", [True, False])
def test_the_recorders_write_carries_each_field_by_name(tmp_path: Path, seal: bool) -> None:
    with cpstore.open(tmp_path / "s", durability="none") as st:
        seen = _capture(st)
        rec = st.recorder("run-a", branch="side")
        rec.effect("mail", b"sent")
        first = rec.checkpoint(0, {"a": "x" * 50, "b": [1, 2]}, seal_ledger=seal)
        second = rec.checkpoint(1, {"a": "y" * 50, "b": [1, 2]}, seal_ledger=seal)
        assert [op.cid.hex() for op in seen] == [first, second]
        op0, op1 = seen
        for op in seen:
            assert type(op.cid) is bytes
            assert op.run_id == "run-a"
            assert op.branch == "side"
            created, manifest = unpack_checkpoint_value(op.value)
            assert isinstance(created, float)
            assert op.cid == digest(bytes(manifest)) == xxh3_128_digest(bytes(manifest))
            assert isinstance(op.objects, dict)
            assert isinstance(op.must_exist, list)
            assert set(op.must_exist).isdisjoint(op.objects)
            assert op.extra_meta == () and op.meta_expected == ()
            assert len(op.hint_keys) == 2
        assert op0.expected_ref is None and op0.parent is None
        assert op1.expected_ref == op0.cid and op1.parent == op0.cid
        effects = msgpack.unpackb(bytes(unpack_checkpoint_value(op1.value)[1]))["effects"]
        assert type(effects) is bytes
        assert (op1.sealed_ledger == effects) if seal else (op1.sealed_ledger is None)
        rec.checkpoint(2, {"a": "z"})  # sealed: no effect left unsealed at the end
        fork = st.recorder("run-a", branch="fork", parent=first)  # a new branch: no head yet
        fork.checkpoint(1, {"a": "w"})
        assert seen[-1].expected_ref is None and seen[-1].parent == op0.cid
        assert seen[-1].branch == "fork"


def test_parse_id_gives_the_bytes_and_refuses_as_before() -> None:
    hex_id = "00ff" * 8
    got = parse_id(hex_id)
    assert type(got) is bytes and got == bytes.fromhex(hex_id)
    for bad in ("zz" * 16, "0" * 31, 5, b"00" * 16):
        with pytest.raises(InvalidInputError):
            parse_id(bad)


def test_store_read_passes_verify_through(tmp_path: Path) -> None:
    """``Store.read(id, verify=...)``: a manifest's bytes changed behind cpstore's back
    are refused when verifying and read when not (the flag reached the view)."""
    with cpstore.open(tmp_path / "s", durability="none") as st:
        cid = st.recorder("r").checkpoint(0, {"a": 1})
        with st.read(cid) as cp:
            assert cp.state() == {"a": 1}
        real = st.backend.load_raw

        def forged(txn: Any, key: bytes, **kw: Any) -> Any:
            if kw.get("verify"):
                raise IntegrityError("manifest bytes do not match the checkpoint id")
            return real(txn, key, **kw)

        st.backend.load_raw = forged
        with pytest.raises(IntegrityError), st.read(cid):
            pass
        with st.read(cid, verify=False) as cp:
            assert cp.state() == {"a": 1}


def test_contents_is_built_once_per_table_set_and_again_after_adoption(tmp_path: Path) -> None:
    """``fast_read.contents``: every hit hands out the one (objects, records) pair built for
    that dbs dict (immutable, its handles stateless); a dbs whose heap handle changed (a
    read-only handle adopting the heap tables in place) gets a new pair on its tables."""
    with cpstore.open(tmp_path / "s", durability="none") as st:
        dbs = st.backend.dbs
        objects, records = pair = contents(dbs)
        assert contents(dbs) is pair
        assert (objects.kind, records.kind) == (KIND_OBJECT, KIND_RECORD)
        assert objects.heap is dbs["heap"] and records.heap is dbs["heap"]
        moved = dict(dbs)
        moved["heap"] = object()  # another handle under the same name, as adoption makes
        again = contents(moved)
        assert again is not pair and again[0].heap is moved["heap"]
        assert contents(moved) is again


class _Meta(Mapping[str, Any]):
    """A mapping that is not a dict (the ABC path of checked_metadata)."""

    def __init__(self, items: dict[str, Any]) -> None:
        self._items = items

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


class _DictKind(dict[str, Any]):
    """A dict subclass: not ``type(...) is dict``, still a mapping."""


def test_checked_metadata_takes_every_mapping_and_refuses_the_rest() -> None:
    """The dict shortcut before the ABC check answers as the ABC does."""
    want = checked_metadata({"source": "loop", "step": 3}, "metadata")
    for same in (
        _Meta({"source": "loop", "step": 3}),
        _DictKind(source="loop", step=3),
        MappingProxyType({"source": "loop", "step": 3}),
    ):
        assert checked_metadata(same, "metadata") == want
    assert checked_metadata(None, "metadata") == ({}, b"\x80")
    for bad in ([("source", "loop")], "source", b"x", 3, (("a", 1),)):
        with pytest.raises(InvalidInputError, match="metadata must be a mapping"):
            checked_metadata(bad, "metadata")
    with pytest.raises(InvalidInputError, match="keys must be str"):
        checked_metadata({1: "x"}, "metadata")


def test_extension_records_are_bytes_copied_from_any_buffer() -> None:
    """Bytes pass as they are; a bytearray or a memoryview is copied (a later change to
    it leaves the records as given); None stays None; the prefix check refuses as before."""
    key, value = b"lg/" + b"k" * 20, b"v" * 30
    buf_key, buf_value = bytearray(key), bytearray(value)
    given: list[Any] = [(key, value), (buf_key, None), (memoryview(key), memoryview(buf_value))]
    got = extension_records(given)
    assert got == ((key, value), (key, None), (key, value))
    assert all(type(k) is bytes and (v is None or type(v) is bytes) for k, v in got)
    assert got[0][0] is key and got[0][1] is value
    buf_key[0:3] = b"xx/"
    buf_value[0:1] = b"w"
    assert got == ((key, value), (key, None), (key, value))
    with pytest.raises(InvalidInputError, match="extension prefix"):
        extension_records([(b"other/" + key, value)])
