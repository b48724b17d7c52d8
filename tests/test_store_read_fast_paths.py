"""The read path's fast paths (issue 12) refuse exactly what the slow paths refuse.

get by id, latest and history_states each have a fast path (an inline
begin_read, a manifest state check proven in C-level steps, one loop of get,
hash and decode per part, a per-call memo of parts already hash-checked in the
walk's txn). Each test damages what one of them reads and checks the damage is
still refused, named, on that path.
"""

from __future__ import annotations

import copy
import dataclasses
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from stored import raw_delete, raw_get, raw_put

from cpstore.errors import FormatVersionError, IntegrityError
from cpstore.native.binding import digest
from cpstore.native.canonical import encode_value
from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store
from cpstore.store.fast_read import _keys_of
from cpstore.store.lmdb_open import _FORMAT_RECORDS, FORMAT, check_format
from cpstore.store.manifest import (
    Manifest,
    check_manifest,
    check_manifest_state,
    encode_manifest,
    manifest_from_raw,
)
from cpstore.store.model import READABLE_VERSIONS, pack_checkpoint_value
from cpstore.store.refs import RECORDED, SET, read_ref, write_ref

DIGEST = bytes(range(16))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(tmp_path / "s") as st:
        yield st


def _states(n: int) -> list[dict[str, Any]]:
    """n states of four parts; part "c" changes every step, "l" is a list that never does."""
    return [
        {"a": "same text", "b": b"same bytes", "c": f"step {i}", "l": [1, 2, {"k": "v"}]}
        for i in range(n)
    ]


def _part_key(st: Store, cid: str, name: str) -> bytes:
    with st.read(cid) as cp:
        return bytes(cp.manifest.raw["state"]["parts"][name])


def _rewrite(st: Store, db: str, key: bytes, change: Any) -> None:
    """Replace the stored value under ``key`` in ``db`` by ``change(old bytes)`` (None: delete)."""
    dbs = st.backend.dbs

    def apply(txn: Any) -> None:
        new = change(raw_get(txn, dbs, db, key))
        if new is None:
            raw_delete(txn, dbs, db, key)
        else:
            raw_put(txn, dbs, db, key, new)

    st.backend.write_txn(apply)


def _flip(data: bytes) -> bytes:
    out = bytearray(data)
    out[len(out) // 2] ^= 0x01
    return bytes(out)


class TestGetAndLatest:
    def test_a_flipped_part_is_refused_naming_the_part_by_id_and_by_latest(
        self, store: Store
    ) -> None:
        """read(id).state() and latest().state() raise IntegrityError naming part and checkpoint."""
        rec = store.recorder("r")
        ids = [rec.checkpoint(i, s) for i, s in enumerate(_states(3))]
        _rewrite(store, "objects", _part_key(store, ids[-1], "c"), _flip)
        for reader in (store.read(ids[-1]), store.latest("r")):
            with pytest.raises(IntegrityError) as info, reader as cp:
                cp.state()
            assert "state['c']" in str(info.value.where)
            assert ids[-1] in str(info.value.where)
        with store.read(ids[0]) as cp:  # the other checkpoints still read
            assert cp.state() == _states(1)[0] | {"c": "step 0"}

    def test_a_missing_part_is_refused_naming_the_part(self, store: Store) -> None:
        """A part whose object is gone raises, naming it, instead of a partial state:
        IntegrityError since cli99 (the manifest names it, so it is damage, not absence)."""
        cid = store.recorder("r").checkpoint(0, _states(1)[0])
        _rewrite(store, "objects", _part_key(store, cid, "a"), lambda _: None)
        with pytest.raises(IntegrityError) as info, store.read(cid) as cp:
            cp.state()
        assert "state['a']" in str(info.value.where)

    def test_verify_false_skips_the_part_hash_only(self, store: Store) -> None:
        """verify=False returns the damaged value; the same read with verify refuses it."""
        cid = store.recorder("r").checkpoint(0, {"t": "x" * 64})
        _rewrite(store, "objects", _part_key(store, cid, "t"), _flip)
        with store.read(cid, verify=False) as cp:
            got = cp.state()
        assert isinstance(got, dict) and got["t"] != "x" * 64
        with pytest.raises(IntegrityError), store.read(cid) as cp:
            cp.state()

    def test_a_flipped_manifest_is_refused_before_any_part_is_read(self, store: Store) -> None:
        """A manifest byte flipped in the checkpoints table fails its id check on entry."""
        cid = store.recorder("r").checkpoint(0, _states(1)[0])
        _rewrite(store, "checkpoints", bytes.fromhex(cid), _flip)
        with pytest.raises(IntegrityError) as info, store.read(cid):
            pass
        assert cid in str(info.value.where)

    def test_a_reader_that_read_parts_fast_does_not_hash_them_again(self, store: Store) -> None:
        """verify_objects after a fast state() reports nothing on an intact checkpoint."""
        cid = store.recorder("r").checkpoint(0, _states(1)[0])
        with store.read(cid) as cp:
            cp.state()
            assert cp.verify_objects() == ()
            assert cp.state_part("c") == "step 0"

    @pytest.mark.parametrize(("origin", "branch"), [(RECORDED, "b"), (SET, "main")])
    def test_latest_refuses_a_ref_naming_another_branch_or_run(
        self, store: Store, origin: int, branch: str
    ) -> None:
        """A checked ref whose target's run (or, RECORDED, branch) differs is refused by latest."""
        main = store.recorder("r").checkpoint(0, {"a": 1})
        other = store.recorder("q").checkpoint(0, {"a": 1})
        target = main if branch == "b" else other

        def move(txn: Any) -> None:
            dbs, key = store.backend.dbs, f"r\0{branch}".encode()
            write_ref(
                txn, dbs, key, bytes.fromhex(target), origin, old=read_ref(txn, dbs, key, layout=3)
            )

        store.backend.write_txn(move)
        with pytest.raises(IntegrityError) as info, store.latest("r", branch):
            pass
        assert info.value.what == "ref names a checkpoint of another run or branch"
        with store.latest("q") as cp:  # an intact head still reads
            assert cp.id == other


def _manifest_map(**state: Any) -> dict[str, Any]:
    base = {"kind": "parts", "digest": DIGEST, "parts": {"a": DIGEST}, "chunked": {}}
    base.update(state)
    return {
        "cpstore": 1,
        "run_id": "r",
        "branch": "main",
        "step": 0,
        "parent": None,
        "state": base,
        "tokens": None,
        "observations": None,
        "call_graph": None,
        "effects": None,
        "ledger_sealed": False,
        "harness": None,
        "transcript": None,
        "tags": [],
        "metadata": {},
    }


class TestManifestStateCheck:
    @pytest.mark.parametrize(
        ("state", "field"),
        [
            ({"parts": {1: DIGEST}}, "state.parts"),
            ({"parts": {"a": DIGEST[:15]}}, "state.parts['a']"),
            ({"parts": {"a": DIGEST + b"x"}}, "state.parts['a']"),
            ({"parts": {"a": DIGEST.hex()}}, "state.parts['a']"),
            ({"parts": {"a": DIGEST, "b": 7}}, "state.parts['b']"),
            ({"parts": [DIGEST]}, "state.parts"),
            ({"kind": b"parts"}, "state.kind"),
            ({"kind": "blob"}, "state.kind"),
            ({"digest": DIGEST[:8]}, "state.digest"),
            ({"chunked": {"zz": DIGEST}}, "chunked"),
            ({"chunked": {"a": "x"}}, "state.chunked['a']"),
        ],
    )
    def test_every_bad_state_shape_is_refused_naming_the_field(
        self, state: dict[str, Any], field: str
    ) -> None:
        """check_manifest_state refuses each bad shape; the fast branch never lets one through."""
        data = encode_value(_manifest_map(**state))
        with pytest.raises(IntegrityError) as info:
            check_manifest_state(DIGEST, data)
        assert str(info.value.where).endswith(field)

    def test_good_shapes_pass_and_keep_the_map(self) -> None:
        """Parts, empty parts and chunked parts are accepted and returned whole."""
        states: list[dict[str, Any]] = [{}, {"parts": {}}, {"chunked": {"a": DIGEST}}]
        for state in states:
            m = _manifest_map(**state)
            assert check_manifest_state(DIGEST, encode_value(m)) == m

    @pytest.mark.parametrize("data", [b"\xc1", b"\x81\xa1a\x01\x00", encode_value([1])])
    def test_bytes_that_are_no_manifest_map_are_refused(self, data: bytes) -> None:
        """Not msgpack, trailing bytes, not a map: IntegrityError naming the checkpoint."""
        with pytest.raises(IntegrityError) as info:
            check_manifest_state(DIGEST, data)
        assert DIGEST.hex() in str(info.value.where)

    def test_an_unknown_version_is_refused(self) -> None:
        """A manifest of another version is FormatVersionError, not read as version 1."""
        m = _manifest_map()
        m["cpstore"] = 2
        with pytest.raises(FormatVersionError):
            check_manifest_state(DIGEST, encode_value(m))


class TestManifestObject:
    def test_manifest_from_raw_equals_the_constructor_and_is_frozen(self) -> None:
        """The instance built without __init__ equals Manifest(...) and refuses assignment."""
        m = _manifest_map(parts={"a": DIGEST, "b": DIGEST[::-1]})
        m["parent"] = DIGEST
        built = manifest_from_raw(DIGEST, check_manifest(DIGEST, encode_value(m)), 1.5)
        fields = {f.name: getattr(built, f.name) for f in dataclasses.fields(Manifest)}
        assert Manifest(**fields) == built
        assert built.parent == DIGEST.hex() and built.state_parts["b"] == DIGEST[::-1].hex()
        with pytest.raises(dataclasses.FrozenInstanceError):
            built.step = 3  # type: ignore[misc]

    def test_a_bad_log_digest_is_refused_by_manifest_from_raw(self) -> None:
        """A log field that is not a digest raises even without check_manifest first."""
        m = _manifest_map()
        m["transcript"] = "not a digest"
        with pytest.raises(IntegrityError):
            manifest_from_raw(DIGEST, m, 0.0)


class TestFormatRecord:
    def test_the_known_records_are_the_canonical_encodings(self) -> None:
        """Each byte string compared on open is encode_value of FORMAT at that version."""
        assert set(_FORMAT_RECORDS.values()) == set(READABLE_VERSIONS)
        for raw, version in _FORMAT_RECORDS.items():
            assert raw == encode_value({**FORMAT, "version": version})
            assert check_format(raw, "p") == version

    def test_other_records_still_take_the_full_check(self) -> None:
        """An unknown version or a foreign record is refused as before."""
        with pytest.raises(FormatVersionError):
            check_format(encode_value({**FORMAT, "version": 99}), "p")
        with pytest.raises(FormatVersionError):
            check_format(encode_value({"layout": "other"}), "p")


class TestHistoryMemo:
    def test_entries_share_only_immutable_values(self, store: Store) -> None:
        """Unchanged str/bytes parts may be one object; an unchanged list never is."""
        rec = store.recorder("r")
        for i, s in enumerate(_states(4)):
            rec.checkpoint(i, s)
        entries = store.history_states("r")
        states = [e.state for e in entries]
        assert all(isinstance(s, dict) for s in states)
        lists = [s["l"] for s in states if isinstance(s, dict)]
        assert len({id(v) for v in lists}) == len(lists)
        lists[0][2]["k"] = "changed"
        assert [s["l"] for s in states if isinstance(s, dict)][1:] == [[1, 2, {"k": "v"}]] * 3
        assert [e.state for e in entries[1:]] == [
            s | {"c": f"step {i}"} for i, s in reversed(list(enumerate(_states(3))))
        ]

    def test_a_damaged_part_shared_by_every_entry_is_refused(self, store: Store) -> None:
        """An unchanged part's object damaged: the newest entry's read names it; no entries."""
        rec = store.recorder("r")
        ids = [rec.checkpoint(i, s) for i, s in enumerate(_states(4))]
        _rewrite(store, "objects", _part_key(store, ids[0], "a"), _flip)
        with pytest.raises(IntegrityError) as info:
            store.history_states("r")
        assert ids[-1] in str(info.value.where) and "state['a']" in str(info.value.where)

    def test_a_damaged_part_of_an_older_entry_is_refused_naming_it(self, store: Store) -> None:
        """The memo never covers a part first met in an older entry: its hash is checked."""
        rec = store.recorder("r")
        ids = [rec.checkpoint(i, s) for i, s in enumerate(_states(5))]
        _rewrite(store, "objects", _part_key(store, ids[1], "c"), _flip)
        with pytest.raises(IntegrityError) as info:
            store.history_states("r")
        assert ids[1] in str(info.value.where) and "state['c']" in str(info.value.where)
        assert [e.id for e in store.history_states("r", limit=3)] == ids[::-1][:3]

    def test_the_manifest_is_built_lazily_and_equals_history(self, store: Store) -> None:
        """entry.manifest equals history()'s manifest; entries refuse assignment."""
        rec = store.recorder("r")
        for i, s in enumerate(_states(3)):
            rec.checkpoint(i, s, metadata={"i": i})
        entries = store.history_states("r")
        assert [e.manifest for e in entries] == store.history("r")
        with pytest.raises(dataclasses.FrozenInstanceError):
            entries[0].state = {}  # type: ignore[misc]

    def test_a_bad_field_outside_the_state_fails_the_manifest_not_the_states(
        self, store: Store
    ) -> None:
        """A certified head whose tags are no list: its state reads, its manifest raises."""
        base = store.recorder("r").checkpoint(0, {"a": 1})
        m = store.manifest(base).raw
        m["tags"] = 5
        m["parent"] = bytes.fromhex(base)
        manifest = encode_manifest(m)
        forged = digest(manifest)

        def put_head(txn: Any) -> None:
            dbs, key = store.backend.dbs, b"r\0main"
            txn.put(forged, pack_checkpoint_value(1.0, manifest), db=dbs["checkpoints"])
            write_ref(txn, dbs, key, forged, SET, old=read_ref(txn, dbs, key, layout=3))

        store.backend.write_txn(put_head)
        entries = store.history_states("r")
        assert [e.state for e in entries] == [{"a": 1}, {"a": 1}]
        with pytest.raises(IntegrityError, match="wrong shape") as info:
            _ = entries[0].manifest
        assert info.value.where == f"checkpoint {forged.hex()}.tags"
        assert entries[1].manifest.id == base

    def test_a_damaged_created_at_fails_the_manifest_when_used(self, store: Store) -> None:
        """A flipped created_at byte: the entry's manifest raises, as cp.manifest does."""
        cid = store.recorder("r").checkpoint(0, {"a": 1})

        def flip_created(old: bytes) -> bytes:
            return bytes([old[0] ^ 1]) + old[1:]

        _rewrite(store, "checkpoints", bytes.fromhex(cid), flip_created)
        (entry,) = store.history_states("r")
        assert entry.state == {"a": 1}
        with pytest.raises(IntegrityError, match="created_at"):
            _ = entry.manifest
        (unchecked,) = store.history_states("r", verify=False)
        assert unchecked.manifest.id == cid  # verify=False skips the header check too

    def test_entries_pickle_and_copy_to_equal_entries(self, store: Store) -> None:
        """pickle and copy.deepcopy give equal entries (the manifest built on the way)."""
        rec = store.recorder("r")
        for i, s in enumerate(_states(2)):
            rec.checkpoint(i, s)
        entries = store.history_states("r")
        assert pickle.loads(pickle.dumps(entries)) == entries
        copied = copy.deepcopy(entries)
        assert copied == entries and copied[0].state is not entries[0].state


class TestHintKeys:
    @settings(max_examples=200, deadline=None)
    @given(st.lists(st.integers(0, 2**32 - 1), max_size=40))
    def test_the_keys_of_a_hint_block_are_its_seqs_as_8_byte_keys(self, seqs: list[int]) -> None:
        """Every seq of a hint block (0 included) becomes its 8-byte big-endian heap key."""
        hints = b"".join(s.to_bytes(4, "big") for s in seqs)
        assert list(_keys_of(len(seqs))(hints)) == [s.to_bytes(8, "big") for s in seqs]
