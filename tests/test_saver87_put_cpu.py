"""saver87: the put path's CPU work cut without changing what it stores.

The writer keeps the last checkpoint's sorted ``have`` (the channels holding a value)
and reuses it while the channels holding values stay the same; ``pack_typed`` packs
the serde tags LangGraph gives from a kept prefix; ``pack_value`` packs a small
value's pair as given. Each is checked against what it replaced, on both engines.
"""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from pg_cluster import backend_store  # noqa: F401 - fixture

from cpstore.errors import InvalidInputError
from cpstore.langgraph import CpstoreSaver, _write
from cpstore.langgraph._codec import CHANNEL, pack_typed, pack_value
from cpstore.langgraph._read import entry_at
from cpstore.store import Store
from cpstore.store.lg_index import checkpoint_key, pack


def _generic_pack(kind: str, data: bytes) -> bytes:
    return kind.encode("utf-8") + b"\x00" + bytes(data)


@pytest.mark.parametrize(
    ("kind", "data"),
    [
        ("msgpack", b"\x93\x01\x02\x03"),
        ("json", b"{}"),
        ("null", b""),
        ("bytes", b"\x00\xff"),
        ("bytearray", bytearray(b"ab")),
        ("pickle", memoryview(b"xy")),
        ("cpstore.list", b""),
        ("t\u00e9", b"z"),
    ],
)
def test_pack_typed_gives_the_generic_bytes(kind: str, data: Any) -> None:
    assert pack_typed((kind, data)) == _generic_pack(kind, data)
    assert type(pack_typed((kind, data))) is bytes


@pytest.mark.parametrize("typed", [("a\x00b", b""), (b"msgpack", b""), ("msgpack", "text")])
def test_pack_typed_still_refuses_what_it_refused(typed: Any) -> None:
    with pytest.raises(InvalidInputError):
        pack_typed(typed)


@pytest.mark.parametrize("value", [None, b"raw", bytearray(b"ba"), "text", {"k": [1, 2]}, [1] * 10])
def test_pack_value_of_a_small_value_is_its_packed_pair(value: Any) -> None:
    serde = JsonPlusSerializer()
    kind, data = serde.dumps_typed(value)
    assert pack_value(serde, "c", value) == {CHANNEL + "c": _generic_pack(kind, data)}


def _put(
    saver: CpstoreSaver,
    config: dict[str, Any],
    step: int,
    *,
    values: dict[str, Any],
    versions: dict[str, Any],
    new: dict[str, Any],
) -> dict[str, Any]:
    cp = empty_checkpoint()
    cp["channel_values"] = dict(values)
    cp["channel_versions"] = dict(versions)
    return saver.put(config, cp, {"source": "loop", "step": step, "parents": {}}, new)


def test_have_follows_values_emptied_added_and_dropped(store: Store) -> None:
    """The index entry's ``have`` is right at each step (flag flips, channels gone or
    new), and the kept list is reused only while it is the same."""
    saver = CpstoreSaver(store)
    config: dict[str, Any] = {"configurable": {"thread_id": "s87-have", "checkpoint_ns": ""}}
    steps: list[tuple[dict[str, Any], dict[str, Any], dict[str, Any], list[str]]] = [
        ({"a": 1, "b": 2}, {"a": "1", "b": "1"}, {"a": "1", "b": "1"}, ["a", "b"]),
        ({"a": 1, "b": 3}, {"a": "1", "b": "2"}, {"b": "2"}, ["a", "b"]),
        # b emptied: a new version and no value (the empty marker)
        ({"a": 1}, {"a": "1", "b": "3"}, {"b": "3"}, ["a"]),
        ({"a": 1}, {"a": "1", "b": "3"}, {}, ["a"]),
        # b holds a value again, c is new
        (
            {"a": 1, "b": 4, "c": 5},
            {"a": "1", "b": "4", "c": "1"},
            {"b": "4", "c": "1"},
            ["a", "b", "c"],
        ),
        # c dropped from the versions; a emptied at once
        ({"b": 4}, {"a": "2", "b": "4"}, {"a": "2"}, ["b"]),
        ({"b": 6, "z": 0}, {"a": "2", "b": "5", "z": "1"}, {"b": "5", "z": "1"}, ["b", "z"]),
    ]
    kept: list[str] | None = None
    for step, (values, versions, new, have) in enumerate(steps):
        config = _put(saver, config, step, values=values, versions=versions, new=new)
        conf = config["configurable"]
        key = checkpoint_key(conf["thread_id"], "", conf["checkpoint_id"])
        with store.backend.read_txn() as txn:
            entry = entry_at(
                txn, store.backend.db("meta"), conf["thread_id"], "", conf["checkpoint_id"]
            )
            raw = bytes(txn.get(key, db=store.backend.db("meta")))
        assert entry is not None and list(entry.have) == have, step
        # the writer's map spelt out is Entry.body_of's, byte for byte
        assert raw == pack(key, entry.body())
        tup = saver.get_tuple(config)
        assert tup is not None
        assert tup.checkpoint["channel_values"] == {k: values[k] for k in have}
        (branch,) = saver._writer._branches.values()
        if step == 1:  # b changed, still holding a value: the kept list again
            assert branch.have is kept
        if step == 3:  # nothing new
            assert branch.have is kept
        kept = branch.have
        assert kept == have


def test_the_puts_built_without_their_new_are_whole(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Writer.put`` and a cached branch's plan build their NamedTuples through
    ``tuple.__new__`` with every field spelt out (saver87): a field added to ``Put`` or
    ``_Plan`` without those calls would make a tuple one short, read by name wrongly."""
    assert _write.Put._fields == (  # a new field: add it to Writer.put's _new_tuple too
        "thread_id", "ns", "parent_id", "checkpoint_id", "step", "run_id", "head_parts",
        "fresh", "versions", "values", "new", "expect_entry", "records",
    )  # fmt: skip
    assert _write._Plan._fields == (  # a new field: add it to Writer.commit's too
        "run", "branch", "fork_from", "new_branch", "parent",
    )  # fmt: skip
    seen: list[Any] = []
    plans: list[Any] = []
    commit, branch = _write.Writer.commit, _write.Writer._branch

    def keep_commit(self: Any, put: Any) -> str:
        seen.append(put)
        return commit(self, put)

    def keep_branch(self: Any, plan: Any) -> Any:
        plans.append(plan)
        return branch(self, plan)

    monkeypatch.setattr(_write.Writer, "commit", keep_commit)
    monkeypatch.setattr(_write.Writer, "_branch", keep_branch)
    saver = CpstoreSaver(store)
    config: dict[str, Any] = {"configurable": {"thread_id": "s87-new", "checkpoint_ns": ""}}
    for step in range(3):
        config = _put(saver, config, step, values={"a": step}, versions={"a": str(step + 1)},
                      new={"a": str(step + 1)})  # fmt: skip
    assert len(seen) == 3 and plans
    for put in seen:
        assert type(put) is _write.Put and len(put) == len(_write.Put._fields)
        assert _write.Put(**put._asdict()) == put
        assert (put.expect_entry, put.records, put.step) == (None, (), seen.index(put))
    for plan in plans:
        assert type(plan) is _write._Plan and len(plan) == len(_write._Plan._fields)
