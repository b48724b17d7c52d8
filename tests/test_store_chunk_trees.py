"""Chunk trees and framed objects (store layout 3, issue 16).

Large parts and bytes states are stored as content-defined chunks in
compressed frames under a tree of digests: they round-trip, an append costs
the appended bytes, damage and decompression bombs are refused by name, old
(layout-2) chunk indexes stay readable, and concurrent writers share chunks.
"""

from __future__ import annotations

import json
import multiprocessing
import random
import threading
from pathlib import Path
from typing import Any

import lmdb
import pytest
from stored import edit_raw, raw_items, raw_put

from cpstore import cli
from cpstore.errors import IntegrityError
from cpstore.native.binding import digest
from cpstore.native.canonical import decode_value, encode_value
from cpstore.store import chunk_tree, codec
from cpstore.store.chunk_tree import RUN_MIN, TREE_THRESHOLD, build_tree, value_cuts
from cpstore.store.codec import (
    MAX_FRAME_CONTENT,
    decode_frame,
    encode_frame,
    frame_key,
    is_frame_key,
)
from cpstore.store.content import objects_of
from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store
from cpstore.store.model import CHUNK_SIZE, STORE_VERSION
from cpstore.store.objects import chunk_index, put_object
from cpstore.store.recorder import Recorder
from cpstore.store.stats import store_stats

WORDS = (
    "the",
    "planner",
    "asked",
    "search",
    "tool",
    "for",
    "weather",
    "and",
    "then",
    "wrote",
    "a",
    "reply",
)


def _text(n: int, seed: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(n // 5))[:n]


def _history(n: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"{i}: " + _text(900, i)} for i in range(n)]


def _objects(st: Store) -> dict[bytes, bytes]:
    with st.backend.read_txn() as txn:
        return dict(raw_items(txn, st.backend.dbs, "objects"))


@pytest.fixture
def store(tmp_path: Path) -> Any:
    """A fresh store."""
    with open_store(tmp_path / "s") as st:
        yield st


class TestRoundTrip:
    @pytest.mark.parametrize(
        "value",
        [
            _history(40),
            {f"k{i:03d}": _text(700, i) for i in range(30)},
            _text(50_000, 1),
            random.Random(2).randbytes(200_000),
            [random.Random(3).randbytes(100_000), "tail"],  # one element past CHUNK_MAX
            list(range(5000)),  # many tiny elements grouped into runs
        ],
        ids=["list", "map", "str", "bytes", "huge-element", "tiny-elements"],
    )
    def test_large_parts_read_back_equal(self, store: Store, value: Any) -> None:
        """A part past TREE_THRESHOLD is a chunk tree and reads back equal, verified or not."""
        assert len(encode_value(value)) > TREE_THRESHOLD
        cid = store.recorder("r").checkpoint(1, {"v": value, "small": 1})
        for verify in (True, False):
            with store.read(cid, verify=verify) as cp:
                assert cp.state_part("v") == value
                assert cp.state() == {"v": value, "small": 1}
        assert any(is_frame_key(k) for k in _objects(store))
        assert store.verify().ok

    def test_large_bytes_state_reads_back_equal(self, store: Store) -> None:
        """A bytes state past the threshold is cut by the chunker alone and reads back equal."""
        data = _text(300_000, 4).encode()
        cid = store.recorder("r").checkpoint(1, data)
        with store.read(cid) as cp:
            assert cp.state() == data

    def test_text_chunks_are_stored_compressed(self, store: Store) -> None:
        """Chunks of text are zstd frames, smaller than the bytes they hold."""
        store.recorder("r").checkpoint(1, {"h": _history(30)})
        frames = [v for k, v in _objects(store).items() if is_frame_key(k)]
        assert frames and all(v[0] == codec.CODEC_ZSTD for v in frames)
        assert sum(len(v) for v in frames) < 0.8 * sum(
            codec.frame_content_size(v, "") for v in frames
        )

    def test_ids_do_not_depend_on_compression(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The same state gives the same checkpoint id whether chunks are compressed or not."""
        state = {"h": _history(20)}
        with open_store(tmp_path / "a") as st:
            a = st.recorder("r").checkpoint(1, state)
        monkeypatch.setattr(
            chunk_tree, "encode_frame", lambda data: encode_frame(data, compress=False)
        )
        with open_store(tmp_path / "b") as st:
            b = st.recorder("r").checkpoint(1, state)
            frames = [v for k, v in _objects(st).items() if is_frame_key(k)]
            assert frames and all(v[0] == codec.CODEC_STORED for v in frames)
        assert a == b


class TestAppendCost:
    def test_appending_a_message_stores_about_the_message(self, store: Store) -> None:
        """Each append writes the new chunk, the root and rarely a node: bytes stay flat."""
        rec = store.recorder("r")
        history = _history(60)
        grew = []
        for step in range(1, len(history) + 1):
            before = _objects(store)
            rec.checkpoint(step, {"messages": history[:step]})
            after = _objects(store)
            new = {k: v for k, v in after.items() if k not in before}
            grew.append((len(new), sum(len(v) for v in new.values())))
        late = grew[30:]
        assert max(n for n, _ in late) <= 6
        # The message is ~900 bytes of text; what is stored per step never grows with it.
        assert max(b for _, b in late) < 2000
        assert sum(b for _, b in late[-10:]) <= 1.5 * sum(b for _, b in late[:10])

    def test_cuts_before_an_append_are_kept(self) -> None:
        """value_cuts of a list is a prefix of the cuts of the list with more elements."""
        short, long_ = encode_value(_history(30)), encode_value(_history(31))
        h1, c1 = value_cuts(short, canonical=True)
        h2, c2 = value_cuts(long_, canonical=True)
        body1, body2 = short[h1:], long_[h2:]
        assert body2.startswith(body1)
        stable = [c - h1 for c in c1[:-1]]
        assert [c - h2 for c in c2[: len(stable)]] == stable

    def test_element_runs_are_at_least_run_min_except_the_tail(self) -> None:
        """Every element-run chunk but the last has at least RUN_MIN bytes."""
        data = encode_value([f"x{i}" * 20 for i in range(2000)])
        head, cuts = value_cuts(data, canonical=True)
        sizes = [b - a for a, b in zip([head, *cuts], cuts, strict=False)]
        assert all(s >= RUN_MIN for s in sizes[:-1])
        assert cuts[-1] == len(data)

    def test_tree_of_a_prefix_shares_its_complete_nodes(self) -> None:
        """Complete nodes of a shorter history are all in the tree of a longer one."""
        a = build_tree(encode_value(_history(300)), canonical=True)
        b = build_tree(encode_value(_history(320)), canonical=True)
        upper = chunk_tree.read_root(a.nodes[a.root], "")[3]
        assert upper is not None and upper in a.nodes  # a 2+ level tree has an upper spine
        shared = set(a.nodes) - {a.root, upper}
        assert shared and shared <= set(b.nodes)


class TestFrames:
    def test_frame_round_trips_both_codecs(self) -> None:
        """A frame decodes to its chunk whether stored or zstd-compressed."""
        text = _text(4000, 5).encode()
        for compress in (True, False):
            frame = encode_frame(text, compress=compress)
            assert frame[0] == (codec.CODEC_ZSTD if compress else codec.CODEC_STORED)
            assert decode_frame(frame, "x") == text
        noise = random.Random(6).randbytes(4000)
        assert encode_frame(noise)[0] == codec.CODEC_STORED  # zstd would not save space

    def test_declared_size_past_the_bound_is_refused_before_inflating(self) -> None:
        """A bomb (declared size > MAX_FRAME_CONTENT) is an IntegrityError naming the bound."""
        frame = encode_frame(b"a" * 10_000)
        bomb = frame[:1] + (MAX_FRAME_CONTENT + 1).to_bytes(4, "little") + frame[5:]
        with pytest.raises(IntegrityError, match="refused before inflating"):
            decode_frame(bomb, "objects/x")

    def test_zstd_header_that_disagrees_with_the_declared_size_is_refused(self) -> None:
        """A frame whose zstd header claims another size never reaches the decompressor."""
        frame = encode_frame(b"a" * 10_000)
        lie = frame[:1] + (9_999).to_bytes(4, "little") + frame[5:]
        with pytest.raises(IntegrityError, match="disagrees with its declared size"):
            decode_frame(lie, "objects/x")

    def test_damaged_frames_are_integrity_errors(self) -> None:
        """Truncated, unknown-codec and garbage frames raise IntegrityError, never crash."""
        frame = encode_frame(_text(5000, 7).encode())
        for bad in (b"", frame[:3], b"\x07" + frame[1:], frame[:5] + b"garbage" * 3, frame[:-4]):
            with pytest.raises(IntegrityError):
                decode_frame(bad, "objects/x")

    def test_frame_key_is_the_content_digest_plus_tag(self) -> None:
        """A frame's key is digest(chunk) + 0x01, independent of the stored bytes."""
        chunk = b"hello" * 100
        assert frame_key(digest(chunk)) == digest(chunk) + b"\x01"
        assert is_frame_key(frame_key(digest(chunk))) and not is_frame_key(digest(chunk))

    def test_a_frame_compressed_differently_is_the_same_object(self, store: Store) -> None:
        """Writing a chunk stored raw where a compressed frame of it exists is a no-op."""
        chunk = _text(3000, 8).encode()
        key = frame_key(digest(chunk))
        db = objects_of(store.backend.dbs)
        packed, raw = encode_frame(chunk), encode_frame(chunk, compress=False)
        assert packed != raw
        assert store.backend.write_txn(lambda t: put_object(t, db, key, packed)) is True
        assert store.backend.write_txn(lambda t: put_object(t, db, key, raw)) is False
        assert _objects(store)[key] == packed

    def test_writing_over_a_damaged_frame_is_an_integrity_error(self, store: Store) -> None:
        """A stored frame whose bytes do not hash to its key makes the put raise, naming it."""
        chunk = _text(3000, 8).encode()
        key = frame_key(digest(chunk))
        db = objects_of(store.backend.dbs)
        damaged = encode_frame(chunk + b"!", compress=False)
        store.backend.write_txn(lambda t: raw_put(t, store.backend.dbs, "objects", key, damaged))
        with pytest.raises(IntegrityError, match="does not match its digest") as info:
            store.backend.write_txn(lambda t: put_object(t, db, key, encode_frame(chunk)))
        assert key.hex() in str(info.value.where)


class TestDamage:
    def test_damaged_chunk_fails_the_read_and_verify_names_it(self, tmp_path: Path) -> None:
        """A flipped byte in a compressed chunk: the read raises, verify names the frame key."""
        path = tmp_path / "s"
        with open_store(path) as st:
            cid = st.recorder("r").checkpoint(1, {"h": _history(20)})
            key, value = next((k, v) for k, v in _objects(st).items() if is_frame_key(k))
        bad = bytearray(value)
        bad[len(bad) // 2] ^= 0x10
        edit_raw(path, "objects", key, lambda _old: bytes(bad))
        with open_store(path) as st:
            with pytest.raises(IntegrityError), st.read(cid) as cp:
                cp.state()
            report = st.verify()
            assert not report.ok
            assert any(key[:16].hex() in p.where + str(p.expected) for p in report.problems)


def _v2_blob(self: Recorder, data: bytes, chunked: dict[str, bytes], name: str, **_: Any) -> bytes:
    """What layout-2 recorders wrote: fixed 64 KiB raw chunks and a flat index."""
    if len(data) > CHUNK_SIZE:
        chunks, index = chunk_index(data)
        for chunk in chunks:
            self._chunks.append(self._stash(chunk))
        chunked[name] = self._stash(index)
        return digest(data)
    return self._stash(data)


def _set_version(path: Path, version: int) -> None:
    env = lmdb.open(str(path), max_dbs=16)
    with env.begin(write=True) as txn:
        meta = env.open_db(b"meta", txn=txn)
        fmt = {"layout": "cpstore", "version": version, "digest": "xxh3-128"}
        txn.put(b"format", encode_value(fmt), db=meta)
    env.close()


class TestLayoutTwoStores:
    def test_layout_2_chunk_indexes_read_and_upgrade(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A layout-2 store reads as it is read-only, upgrades to 3 writable, and mixes both."""
        path = tmp_path / "s"
        big = _text(200_000, 9).encode()
        with monkeypatch.context() as m:
            m.setattr(Recorder, "_blob", _v2_blob)
            with open_store(path) as st:
                old = st.recorder("r").checkpoint(1, {"big": big})
                assert not any(is_frame_key(k) for k in _objects(st))
        _set_version(path, 2)
        with open_store(path, readonly=True) as ro:
            assert ro.backend.layout == 2
            with ro.read(old) as cp:
                assert cp.state_part("big") == big
            assert ro.verify().ok
        with open_store(path) as st:
            assert st.backend.layout == STORE_VERSION
            new = st.recorder("r").checkpoint(2, {"big": big + b"more"})
            assert any(is_frame_key(k) for k in _objects(st))
            for cid, want in ((old, big), (new, big + b"more")):
                with st.read(cid) as cp:
                    assert cp.state_part("big") == want
            assert st.verify().ok
            assert st.prune(keep_last=1) == 1
            assert st.verify().ok
            with st.read(new) as cp:
                assert cp.state_part("big") == big + b"more"
            # The old flat index and its raw chunks were swept with their checkpoint.
            index = chunk_index(encode_value(big))[1]
            assert digest(index) not in _objects(st)


class TestRetention:
    def test_prune_keeps_shared_chunks_and_drops_unreached_frames(self, store: Store) -> None:
        """After a prune, verify passes, the head reads, and no unreachable frame is left."""
        rec = store.recorder("r")
        for step in range(1, 30):
            value = _history(step + 10) if step % 7 else _text(9000, step)
            rec.checkpoint(step, {"h": value})
        head = rec.checkpoint(30, {"h": _history(45)})
        store.prune(keep_last=1)
        assert store.verify().ok
        with store.read(head) as cp:
            assert cp.state_part("h") == _history(45)
        with store.backend.read_txn() as txn:
            m = store.backend.load_manifest(txn, bytes.fromhex(head), verify=True)
            root = m.raw["state"]["chunked"]["h"]
            reach = set(chunk_tree.tree_objects(txn, objects_of(store.backend.dbs), root))
        frames = {k for k in _objects(store) if is_frame_key(k)}
        assert frames == {k for k in reach if is_frame_key(k)}


class TestThreads:
    def test_threads_reading_compressed_chunks_get_equal_values(self, store: Store) -> None:
        """Four threads inflate the same frames at once (per-thread zstd contexts)."""
        history = _history(60)
        cid = store.recorder("r").checkpoint(1, {"h": history})
        errors: list[BaseException] = []

        def read() -> None:
            try:
                for _ in range(15):
                    with store.read(cid) as cp:
                        assert cp.state_part("h") == history
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)

        threads = [threading.Thread(target=read) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors


def _grow(path: str, run: str, steps: int) -> str:
    with open_store(path) as st:
        rec = st.recorder(run)
        cid = ""
        for step in range(1, steps + 1):
            cid = rec.checkpoint(step, {"messages": _history(step + 8)})
        return cid


class TestProcesses:
    def test_writer_processes_sharing_chunks_all_land(self, tmp_path: Path) -> None:
        """Four processes append the same history in their own runs: every head reads back."""
        ctx = multiprocessing.get_context("spawn")
        path = str(tmp_path / "s")
        with ctx.Pool(4) as pool:
            heads = pool.starmap(_grow, [(path, f"r{i}", 12) for i in range(4)])
        with open_store(path) as st:
            for cid in heads:
                with st.read(cid) as cp:
                    assert cp.state_part("messages") == _history(20)
            assert len(set(heads)) == 4
            report = st.verify()
            assert report.ok, report.problems
            frames = {k for k in _objects(st) if is_frame_key(k)}
        _grow(str(tmp_path / "one"), "r0", 12)
        with open_store(tmp_path / "one") as one:
            # Four runs of the same history store the frames of one run: shared.
            assert frames == {k for k in _objects(one) if is_frame_key(k)}


class TestStats:
    def test_stats_count_logical_unique_and_stored_bytes(self, store: Store) -> None:
        """Logical counts every checkpoint's whole value; unique each chunk once; stored less."""
        rec = store.recorder("r")
        history = _history(40)
        for step in range(1, 41):
            rec.checkpoint(step, {"messages": history[:step]})
        s = store_stats(store)
        message_bytes = sum(len(encode_value(m)) for m in history)
        # Every checkpoint references its whole history: ~sum of prefixes.
        assert s.logical_bytes > 15 * message_bytes
        # Unique bytes: each message once, plus nodes, roots, small parts.
        assert message_bytes < s.unique_bytes < 3 * message_bytes
        assert s.stored_bytes == s.object_bytes < s.unique_bytes
        assert s.compression_ratio > 1.2
        assert s.dedupe_ratio == s.logical_bytes / (s.unique_bytes - s.unreferenced_bytes)


class TestRetentionWalk:
    def test_a_shared_node_is_walked_once_and_its_chunks_stay_marked(self, store: Store) -> None:
        """tree_objects with a walked set names a shared node but does not walk it again."""
        rec = store.recorder("r")
        a = rec.checkpoint(1, {"h": _history(200)})
        b = rec.checkpoint(2, {"h": _history(201)})
        objects = objects_of(store.backend.dbs)
        with store.backend.read_txn() as txn:
            roots = []
            for cid in (a, b):
                m = store.backend.load_manifest(txn, bytes.fromhex(cid), verify=True)
                roots.append(m.raw["state"]["chunked"]["h"])
            full_b = list(chunk_tree.tree_objects(txn, objects, roots[1]))
            walked: set[bytes] = set()
            first = set(chunk_tree.tree_objects(txn, objects, roots[0], walked))
            second = list(chunk_tree.tree_objects(txn, objects, roots[1], walked))
        assert walked and len(second) < len(full_b)
        assert first | set(second) == first | set(full_b)


def test_cli_stats_prints_logical_unique_stored_and_compression(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`cpstore stats --json` carries the four issue-16 figures, consistent with store_stats."""
    path = tmp_path / "s"
    with open_store(path) as st:
        rec = st.recorder("r")
        for step in range(1, 21):
            rec.checkpoint(step, {"messages": _history(step + 5)})
        want = store_stats(st)
    assert cli.main(["stats", "--store", str(path), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["logical_bytes"] == want.logical_bytes > got["unique_bytes"] == want.unique_bytes
    assert got["stored_bytes"] == want.stored_bytes < want.unique_bytes
    assert got["compression_ratio"] == round(want.compression_ratio, 3) > 1.0
    assert cli.main(["stats", "--store", str(path)]) == 0
    text = capsys.readouterr().out
    assert "compression" in text and "logical" in text and "stored" in text


def test_nodes_and_roots_are_canonical_encodings() -> None:
    """Every node and root build_tree writes is exactly encode_value of what it decodes to."""
    for value in (_history(300), _text(200_000, 11)):
        tree = build_tree(encode_value(value), canonical=True)
        assert len(tree.nodes) > 2
        for node in tree.nodes.values():
            assert encode_value(decode_value(node)) == node
