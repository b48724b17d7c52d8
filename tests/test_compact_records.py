"""Store layout 6: checkpoint records as compact ``r`` heap entries (record_codec.py).

The dictionary and the entry bytes are pinned; every damaged frame (flipped,
truncated, a bomb, a dictionary id, a checksum, a second block or frame,
trailing bytes) is an IntegrityError naming ``cloc/<id> -> heap/<seq>``, never
another record; layout-5 ``c`` entries stay readable and are never rewritten.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st_
from stored import record_entry, to_layout_5

import cpstore
from cpstore.cli import main
from cpstore.errors import IntegrityError
from cpstore.native.binding import digest
from cpstore.store import record_codec
from cpstore.store.content import KIND_COMPACT, KIND_RECORD, records_of
from cpstore.store.facade import Store
from cpstore.store.heap_check import heap_problems
from cpstore.store.model import STORE_VERSION
from cpstore.store.record_codec import (
    MAX_RECORD_CONTENT,
    RECORD_DICT,
    RECORD_DICT_VERSION,
    compress_record,
    frame_problem,
    inflate_record,
    why_not,
)

#: The record of ``recorder("r").checkpoint(0, {"a": 1})`` as a build of layout 6 wrote it.
GOLDEN_CID = "8eb8d2171fd96f0a08f166a6f118757c"
GOLDEN_RECORD = bytes.fromhex(
    "9696b87ebac3da416883610e30fb9a3f8fa47374657000a47461677390a5737461746584a46b696e64"
    "a57061727473a5706172747381a161c41051025a4491835505e12ef9d2eb86ceeba6646967657374c4"
    "10557c71f342794728698ab06c31cd6b6fa76368756e6b656480a66272616e6368a46d61696ea67061"
    "72656e74c0a672756e5f6964a172a6746f6b656e73c0a7637073746f726501a765666665637473c0a7"
    "6861726e657373c0a86d6574616461746180aa63616c6c5f6772617068c0aa7472616e736372697074"
    "c0ac6f62736572766174696f6e73c0ad6c65646765725f7365616c6564c3"
)
#: Its heap entry: b"r", 16, the id, hint count 1, hint 1, the zstd frame.
GOLDEN_ENTRY = bytes.fromhex(
    "72108eb8d2171fd96f0a08f166a6f118757c000000010000000128b52ffd20ebb5020064049696b8"
    "7ebac3da416883610e30fb9a3f8fa4737465700081a161c41051025a4491835505e12ef9d2eb86ce"
    "eb557c71f342794728698ab06c31cd6b6fc0a672756e5f6964a1720400ef3613026ced5bc1a245d3"
    "04"
)
_HEAD = 26  # kind, key length, the id, hint count, one hint


def _put_entry(st: Store, seq: bytes, entry: bytes) -> None:
    """Overwrite one heap entry behind the store's back."""
    with st.backend.env.env.begin(write=True) as txn:
        txn.put(seq, entry, db=st.backend.dbs["heap"])


def _one(tmp_path: Path) -> tuple[Store, str, bytes, bytes]:
    st = cpstore.open(tmp_path / "s")
    cid = st.recorder("r").checkpoint(0, {"a": 1})
    seq, entry = record_entry(st, cid)
    return st, cid, seq, entry


def _where(cid: str, seq: bytes) -> str:
    return f"cloc/{cid} -> heap/{int.from_bytes(seq, 'big')}"


def _frame(record: bytes, **kw: Any) -> bytes:
    """A frame of ``record`` written with the dictionary but other frame options."""
    dict_ = zstandard.ZstdCompressionDict(RECORD_DICT, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    return zstandard.ZstdCompressor(level=1, dict_data=dict_, **kw).compress(record)


def _raw_blocks(*blocks: tuple[bytes, bool]) -> bytes:
    """A frame of raw blocks (no compression) declaring their total size (1-byte size)."""
    total = sum(len(b) for b, _ in blocks)
    out = b"\x28\xb5\x2f\xfd" + bytes((0x20, total))
    for data, last in blocks:
        out += ((len(data) << 3) | int(last)).to_bytes(3, "little") + data
    return out


class TestGolden:
    def test_the_record_dictionary_v1_is_pinned(self) -> None:
        """Version 1: 212 bytes whose xxh3-128 digest is pinned (docs/format.md)."""
        assert RECORD_DICT_VERSION == 1 and KIND_COMPACT == 0x72
        assert len(RECORD_DICT) == 212
        assert digest(RECORD_DICT).hex() == "258bcc8bea304b7af93b598805347a4b"
        assert RECORD_DICT.startswith(b"\x8f\xa4step\xa4tags\x90\xa5state\x84")
        assert RECORD_DICT.endswith(b"\xadledger_sealed\xc3")

    def test_the_golden_frame_inflates_to_its_record(self) -> None:
        """A frame written by this layout's first build inflates, byte for byte, forever."""
        record = inflate_record(GOLDEN_ENTRY[_HEAD:])
        assert record == GOLDEN_RECORD

    def test_a_golden_entry_reads_as_the_checkpoint(self, tmp_path: Path) -> None:
        """The pinned entry bytes put in a store's heap read back as the checkpoint, verified."""
        with cpstore.open(tmp_path / "s") as st:
            cid = st.recorder("r").checkpoint(0, {"a": 1})
            assert cid == GOLDEN_CID
            seq, _ = record_entry(st, cid)
            _put_entry(st, seq, GOLDEN_ENTRY)
            with st.read(cid) as cp:
                assert cp.state() == {"a": 1}
            assert st.verify().ok
            with st.backend.read_txn() as txn:
                value, hints = records_of(st.backend.dbs).hinted(txn, bytes.fromhex(cid))
                assert value is not None and bytes(value) == GOLDEN_RECORD
                assert hints == bytes.fromhex("00000001")

    def test_a_written_entry_has_the_pinned_shape(self, tmp_path: Path) -> None:
        """b"r", 16, id, hints, then one frame: magic, no dict id, no checksum, size declared."""
        st, cid, _seq, entry = _one(tmp_path)
        with st:
            assert entry[:_HEAD] == b"r\x10" + bytes.fromhex(cid) + bytes.fromhex(
                "0000000100000001"
            )
            frame = entry[_HEAD:]
            assert frame[:4] == b"\x28\xb5\x2f\xfd" and frame[4] & 0x0F == 0
            params = zstandard.get_frame_parameters(frame)
            assert params.dict_id == 0 and not params.has_checksum
            with st.backend.read_txn() as txn:
                record = records_of(st.backend.dbs).get(txn, bytes.fromhex(cid))
                assert record is not None and params.content_size == len(record)
            assert frame_problem(frame) is None and len(frame) < len(bytes(record))


class TestCodec:
    @settings(max_examples=200, deadline=None)
    @given(st_.binary(min_size=0, max_size=4096))
    def test_any_record_round_trips_or_is_stored_as_it_is(self, data: bytes) -> None:
        """compress then inflate gives the bytes back; None only when short or not smaller."""
        frame = compress_record(data)
        if frame is None:
            assert len(data) < 16 or len(record_codec._CONTEXTS.compressor.compress(data)) >= len(
                data
            )
            return
        assert len(frame) < len(data)
        assert inflate_record(frame) == data

    def test_the_empty_tiny_and_huge_records_are_not_compacted(self) -> None:
        """Below 16 bytes, or above one zstd block (128 KiB): stored as c entries."""
        assert compress_record(b"") is None and compress_record(b"x" * 15) is None
        assert compress_record(bytes(MAX_RECORD_CONTENT + 1)) is None
        frame = compress_record(bytes(MAX_RECORD_CONTENT))
        assert frame is not None and inflate_record(frame) == bytes(MAX_RECORD_CONTENT)

    @settings(max_examples=300, deadline=None)
    @given(st_.binary(min_size=0, max_size=300))
    def test_adversarial_frames_never_inflate_to_anything_but_a_checked_size(
        self, junk: bytes
    ) -> None:
        """Arbitrary bytes after the magic: refused, or inflated to exactly the declared size."""
        frame = b"\x28\xb5\x2f\xfd" + junk
        record = inflate_record(frame)
        if record is None:
            assert why_not(frame)[0]
        else:
            assert len(record) == zstandard.frame_content_size(frame) <= MAX_RECORD_CONTENT

    @settings(max_examples=300, deadline=None)
    @given(
        st_.sampled_from([0x20, 0x60, 0xA0, 0xE0, 0x21, 0x24, 0x00]),
        st_.binary(min_size=0, max_size=64),
        st_.lists(st_.tuples(st_.integers(0, 200), st_.integers(1, 255)), max_size=4),
    )
    def test_mutated_real_frames_are_refused_or_inflate_to_their_declared_size(
        self, descriptor: int, tail: bytes, flips: list[tuple[int, int]]
    ) -> None:
        """A writer's frame with its descriptor swapped, bytes flipped and bytes appended:
        refused with a reason, or exactly the declared size, never more than the cap."""
        frame = bytearray(compress_record(GOLDEN_RECORD) or b"")
        frame[4] = descriptor
        for at, mask in flips:
            frame[at % len(frame)] ^= mask
        data = bytes(frame) + tail
        record = inflate_record(data)
        if record is None:
            assert why_not(data)[0]
        else:
            assert frame_problem(data) is None
            assert len(record) == zstandard.frame_content_size(data) <= MAX_RECORD_CONTENT

    def test_threads_compress_and_inflate_with_their_own_contexts(self) -> None:
        """Four threads at once: every record round-trips (zstandard contexts are per thread)."""
        records = [GOLDEN_RECORD[:-8] + i.to_bytes(8, "big") for i in range(400)]
        errors: list[BaseException] = []

        def work() -> None:
            try:
                for record in records:
                    frame = compress_record(record)
                    assert frame is not None and inflate_record(frame) == record
            except BaseException as exc:  # handed to the main thread
                errors.append(exc)

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []

    def test_a_huge_record_is_written_as_a_c_entry_and_reads(self, tmp_path: Path) -> None:
        """Metadata past the cap: the record entry is b"c" (read by every layout), verified."""
        with cpstore.open(tmp_path / "s") as st:
            meta = {"blob": "z" * (MAX_RECORD_CONTENT + 10)}
            cid = st.recorder("r").checkpoint(0, {"a": 1}, metadata=meta)
            _, entry = record_entry(st, cid)
            assert entry[0] == KIND_RECORD
            with st.read(cid) as cp:
                assert cp.state() == {"a": 1} and cp.manifest.metadata == meta
            assert st.verify().ok


_DAMAGES: dict[str, Callable[[bytes], bytes]] = {
    "bomb: a huge declared size": lambda f: (
        b"\x28\xb5\x2f\xfd\xe0" + (1 << 40).to_bytes(8, "little") + b"\x81\x00\x00" + bytes(16)
    ),
    "bomb: a valid frame over the cap": lambda f: _frame(bytes(MAX_RECORD_CONTENT * 2)),
    "a dictionary id": lambda f: f[:4] + bytes((f[4] | 1, 7)) + f[5:],
    "a checksum": lambda f: _frame(GOLDEN_RECORD, write_checksum=True),
    "trailing bytes": lambda f: f + b"\x00",
    "a second frame": lambda f: f + f,
    "a skippable frame before": lambda f: b"\x50\x2a\x4d\x18\x01\x00\x00\x00x" + f,
    "a skippable frame after": lambda f: f + b"\x50\x2a\x4d\x18\x01\x00\x00\x00x",
    "two blocks": lambda f: _raw_blocks((bytes(8), False), (bytes(8), True)),
    "a reserved block": lambda f: f[:6] + bytes((f[6] | 0x06,)) + f[7:],
    "no frame at all": lambda f: b"",
    "a frame with no declared size": lambda f: _frame(GOLDEN_RECORD, write_content_size=False),
}


class TestDamage:
    @pytest.mark.parametrize("damage", sorted(_DAMAGES))
    def test_a_damaged_frame_is_named_by_reads_and_verify(
        self, tmp_path: Path, damage: str
    ) -> None:
        """Every read (verify=False too), hinted and verify name cloc/<id> -> heap/<seq>."""
        st, cid, seq, entry = _one(tmp_path)
        with st:
            _put_entry(st, seq, entry[:_HEAD] + _DAMAGES[damage](entry[_HEAD:]))
            for verify in (True, False):
                with pytest.raises(IntegrityError, match="compact checkpoint record") as info:
                    st.read(cid, verify=verify).__enter__()
                assert info.value.where == _where(cid, seq)
            with st.backend.read_txn() as txn, pytest.raises(IntegrityError) as info:
                records_of(st.backend.dbs).hinted(txn, bytes.fromhex(cid))
            assert info.value.where == _where(cid, seq)
            report = st.verify()
            assert not report.ok
            assert any(p.where == _where(cid, seq) for p in report.problems)
            with st.backend.read_txn() as txn:
                assert any(p.where == _where(cid, seq) for p in heap_problems(txn, st.backend.dbs))

    def test_every_truncation_is_refused_naming_the_location(self, tmp_path: Path) -> None:
        """The entry cut at any byte of its hints or frame: IntegrityError, never a record."""
        st, cid, seq, entry = _one(tmp_path)
        with st:
            for cut in range(18, len(entry)):
                _put_entry(st, seq, entry[:cut])
                with pytest.raises(IntegrityError) as info:
                    st.read(cid, verify=False).__enter__()
                assert info.value.where == _where(cid, seq), cut
            _put_entry(st, seq, entry)
            assert st.verify().ok

    def test_every_flipped_frame_byte_fails_or_reads_the_right_state(self, tmp_path: Path) -> None:
        """A flipped byte anywhere in the frame: a verified read of the state raises (location
        or manifest hash), or the flip is in the record's 16-byte header (created_at and its
        check, outside the manifest hash) and verify names it."""
        st, cid, seq, entry = _one(tmp_path)
        raised = 0
        with st:
            for at in range(_HEAD, len(entry)):
                damaged = bytearray(entry)
                damaged[at] ^= 0xFF
                _put_entry(st, seq, bytes(damaged))
                try:
                    with st.read(cid) as cp:
                        assert cp.state() == {"a": 1}, at
                except IntegrityError:
                    raised += 1
                    continue
                assert not st.verify().ok, at  # the header's created_at check
            assert raised >= len(entry) - _HEAD - 16
            _put_entry(st, seq, entry)
            assert st.verify().ok


class TestLayouts:
    def test_a_layout_5_store_reads_read_only_and_upgrades_lazily_on_a_writable_open(
        self, tmp_path: Path
    ) -> None:
        """c entries stay as they are (read-only at 5, then at 6); new records are r; gc and
        verify handle both kinds."""
        path = tmp_path / "s"
        with cpstore.open(path) as st:
            old = [st.recorder("old").checkpoint(i, {"a": i}) for i in range(3)]
        assert to_layout_5(path) == 3
        with cpstore.open(path, readonly=True) as ro:
            assert ro.backend.layout == 5
            with ro.read(old[-1]) as cp:
                assert cp.state() == {"a": 2}
            assert ro.verify().ok
        with cpstore.open(path) as st:
            assert st.backend.layout == STORE_VERSION == 6
            new = [st.recorder("new").checkpoint(i, {"b": i}) for i in range(3)]
            assert {record_entry(st, c)[1][0] for c in old} == {KIND_RECORD}
            assert {record_entry(st, c)[1][0] for c in new} == {KIND_COMPACT}
            for cid in old + new:
                with st.read(cid) as cp:
                    assert len(cp.state()) == 1
            assert st.verify().ok
            st.delete_run("old")
            st.delete_run("new")
            with st.backend.read_txn() as txn:
                assert txn.stat(st.backend.db("heap"))["entries"] == 0
                assert heap_problems(txn, st.backend.dbs) == []
            assert st.verify().ok

    def test_push_and_pull_between_layout_5_and_layout_6_stores(self, tmp_path: Path) -> None:
        """5 -> 6 (source read-only stays 5, records land as r) and 6 -> a store at 5
        (upgraded by the writable open): every checkpoint reads, verify clean."""
        five, six = tmp_path / "five", tmp_path / "six"
        with cpstore.open(five) as st:
            old = [st.recorder("old").checkpoint(i, {"a": i}) for i in range(3)]
        to_layout_5(five)
        with cpstore.open(six) as st:
            new = [st.recorder("new").checkpoint(i, {"b": i}) for i in range(3)]
        assert main(["push", "--store", str(five), str(six)]) == 0
        with cpstore.open(five, readonly=True) as st:
            assert st.backend.layout == 5
        assert main(["pull", "--store", str(five), str(six)]) == 0
        for where in (five, six):
            with cpstore.open(where, readonly=True) as st:
                assert st.backend.layout == STORE_VERSION
                assert st.verify().ok, st.verify().problems
                for cid in old + new:
                    with st.read(cid) as cp:
                        assert len(cp.state()) == 1
                kinds = {record_entry(st, c)[1][0] for c in old + new}
                assert KIND_COMPACT in kinds
