"""CpstoreSaver's read path: the same tuples as the serde decodes, every object verified."""

from __future__ import annotations

import datetime
import decimal
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.types import Send
from lg_audit24 import Colour, Model, Point
from stored import damage, raw_delete, raw_get, raw_items, raw_put

from cpstore.errors import IntegrityError
from cpstore.langgraph import CpstoreSaver, _codec
from cpstore.langgraph._codec import pack_typed, part_loader
from cpstore.langgraph._read import entry_at
from cpstore.native.binding import digest
from cpstore.store import Store
from cpstore.store.lg_states import StateReads

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=50)
    | st.binary(max_size=50)
    | st.datetimes(timezones=st.none() | st.just(datetime.UTC))
    | st.dates()
    | st.uuids()
    | st.decimals(allow_nan=False, allow_infinity=False, places=3)
)
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=6), inner, max_size=4)
        | st.frozensets(st.integers(-1000, 1000), max_size=4)
        | st.sets(st.text(max_size=4), max_size=4)
    ),
    max_leaves=15,
)

_OBJECTS: list[Any] = [
    HumanMessage(content="hi", id="m1"),
    AIMessage(
        content="",
        id="m2",
        tool_calls=[{"name": "search", "args": {"q": "x"}, "id": "c1", "type": "tool_call"}],
    ),
    ToolMessage(content="result", tool_call_id="c1", id="m3"),
    SystemMessage(content="be brief"),
    [HumanMessage(content="a" * 2000, id=f"h{i}") for i in range(30)],
    Send("node", {"arg": 1}),
    Colour.RED,
    Point(1, [2, 3]),
    Model(name="n", tags=["a", "b"]),
    {"when": datetime.datetime(2026, 1, 2, 3, 4, 5), "id": uuid.UUID(int=7)},
    decimal.Decimal("1.25"),
    {1, 2, 3},
    (1, "two", b"three"),
    None,
    b"raw bytes",
    bytearray(b"mutable bytes"),
]


def _same(a: Any, b: Any) -> None:
    assert type(a) is type(b)
    assert repr(a) == repr(b)
    assert a == b


class TestPartLoader:
    @settings(max_examples=300, deadline=None)
    @given(_values)
    def test_the_default_serde_decodes_a_part_as_loads_typed_does(self, value: Any) -> None:
        """Any value: the fast path of JsonPlusSerializer returns what its loads_typed returns."""
        serde = JsonPlusSerializer()
        typed = serde.dumps_typed(value)
        _same(part_loader(serde)(pack_typed(typed), "test"), serde.loads_typed(typed))

    @pytest.mark.parametrize("value", _OBJECTS, ids=lambda v: type(v).__name__)
    def test_messages_and_langgraph_objects_decode_as_loads_typed_does(self, value: Any) -> None:
        """Messages, Send, enums, dataclasses, pydantic models, sets, bytes: as loads_typed."""
        serde = JsonPlusSerializer()
        typed = serde.dumps_typed(value)
        _same(part_loader(serde)(pack_typed(typed), "test"), serde.loads_typed(typed))

    def test_a_strict_allowlist_is_the_serializers_own(self) -> None:
        """With an allowlist that omits a type, the fast path refuses it as loads_typed does."""
        serde = JsonPlusSerializer(allowed_msgpack_modules=None)
        typed = serde.dumps_typed(Point(1, [2]))
        _same(part_loader(serde)(pack_typed(typed), "test"), serde.loads_typed(typed))

    def test_any_other_serde_goes_through_its_loads_typed(self) -> None:
        """A subclass, an instance override and another serde class each get their loads_typed."""
        calls: list[str] = []

        class Counting(JsonPlusSerializer):  # type: ignore[misc]
            def loads_typed(self, data: tuple[str, bytes]) -> Any:
                calls.append("subclass")
                return super().loads_typed(data)

        patched = JsonPlusSerializer()
        inner = patched.loads_typed

        def counted(data: tuple[str, bytes]) -> Any:
            calls.append("instance")
            return inner(data)

        patched.loads_typed = counted

        class Reversed:  # "msgpack" bytes stored backwards: only its loads_typed reads them
            def loads_typed(self, data: tuple[str, bytes]) -> Any:
                calls.append("other")
                return JsonPlusSerializer().loads_typed((data[0], data[1][::-1]))

        typed = JsonPlusSerializer().dumps_typed({"a": [1]})
        for serde in (Counting(), patched):
            assert part_loader(serde)(pack_typed(typed), "test") == {"a": [1]}
        backwards = (typed[0], typed[1][::-1])
        assert part_loader(Reversed())(pack_typed(backwards), "test") == {"a": [1]}
        assert calls == ["subclass", "instance", "other"]

    def test_the_fast_decode_runs_on_this_release_and_no_untested_one(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The installed langgraph-checkpoint is a proven release (these tests run the
        fast path); any release not listed calls the serde's own loads_typed."""
        assert _codec.FAST_DECODE  # else every equality test above tested the slow path
        calls: list[object] = []
        real = JsonPlusSerializer.loads_typed

        def spied(self: JsonPlusSerializer, data: tuple[str, bytes]) -> Any:
            calls.append(data[0])
            return real(self, data)

        typed = JsonPlusSerializer().dumps_typed({"a": [1]})
        serde = JsonPlusSerializer()
        monkeypatch.setattr(_codec, "FAST_DECODE", False)
        monkeypatch.setattr(JsonPlusSerializer, "loads_typed", spied)
        monkeypatch.setattr(_codec, "_JSONPLUS_LOADS", spied)  # the class's own method
        assert part_loader(serde)(pack_typed(typed), "test") == {"a": [1]}
        assert calls == ["msgpack"]

    def test_a_part_without_its_type_tag_is_an_integrity_error(self) -> None:
        """Bytes with no NUL after the type tag are refused on the fast path too."""
        with pytest.raises(IntegrityError):
            part_loader(JsonPlusSerializer())(b"msgpack-without-a-nul", "test")


def _cfg(thread: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def _record(saver: CpstoreSaver, thread: str, steps: int) -> list[str]:
    """``steps`` puts, one of four channels (text, list, dict, message list) new each step."""
    values: dict[str, Any] = {
        "text": "t0",
        "items": [0],
        "doc": {"k": [0]},
        "messages": [HumanMessage(content="m0", id="m0")],
    }
    versions = dict.fromkeys(values, 1)
    config = _cfg(thread)
    ids = []
    for step in range(steps):
        name = list(values)[step % 4]
        if step:
            values[name] = {
                "text": f"text {step} " + "x" * 200,
                "items": [step, step + 1],
                "doc": {"k": [step], "s": str(step)},
                "messages": [*values["messages"], AIMessage(content=f"m{step}", id=f"m{step}")],
            }[name]
            versions[name] += 1
        cp = empty_checkpoint()
        cp["channel_values"] = dict(values)
        cp["channel_versions"] = dict(versions)
        new = dict(versions) if step == 0 else {name: versions[name]}
        config = saver.put(config, cp, {"source": "loop", "step": step}, new)
        saver.put_writes(config, [("items", [step])], f"task-{step}")
        ids.append(config["configurable"]["checkpoint_id"])
    return ids


@pytest.fixture
def saver(tmp_path: Path) -> Any:
    with CpstoreSaver.from_conn_string(tmp_path / "store", durability="none") as s:
        yield s


class TestListAndGet:
    def test_list_reads_every_checkpoint_as_get_tuple_does(self, saver: CpstoreSaver) -> None:
        """Every tuple of a list (several batches) equals get_tuple of its id."""
        ids = _record(saver, "t", 300)
        listed = list(saver.list(_cfg("t")))
        assert [t.config["configurable"]["checkpoint_id"] for t in listed] == ids[::-1]
        for tup in listed:
            assert saver.get_tuple(tup.config) == tup
        assert listed[-1].checkpoint["channel_values"]["text"] == "t0"
        assert listed[0].pending_writes == [("task-299", "items", [299])]

    def test_no_two_tuples_share_a_changeable_value(self, saver: CpstoreSaver) -> None:
        """Lists, dicts and messages of unchanged channels are fresh objects in each tuple."""
        _record(saver, "t", 9)
        tuples = list(saver.list(_cfg("t")))
        first, second = (t.checkpoint["channel_values"] for t in tuples[-2:])
        assert first["doc"] == second["doc"] and first["messages"] == second["messages"]
        for name in ("items", "doc", "messages"):
            assert first[name] is not second[name]
        first["doc"]["k"].append("changed")
        first["messages"][0].content = "changed"
        assert second["doc"] == {"k": [0]} and second["messages"][0].content == "m0"
        assert tuples[-1].checkpoint["channel_values"]["messages"][0].content == "m0"

    def test_a_damaged_value_of_an_older_checkpoint_fails_the_list(
        self, saver: CpstoreSaver
    ) -> None:
        """Damage to a value only an older checkpoint holds: list raises, the head still reads."""
        ids = _record(saver, "t", 40)
        backend = saver.store.backend
        with backend.read_txn() as txn:
            keys = [k for k, v in raw_items(txn, backend.dbs, "objects") if b"text 4 " in v]
        assert len(keys) == 1

        def flip(txn: Any, dbs: Any) -> None:
            value = raw_get(txn, dbs, "objects", keys[0]) or b""
            raw_put(txn, dbs, "objects", keys[0], value.replace(b"text 4 ", b"text 5 "))

        damage(saver.store, flip)
        with pytest.raises(IntegrityError):
            list(saver.list(_cfg("t")))
        with pytest.raises(IntegrityError):
            saver.get_tuple(_cfg("t", ids[4]))
        assert saver.get_tuple(_cfg("t", ids[-1])) is not None

    def test_a_damaged_value_every_checkpoint_shares_fails_the_list(
        self, saver: CpstoreSaver
    ) -> None:
        """Damage to a value read once and shared by the rest of the batch: list raises."""
        _record(saver, "t", 3)  # "doc" unchanged in all three
        backend = saver.store.backend
        with backend.read_txn() as txn:
            keys = [k for k, v in raw_items(txn, backend.dbs, "objects") if b"\xa1k" in v]
        assert keys

        def flip(txn: Any, dbs: Any) -> None:
            for key in keys:
                value = raw_get(txn, dbs, "objects", key) or b""
                raw_put(txn, dbs, "objects", key, value.replace(b"\xa1k", b"\xa1j"))

        damage(saver.store, flip)
        with pytest.raises(IntegrityError):
            list(saver.list(_cfg("t")))

    def test_a_pruned_checkpoint_reads_none_and_list_skips_it(self, saver: CpstoreSaver) -> None:
        """Retention pruned the older checkpoints: get_tuple gives None, list the kept ones."""
        ids = _record(saver, "t", 6)
        assert saver.store.prune(keep_last=2, run_id="lg:t") == 4
        assert saver.get_tuple(_cfg("t", ids[0])) is None
        assert [t.config["configurable"]["checkpoint_id"] for t in saver.list(_cfg("t"))] == [
            ids[5],
            ids[4],
        ]

    def test_a_checkpoint_neither_stored_nor_pruned_is_an_integrity_error(
        self, saver: CpstoreSaver
    ) -> None:
        """An index entry naming a record that is gone without a tombstone is damage."""
        ids = _record(saver, "t", 3)
        tup = saver.get_tuple(_cfg("t", ids[1]))
        assert tup is not None
        cid = _cid_of(saver, ids[1])
        damage(saver.store, lambda txn, dbs: raw_delete(txn, dbs, "checkpoints", cid))
        with pytest.raises(IntegrityError, match="not stored"):
            saver.get_tuple(_cfg("t", ids[1]))
        with pytest.raises(IntegrityError, match="not stored"):
            list(saver.list(_cfg("t")))


def _cid_of(saver: CpstoreSaver, checkpoint_id: str) -> bytes:
    backend = saver.store.backend
    with backend.read_txn() as txn:
        entry = entry_at(txn, backend.db("meta"), "t", "", checkpoint_id)
    assert entry is not None
    return entry.cid


class TestStateReads:
    def test_states_equal_the_readers_and_share_only_immutable_values(self, tmp_path: Path) -> None:
        """Parts, bytes and chunked states read as CheckpointView reads them; lists are fresh."""
        with Store(tmp_path / "s", durability="none") as store:
            rec = store.recorder("r")
            big = b"".join(digest(i.to_bytes(4, "big")) for i in range(40_000))  # chunked
            ids = [
                rec.checkpoint(0, {"a": "same", "l": [1, 2], "n": 0}),
                rec.checkpoint(1, {"a": "same", "l": [1, 2], "n": 1}),
                rec.checkpoint(2, b"a bytes state"),
                rec.checkpoint(3, {"big": big, "a": "same"}),
                rec.checkpoint(4, {"a": "same", "l": [1, 2], "n": 4}),
            ]
            backend = store.backend
            with backend.read_txn() as txn:
                reads = StateReads(backend, txn)
                states = [reads.state(bytes.fromhex(i)) for i in ids]
                assert reads.state(digest(b"no such checkpoint")) is None
            for cid, state in zip(ids, states, strict=True):
                with store.read(cid) as view:
                    assert view.state() == state
            first, second, last = states[0], states[1], states[4]
            assert isinstance(first, dict) and isinstance(second, dict)
            assert isinstance(last, dict)
            assert first["a"] is second["a"] is last["a"]
            assert first["l"] is not second["l"] and second["l"] is not last["l"]

    def test_a_changed_result_is_not_shared_with_the_next_read(self, tmp_path: Path) -> None:
        """A caller that edits the dict it got does not change what the next state reads."""
        with Store(tmp_path / "s", durability="none") as store:
            rec = store.recorder("r")
            ids = [rec.checkpoint(i, {"a": "same", "n": i}) for i in range(3)]
            backend = store.backend
            with backend.read_txn() as txn:
                reads = StateReads(backend, txn)
                first = reads.state(bytes.fromhex(ids[0]))
                assert isinstance(first, dict)
                first["a"] = "edited"
                assert reads.state(bytes.fromhex(ids[1])) == {"a": "same", "n": 1}
                assert reads.state(bytes.fromhex(ids[2])) == {"a": "same", "n": 2}
