"""Checkpoints: what a recorder writes is what a reader gets, ids are content addresses."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from stored import forge_checkpoint, raw_get, raw_put

from cpstore.errors import (
    IntegrityError,
    InvalidInputError,
    NotFoundError,
    RecordingGapError,
)
from cpstore.native.binding import digest, sequence_digest
from cpstore.native.canonical import encode_value
from cpstore.native.records import Provenance, RecordType, pack_token, value_digest
from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store
from cpstore.store.model import CHUNK_SIZE, unpack_checkpoint_value
from cpstore.store.recorder import Recorder


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(tmp_path / "s") as st:
        yield st


def record_sample(rec: Recorder) -> str:
    """A small run touching every log; returns the checkpoint id."""
    rec.observe(12, "read_config", b"config v1", pinned_at=100.0)
    rec.observe(12, "clock", b"t=5", pinned_at=None)
    rec.token("rng", 4)
    rec.token("clock", 1.25)
    rec.tokens([("tool", {"ok": True}), ("my_kind", [1, 2])])
    rec.decision(12, {"node": "select_tool", "tool": "search"})
    rec.effect("email", b"to: ops")
    rec.harness_access("cache", {"op": "read"})
    rec.transcript(b"final answer")
    return rec.checkpoint(47, {"messages": ["hi"], "config": {"v": 1}}, tags=["prod"])


class TestRoundTrip:
    def test_every_log_reads_back_as_recorded(self, store: Store) -> None:
        """Observations, tokens, call graph, ledger, harness, transcript and state survive."""
        cid = record_sample(store.recorder("run"))
        with store.read(cid) as cp:
            m = cp.manifest
            assert (m.run_id, m.branch, m.step, m.parent) == ("run", "main", 47, None)
            assert m.provenance_tags == ("prod",)
            assert m.ledger_sealed
            assert m.transcript_digest == digest(b"final answer").hex()
            assert cp.observations() == [
                (12, "read_config", digest(b"config v1").hex(), 100.0),
                (12, "clock", digest(b"t=5").hex(), None),
            ]
            assert cp.token_count() == 4
            assert [cp.token(i) for i in range(4)] == [
                (0, "rng", "recorded", 4),
                (1, "clock", "recorded", 1.25),
                (2, "tool", "recorded", {"ok": True}),
                (3, "my_kind", "recorded", [1, 2]),
            ]
            assert cp.call_graph() == [{"node": "select_tool", "step": 12, "tool": "search"}]
            assert cp.effects() == [(0, "email", digest(b"to: ops").hex())]
            assert cp.effect_payload(0) == b"to: ops"
            assert cp.harness_accesses() == [{"resource": "cache", "detail": {"op": "read"}}]
            assert cp.transcript() == b"final answer"
            assert cp.state() == {"messages": ["hi"], "config": {"v": 1}}
            assert cp.state_part("config") == {"v": 1}

    def test_token_records_are_the_packed_format(self, store: Store) -> None:
        """cp.tokens() is exactly pack_token over the values' canonical digests."""
        rec = store.recorder("run")
        rec.token("rng", 7)
        rec.token("env", "x", provenance="live")
        cid = rec.checkpoint(1, b"s")
        expected = pack_token(0, "rng", Provenance.RECORDED, value_digest(7)) + pack_token(
            1, "env", Provenance.LIVE, value_digest("x")
        )
        with store.read(cid) as cp:
            assert bytes(cp.tokens()) == expected
            assert cp.manifest.tokens_digest == digest(expected).hex()

    def test_batch_tokens_equal_single_tokens(self, tmp_path: Path) -> None:
        """rec.tokens() writes the same bytes as rec.token() one at a time."""
        items: list[tuple[str, Any]] = [("rng", i) for i in range(50)] + [("clock", 0.5)]
        ids = []
        for batch in (False, True):
            with open_store(tmp_path / str(batch)) as st:
                rec = st.recorder("run")
                if batch:
                    rec.tokens(items)
                else:
                    for kind, value in items:
                        rec.token(kind, value)
                ids.append(rec.checkpoint(1, b"s"))
        assert ids[0] == ids[1]

    def test_the_token_buffer_is_one_owned_copy_that_outlives_the_block(self, store: Store) -> None:
        """tokens() is a memoryview over a bytes copy of the one records object, valid later."""
        rec = store.recorder("run")
        rec.tokens([("rng", i) for i in range(1000)])
        cid = rec.checkpoint(1, b"s")
        with store.read(cid) as cp:
            view = cp.tokens()
            assert isinstance(view, memoryview) and len(view) == 32_000
            assert isinstance(view.obj, bytes)
            inside = sequence_digest(RecordType.TOKEN, view)
        assert sequence_digest(RecordType.TOKEN, view) == inside

    def test_reading_an_unknown_checkpoint_is_not_found(self, store: Store) -> None:
        """An id that names nothing raises NotFoundError."""
        with pytest.raises(NotFoundError), store.read("ab" * 16):
            pass


class TestReaderLifecycle:
    def test_latest_reads_the_branch_head_in_one_txn(self, store: Store) -> None:
        """store.latest(run) is the head checkpoint, state included; it follows the ref."""
        rec = store.recorder("run")
        first = rec.checkpoint(0, {"a": 1})
        with store.latest("run") as cp:
            assert cp.id == first and cp.state() == {"a": 1}
        second = rec.checkpoint(1, {"a": 2})
        with store.latest("run") as cp:
            assert cp.id == second == store.ref("run")
            assert cp.manifest.parent == first and cp.state() == {"a": 2}
        store.fork("run", "side", first)
        with store.latest("run", "side") as cp:
            assert cp.id == first

    def test_latest_of_a_missing_branch_is_not_found(self, store: Store) -> None:
        """No ref: NotFoundError naming the run and branch; bad names are InvalidInputError."""
        store.recorder("run").checkpoint(0, b"s")
        with (
            pytest.raises(NotFoundError, match="no such branch") as info,
            store.latest("run", "nope"),
        ):
            pass
        assert info.value.where == "refs/run/nope"
        with pytest.raises(InvalidInputError):
            store.latest("")

    def test_a_reader_is_used_inside_its_block_and_entered_once(self, store: Store) -> None:
        """Outside the with block a reader refuses use; a second entry is refused."""
        cid = store.recorder("run").checkpoint(0, {"a": 1})
        reader = store.read(cid)
        for use in (reader.state, lambda: reader.manifest, reader.token_count, reader.tokens):
            with pytest.raises(InvalidInputError, match="not open"):
                use()
        with reader as cp:
            assert cp.state() == {"a": 1}
        with pytest.raises(InvalidInputError, match="entered once"), reader:
            pass
        assert reader.manifest.id == cid  # the decoded manifest outlives the txn
        with pytest.raises(InvalidInputError, match="closed"):
            reader.state()

    def test_every_canonical_part_value_reads_back(self, store: Store) -> None:
        """Int-keyed maps, big ints, floats, nested lists: the whole-state read returns them."""
        state = {"m": {1: "x", 2: [3, 4]}, "big": 2**70, "f": [1.5, None, True], "b": b"\0"}
        cid = store.recorder("run").checkpoint(0, state)
        with store.read(cid) as cp:
            assert cp.state() == state
            assert cp.state_part("big") == 2**70

    def test_a_failed_entry_leaves_no_open_read(self, store: Store) -> None:
        """A reader whose checkpoint is missing ends its txn: the map can still grow."""
        for _ in range(50):
            with pytest.raises(NotFoundError), store.read("ab" * 16):
                pass
        assert not store.backend.env._active


class TestHostileState:
    def test_parts_that_split_values_across_objects_are_refused(self, store: Store) -> None:
        """A manifest whose parts hold 2 values and 0 values is an error, never misassigned.

        Both objects are well-formed content-addressed objects and every digest
        matches, so only decoding each part on its own catches the misalignment.
        """
        cid = store.recorder("run").checkpoint(0, {"a": 1, "b": 2})
        two = store.put_object(encode_value(1) + encode_value(2))
        none = store.put_object(b"")
        m = store.manifest(cid).raw
        parts = {"a": two, "b": none}
        m["state"] = {**m["state"], "parts": parts, "digest": digest(encode_value(parts))}
        forged = forge_checkpoint(store, m)
        with store.read(forged.hex()) as cp, pytest.raises(IntegrityError, match="canonical"):
            cp.state()

    def test_a_bad_field_outside_the_state_is_refused_when_used(self, store: Store) -> None:
        """The reader checks the state on entry and every other field before its first use."""
        cid = store.recorder("run").checkpoint(0, {"a": 1})
        m = store.manifest(cid).raw
        m["tags"] = 5
        forged = forge_checkpoint(store, m)
        with store.read(forged.hex()) as cp:
            assert cp.state() == {"a": 1}  # the state itself is sound and certified
            for use in (lambda: cp.manifest, cp.observations, cp.tokens, cp.transcript):
                with pytest.raises(IntegrityError, match="wrong shape") as info:
                    use()
                assert info.value.where == f"checkpoint {forged.hex()}.tags"
        with pytest.raises(IntegrityError, match="wrong shape"):
            store.manifest(forged.hex())

    def test_a_damaged_created_at_is_refused_when_used(self, store: Store) -> None:
        """A flipped created_at byte fails the manifest and verify, never passes silently."""
        cid = store.recorder("run").checkpoint(0, {"a": 1})
        raw = bytes.fromhex(cid)
        dbs = store.backend.dbs
        with store.backend.read_txn() as txn:
            stored = raw_get(txn, dbs, "checkpoints", raw)
            assert stored is not None
            value = bytearray(stored)
        value[0] ^= 1
        store.backend.write_txn(lambda txn: raw_put(txn, dbs, "checkpoints", raw, bytes(value)))
        with store.read(cid) as cp, pytest.raises(IntegrityError, match="created_at"):
            _ = cp.manifest
        with pytest.raises(IntegrityError, match="created_at"):
            store.manifest(cid)
        assert not store.verify().ok


class TestContentAddressing:
    def test_the_same_run_recorded_twice_gets_the_same_id(self, tmp_path: Path) -> None:
        """created_at is kept outside the manifest, so equal recordings have equal ids."""
        ids = []
        for name in ("a", "b"):
            with open_store(tmp_path / name) as st:
                ids.append(record_sample(st.recorder("run")))
        assert ids[0] == ids[1]

    def test_a_second_recorder_on_a_branch_continues_from_its_head(self, store: Store) -> None:
        """After a restart, recorder(run) extends the head instead of starting a new root."""
        first = record_sample(store.recorder("run"))
        rec = store.recorder("run")
        assert rec.head == first
        second = rec.checkpoint(99, b"after restart")
        assert [m.id for m in store.history("run")] == [second, first]
        assert store.manifest(second).parent == first

    def test_a_different_observation_changes_the_id(self, tmp_path: Path) -> None:
        """The id certifies everything the manifest reaches."""
        ids = []
        for payload in (b"v1", b"v2"):
            with open_store(tmp_path / payload.decode()) as st:
                rec = st.recorder("run")
                rec.observe(1, "cfg", payload, pinned_at=1.0)
                ids.append(rec.checkpoint(1, b"state"))
        assert ids[0] != ids[1]

    def test_state_digests_are_documented_formulas(self, store: Store) -> None:
        """bytes: digest of the bytes; parts: digest of the canonical {name: part digest}."""
        rec = store.recorder("run")
        c1 = rec.checkpoint(1, b"raw")
        c2 = rec.checkpoint(2, {"a": 1, "b": b"x"})
        parts = {"a": digest(encode_value(1)), "b": digest(encode_value(b"x"))}
        assert store.manifest(c1).state_digest == digest(b"raw").hex()
        assert store.manifest(c2).state_digest == digest(encode_value(parts)).hex()
        assert store.manifest(c2).state_parts == {k: v.hex() for k, v in parts.items()}


class TestStateParts:
    def test_unchanged_parts_are_stored_once(self, store: Store) -> None:
        """Ten parts with one changing per step add about one part per step."""
        rec = store.recorder("run")
        state = {f"p{i}": bytes([i]) * 1000 for i in range(10)}
        for step in range(20):
            state["p0"] = step.to_bytes(2, "big") * 500
            rec.checkpoint(step, dict(state))
        assert store.verify().counts["objects"] == 10 + 19

    def test_a_bytes_subclass_part_is_encoded_again_at_every_checkpoint(self, store: Store) -> None:
        """The same bytes-subclass object, whose bytes() changed, is stored as it now encodes."""

        class Shown(bytes):
            shown = b"first"

            def __bytes__(self) -> bytes:
                return self.shown

        value = Shown(b"own")
        rec = store.recorder("run")
        rec.checkpoint(0, {"p": value})
        value.shown = b"second"
        cid = rec.checkpoint(1, {"p": value})
        assert store.manifest(cid).state_parts["p"] == digest(encode_value(value)).hex()
        with store.read(cid) as cp:
            assert cp.state_part("p") == b"second"

    def test_large_parts_are_chunked_and_reassembled(self, store: Store) -> None:
        """A large part is a chunk tree; an append stores a few chunks and nodes, not the value."""
        rec = store.recorder("run")
        big = bytes(range(256)) * (CHUNK_SIZE // 64)  # 4 chunks
        c1 = rec.checkpoint(1, {"log": big})
        before = store.verify().counts["objects"]
        c2 = rec.checkpoint(2, {"log": big + b"tail"})
        after = store.verify().counts["objects"]
        # Changed first chunk (the bin header), new tail chunk, a new root and
        # at most two new leaf nodes; the three unchanged 64 KiB chunks are kept.
        assert after - before <= 5
        with store.read(c1) as cp:
            assert cp.state_part("log") == big
        with store.read(c2) as cp:
            assert cp.state_part("log") == big + b"tail"

    def test_large_bytes_state_round_trips(self, store: Store) -> None:
        """A bytes state over CHUNK_SIZE is chunked and reads back equal."""
        data = b"ab" * (CHUNK_SIZE + 7)
        cid = store.recorder("run").checkpoint(1, data)
        with store.read(cid) as cp:
            assert cp.state() == data

    def test_missing_part_is_not_found(self, store: Store) -> None:
        """state_part of an unknown name raises NotFoundError naming the parts."""
        cid = store.recorder("run").checkpoint(1, {"a": 1})
        with store.read(cid) as cp, pytest.raises(NotFoundError):
            cp.state_part("b")

    @pytest.mark.parametrize("state", [None, 5, "text", {1: "x"}, {"a": object()}])
    def test_bad_states_are_refused(self, store: Store, state: object) -> None:
        """State is bytes or a str-keyed mapping of canonical values."""
        with pytest.raises(InvalidInputError):
            store.recorder("run").checkpoint(1, state)  # type: ignore[arg-type]


class TestPinnedPayloads:
    def test_a_pinned_payload_is_read_from_the_store(self, store: Store) -> None:
        """payload(step, source) returns the recorded bytes, never a re-fetch."""
        cid = record_sample(store.recorder("run"))
        with store.read(cid) as cp:
            assert cp.payload(12, "read_config") == b"config v1"

    def test_a_missing_observation_is_a_recording_gap(self, store: Store) -> None:
        """Asking for an observation that was not recorded raises RecordingGapError."""
        cid = record_sample(store.recorder("run"))
        with store.read(cid) as cp, pytest.raises(RecordingGapError):
            cp.payload(13, "read_config")

    def test_an_unpinned_observation_cannot_be_replayed(self, store: Store) -> None:
        """A re-fetched (pinned_at None) observation is a gap for replay."""
        cid = record_sample(store.recorder("run"))
        with store.read(cid) as cp, pytest.raises(RecordingGapError, match="not pinned"):
            cp.payload(12, "clock")

    def test_repeated_reads_are_addressed_by_occurrence(self, store: Store) -> None:
        """Two reads of one source in one step are told apart by occurrence."""
        rec = store.recorder("run")
        rec.observe(1, "clock", b"a", pinned_at=1.0)
        rec.observe(1, "clock", b"b", pinned_at=2.0)
        cid = rec.checkpoint(1, b"s")
        with store.read(cid) as cp:
            assert cp.payload(1, "clock") == b"a"
            assert cp.payload(1, "clock", occurrence=1) == b"b"


class TestLedger:
    def test_effects_after_a_sealing_checkpoint_go_to_a_new_ledger(self, store: Store) -> None:
        """A sealed ledger never changes; later effects extend it in the next checkpoint's."""
        rec = store.recorder("run")
        rec.effect("db", b"write 1")
        first = rec.checkpoint(1, b"s")
        assert rec.ledger_sealed
        assert rec.effect("db", b"write 2") == 1
        assert not rec.ledger_sealed
        second = rec.checkpoint(2, b"s")
        with store.read(first) as cp:
            assert [e[0] for e in cp.effects()] == [0]
            sealed_digest = cp.manifest.effects_digest
        with store.read(second) as cp:
            assert [e[0] for e in cp.effects()] == [0, 1]
            assert cp.manifest.ledger_sealed and cp.manifest.effects_digest != sealed_digest
        with store.read(first) as cp:
            assert cp.manifest.effects_digest == sealed_digest

    def test_an_unsealed_checkpoint_keeps_the_ledger_open(self, store: Store) -> None:
        """seal_ledger=False records ledger_sealed False and allows more effects."""
        rec = store.recorder("run")
        rec.effect("db", b"1")
        cid = rec.checkpoint(1, b"s", seal_ledger=False)
        assert rec.effect("db", b"2") == 1
        assert not store.manifest(cid).ledger_sealed
        rec.close(discard_effects=True)  # the two unsealed effects are dropped on purpose

    def test_a_fork_continues_the_sealed_ledger_in_a_new_one(self, store: Store) -> None:
        """A recorder forked from a sealed checkpoint starts a new ledger after its entries."""
        rec = store.recorder("run")
        rec.effect("db", b"1")
        parent = rec.checkpoint(1, b"s")
        child = store.recorder("run", branch="spec", parent=parent)
        assert child.effect("db", b"2") == 1
        cid = child.checkpoint(2, b"s")
        with store.read(parent) as cp:
            assert [e[0] for e in cp.effects()] == [0]
        with store.read(cid) as cp:
            assert [e[0] for e in cp.effects()] == [0, 1]


class TestForkInheritance:
    def test_a_fork_inherits_logs_tags_and_token_numbering(self, store: Store) -> None:
        """Logs are cumulative: the child's logs start with the parent's."""
        parent = record_sample(store.recorder("run"))
        child = store.recorder("run", branch="spec", parent=parent)
        assert child.token("rng", 9) == 4
        cid = child.checkpoint(48, {"messages": ["hi", "again"]}, tags=["replay:1"])
        m = store.manifest(cid)
        assert m.parent == parent
        assert m.provenance_tags == ("prod", "replay:1")
        with store.read(cid) as cp:
            assert cp.token_count() == 5
            assert len(cp.observations()) == 2
            assert cp.transcript() == b"final answer"

    def test_forking_from_another_runs_checkpoint_is_refused(self, store: Store) -> None:
        """A branch belongs to one run."""
        cid = store.recorder("a").checkpoint(1, b"s")
        with pytest.raises(InvalidInputError):
            store.recorder("b", parent=cid)


class TestRecorderInput:
    @pytest.mark.parametrize(
        "call",
        [
            lambda r: r.observe(-1, "s", b"p", pinned_at=None),
            lambda r: r.observe(1, "", b"p", pinned_at=None),
            lambda r: r.observe(1, "s", "text", pinned_at=None),
            lambda r: r.observe(1, "s", b"p", pinned_at=float("nan")),
            lambda r: r.token("", 1),
            lambda r: r.token("rng", 1, provenance="guessed"),
            lambda r: r.token("rng", object()),
            lambda r: r.decision(1, {"tool": "x"}),
            lambda r: r.decision(1, {"node": "x", "step": 2}),
            lambda r: r.effect("", b"p"),
            lambda r: r.harness_access("cache", {1: 2}),
            lambda r: r.checkpoint(1, b"s", tags="prod"),
            lambda r: r.checkpoint(1, b"s", metadata={"t": {1, 2}}),
        ],
    )
    def test_wrong_arguments_raise_invalid_input(self, store: Store, call: Any) -> None:
        """Every recorder call checks its arguments and raises InvalidInputError."""
        with pytest.raises(InvalidInputError):
            call(store.recorder("run"))

    @pytest.mark.parametrize("name", ["", "a\x00b", "x" * 201, 5])
    def test_bad_run_ids_are_refused(self, store: Store, name: object) -> None:
        """Run ids are 1-200 UTF-8 bytes without NUL."""
        with pytest.raises(InvalidInputError):
            store.recorder(name)  # type: ignore[arg-type]


class TestManifestEncoding:
    def test_recorded_manifests_are_the_canonical_encoding_of_their_map(self, store: Store) -> None:
        """The recorder's fast manifest encoder writes exactly encode_value of the manifest map."""
        rec = store.recorder("run")
        ids = [record_sample(rec)]
        big = {f"part{i:02d}": bytes([i]) * 10 for i in range(20)}  # > 15 parts: map16 header
        big["huge"] = b"x" * (CHUNK_SIZE + 5)
        ids.append(rec.checkpoint(48, big, metadata={"z": 1, "a": [None, 2.5]}, tags=["b", "a"]))
        ids.append(rec.checkpoint(49, b"raw bytes state", seal_ledger=False))
        fork = store.recorder("run", branch="side", parent=ids[0])
        ids.append(fork.checkpoint(50, {"ü": "x", "a": 1}))
        with store.backend.env.read() as txn:
            for cid in ids:
                value = raw_get(txn, store.backend.dbs, "checkpoints", bytes.fromhex(cid))
                assert value is not None
                _, data = unpack_checkpoint_value(value)
                raw = store.manifest(cid).raw
                assert bytes(data) == encode_value(raw)
                if raw["state"]["kind"] == "parts":
                    assert digest(encode_value(raw["state"]["parts"])) == raw["state"]["digest"]


def test_call_graph_and_harness_reads_never_share_nested_values(store: Store) -> None:
    """Mutating a nested value call_graph()/harness_accesses() returned changes no later call."""
    rec = store.recorder("run-nested")
    rec.decision(0, "pick", args={"a": [1]})
    rec.harness_access("clock", {"x": [1]})
    cid = rec.checkpoint(0, {"x": 1})
    with store.read(cid) as cp:
        cp.call_graph()[0]["args"]["a"].append(99)
        cp.harness_accesses()[0]["detail"]["x"].append(7)
        assert cp.call_graph() == [{"node": "pick", "step": 0, "args": {"a": [1]}}]
        assert cp.harness_accesses() == [{"resource": "clock", "detail": {"x": [1]}}]
