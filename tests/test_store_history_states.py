"""store.history_states(): a branch's history with verified states, in one read txn."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from stored import raw_get, raw_put

from cpstore.errors import IntegrityError, InvalidInputError, StoreError
from cpstore.store import CHUNK_SIZE, HistoryEntry, Store
from cpstore.store.chunk_tree import tree_objects
from cpstore.store.codec import is_frame_key
from cpstore.store.content import objects_of
from cpstore.store.facade import open as open_store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(tmp_path / "s") as st:
        yield st


def _blob(step: int, size: int) -> bytes:
    """Deterministic bytes for ``step``: a reader can recompute what was written."""
    seed = hashlib.sha256(b"%d" % step).digest()
    return (seed * (size // len(seed) + 1))[:size]


def _state(step: int) -> dict[str, Any]:
    """Parts state of ``step``: a changed small part, a shared one, a chunked big one."""
    return {
        "step": step,
        "note": f"step {step}",
        "shared": "same in every checkpoint",
        "big": _blob(step // 3, CHUNK_SIZE + 5000),  # > 64 KiB: chunked
    }


def _record_mixed(st: Store, run: str, count: int) -> list[str]:
    """Checkpoints alternating bytes states, parts states and chunked parts; ids oldest first."""
    rec = st.recorder(run)
    ids = []
    for step in range(count):
        value: bytes | dict[str, Any]
        if step % 3 == 0:
            value = _blob(step, 100 + step)
        elif step % 3 == 1:
            value = {"a": step, "b": [1, 2, {"c": "x" * step}], "raw": _blob(step, 50)}
        else:
            value = _state(step)
        ids.append(rec.checkpoint(step, value))
    return ids


def _damage(st: Store, key: bytes) -> None:
    """Flip one byte of the stored object ``key`` (its length kept)."""
    dbs = st.backend.dbs

    def flip(txn: Any) -> None:
        data = bytearray(raw_get(txn, dbs, "objects", key) or b"")
        data[len(data) // 2] ^= 0x01
        raw_put(txn, dbs, "objects", key, bytes(data))

    st.backend.write_txn(flip)


class TestEqualsSeparateReads:
    def test_every_entry_equals_read_state_for_bytes_parts_and_chunked_states(
        self, store: Store
    ) -> None:
        """Each entry's manifest is history()'s and its state is store.read(id).state()."""
        ids = _record_mixed(store, "r", 12)
        entries = store.history_states("r")
        assert [e.id for e in entries] == ids[::-1]
        assert [e.manifest for e in entries] == store.history("r")
        for entry in entries:
            with store.read(entry.id) as cp:
                assert entry.state == cp.state()
        kinds = {type(e.state) for e in entries}
        assert kinds == {bytes, dict}
        bigs = [e.state["big"] for e in entries if isinstance(e.state, dict) and "big" in e.state]
        assert bigs and all(len(big) > CHUNK_SIZE for big in bigs)  # chunked parts

    def test_a_chunked_bytes_state_reads_back_whole(self, store: Store) -> None:
        """A bytes state over CHUNK_SIZE comes back equal to the written bytes."""
        data = _blob(7, 3 * CHUNK_SIZE + 11)
        cid = store.recorder("r").checkpoint(0, data)
        (entry,) = store.history_states("r")
        assert entry.id == cid and entry.state == data

    def test_entries_are_frozen_and_share_no_decoded_value(self, store: Store) -> None:
        """Results are frozen; mutating one call's state changes no other call's or entry's."""
        rec = store.recorder("r")
        rec.checkpoint(0, {"l": [1, 2], "d": {"k": "v"}})
        rec.checkpoint(1, {"l": [1, 2], "d": {"k": "v"}})  # same part objects as step 0
        first = store.history_states("r")
        with pytest.raises(dataclasses.FrozenInstanceError):
            first[0].state = b"x"  # type: ignore[misc]
        assert isinstance(first[0].state, dict) and isinstance(first[1].state, dict)
        first[0].state["l"].append(3)
        first[0].state["d"]["k"] = "changed"
        assert first[1].state == {"l": [1, 2], "d": {"k": "v"}}
        assert [e.state for e in store.history_states("r")] == [{"l": [1, 2], "d": {"k": "v"}}] * 2
        assert isinstance(first[0], HistoryEntry)

    def test_parts_sharing_a_digest_and_met_before_read_in_the_state_order(
        self, store: Store
    ) -> None:
        """Parts with equal values (one digest), unchanged ones met in a newer entry and new
        ones come back with their own values, in the manifest's part order."""
        rec = store.recorder("r")
        states: list[dict[str, Any]] = [
            {"z": "same", "a": "same", "n": 0, "l": [0]},
            {"z": "same", "a": "other", "n": 0, "l": [0]},
            {"z": 1, "a": 1, "n": None, "l": [0], "m": None},
        ]
        for step, value in enumerate(states):
            rec.checkpoint(step, value)
        entries = store.history_states("r")
        got = [e.state for e in entries]
        assert got == states[::-1]
        for entry in entries:
            with store.read(entry.id) as cp:
                assert entry.state == cp.state()
                assert list(entry.state) == list(cp.manifest.state_parts)


class TestWhereTheWalkStops:
    def test_limit_takes_the_newest_entries(self, store: Store) -> None:
        """limit=n gives the n newest, limit=0 none; a bad limit is InvalidInputError."""
        ids = _record_mixed(store, "r", 6)
        assert [e.id for e in store.history_states("r", limit=2)] == ids[::-1][:2]
        assert store.history_states("r", limit=0) == []
        assert [e.id for e in store.history_states("r", limit=100)] == ids[::-1]
        for bad in (-1, 1.5, "3", True):
            with pytest.raises(InvalidInputError):
                store.history_states("r", limit=bad)  # type: ignore[arg-type]

    def test_the_walk_stops_at_a_pruned_checkpoint_like_history(self, store: Store) -> None:
        """After prune(keep_last=3) both history() and history_states() end after 3 entries."""
        ids = _record_mixed(store, "r", 9)
        store.prune(keep_last=3)
        entries = store.history_states("r")
        assert [e.id for e in entries] == ids[::-1][:3]
        assert [e.manifest for e in entries] == store.history("r")

    def test_other_branches_and_missing_ones(self, store: Store) -> None:
        """A fork's history runs through its base; an unknown branch or run is empty."""
        ids = _record_mixed(store, "r", 4)
        store.fork("r", "b", ids[1])
        rec = store.recorder("r", branch="b", parent=ids[1])
        extra = rec.checkpoint(9, {"b": 1})
        assert [e.id for e in store.history_states("r", "b")] == [extra, ids[1], ids[0]]
        assert store.history_states("r", "nope") == []
        assert store.history("r", "nope") == []
        assert store.history_states("other") == []


class TestDamage:
    def test_a_damaged_part_in_the_middle_raises_naming_the_checkpoint(self, store: Store) -> None:
        """IntegrityError names the part and the checkpoint; entries above it still read."""
        rec = store.recorder("r")
        ids = [rec.checkpoint(s, {"step": s, "payload": _blob(s, 2000)}) for s in range(10)]
        victim = ids[4]
        with store.read(victim) as cp:
            key = cp.manifest.raw["state"]["parts"]["payload"]
        _damage(store, bytes(key))
        with pytest.raises(IntegrityError) as info:
            store.history_states("r")
        assert victim in str(info.value.where)
        assert "payload" in str(info.value.where)
        with pytest.raises(IntegrityError), store.read(victim) as cp:  # as a single read does
            cp.state()
        assert [e.id for e in store.history_states("r", limit=5)] == ids[::-1][:5]
        # verify=False is the explicit, named way to skip the hash checks
        unchecked = store.history_states("r", verify=False)
        assert len(unchecked) == 10

    def test_a_damaged_chunk_raises_naming_the_checkpoint(self, store: Store) -> None:
        """A flipped byte in one chunk of a chunked part fails its checkpoint's entry."""
        rec = store.recorder("r")
        ids = [rec.checkpoint(s, _state(s * 3)) for s in range(4)]  # "big" differs per step
        with store.read(ids[1]) as cp:
            index_key = bytes(cp.manifest.raw["state"]["chunked"]["big"])
        with store.backend.read_txn() as txn:  # the chunk frames of its tree (layout 3)
            objects = objects_of(store.backend.dbs)
            chunks = [k for k in tree_objects(txn, objects, index_key) if is_frame_key(k)]
        assert len(chunks) >= 2
        _damage(store, chunks[-1])
        with pytest.raises(IntegrityError) as info:
            store.history_states("r")
        assert ids[1] in str(info.value.where)

    def test_a_closed_store_refuses(self, tmp_path: Path) -> None:
        """history_states on a closed store raises like every other call."""
        st = open_store(tmp_path / "s")
        st.recorder("r").checkpoint(0, b"x")
        st.close()
        with pytest.raises(StoreError, match="closed"):
            st.history_states("r")


WRITER = r"""
import hashlib, sys, time
from cpstore.store.facade import open as open_store
path, count = sys.argv[1], int(sys.argv[2])

def blob(step, size):
    seed = hashlib.sha256(b"%d" % step).digest()
    return (seed * (size // len(seed) + 1))[:size]

with open_store(path) as st:
    rec = st.recorder("r")
    for step in range(count):
        st_value = {"step": step, "note": f"step {step}", "shared": "same in every checkpoint",
                    "big": blob(step // 3, 65536 + 5000)}
        rec.checkpoint(step, st_value)
        if step == 4:
            print("ready", flush=True)
        time.sleep(0.002)  # paced so the parent's reads overlap the writes
"""


class TestConcurrentWriter:
    def test_a_writer_in_another_process_never_tears_the_snapshot(self, tmp_path: Path) -> None:
        """While a child moves the head, every result is a whole chain from one head to step 0."""
        path = tmp_path / "s"
        with open_store(path):
            pass  # made before the child opens it
        child = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), "400"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        heads: set[int] = set()
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "ready"
            with open_store(path) as st:
                while True:
                    done = child.poll() is not None
                    entries = st.history_states("r")
                    top = entries[0].manifest.step
                    heads.add(top)
                    assert [e.manifest.step for e in entries] == list(range(top, -1, -1))
                    for newer, older in itertools.pairwise(entries):
                        assert newer.manifest.parent == older.id
                    for entry in entries:
                        assert entry.state == _state(entry.manifest.step)
                    if done:
                        break
        finally:
            if child.poll() is None:
                child.kill()
            _, err = child.communicate()
        assert child.returncode == 0, err
        assert max(heads) == 399
        assert len(heads) >= 2, "the reads never overlapped the writer"
