"""``get_tuple`` decodes channel values straight from the stored part bytes (reads89).

A single-use Loader (``get_tuple``) takes ``Loader._from_views``: every part read and
hash-checked as before (``StateReads.part_views``), each value decoded from the part's
bytes as stored instead of from the copy a msgpack decode of the part made. Anything
else (a list channel, a part that is not one msgpack bin, damage) takes the general
path, which ``list`` always takes. These pin that both give the same tuple for any
values, with the default serde and with one the fast decode does not apply to, that
the new path is the one taken, and that damage is refused as before.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.checkpoint.base import CheckpointTuple, empty_checkpoint
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from stored import edit_raw, flip_byte

import cpstore.store as cpstore_store
from cpstore.errors import IntegrityError
from cpstore.langgraph import CpstoreSaver
from cpstore.langgraph import _loader as loader_mod
from cpstore.langgraph._codec import SEGMENT_BYTES, pack_value
from cpstore.langgraph._loader import Loader
from cpstore.langgraph._read import entry_at
from cpstore.store import Store
from cpstore.store.decode import msgspec_safe

_THREADS = itertools.count()


class _OwnSerde(JsonPlusSerializer):  # type: ignore[misc]
    """A serde the msgpack fast decode does not apply to (not the exact default class)."""


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    s = cpstore_store.open(str(tmp_path_factory.mktemp("views") / "s"))
    assert isinstance(s, Store)
    yield s
    s.close()


_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=40)
    | st.binary(max_size=40)
    # bin8 and bin16 parts, and a bin32 one (chunked: the general path)
    | st.sampled_from([100, 300, 70_000]).map(lambda n: "x" * n)
)
#: A list the saver stores as segments (over SEGMENT_BYTES of msgpack): the general path.
_LONG_LIST = st.just(["z" * 1000] * 20)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)
_CHANNELS = st.dictionaries(st.sampled_from(["a", "b", "c", "messages"]), _VALUES, min_size=1)


def _put(saver: CpstoreSaver, values: dict[str, Any]) -> dict[str, Any]:
    cp = empty_checkpoint()
    cp["channel_values"] = dict(values)
    cp["channel_versions"] = dict.fromkeys(values, 1)
    config = {"configurable": {"thread_id": f"t{next(_THREADS)}", "checkpoint_ns": ""}}
    put: dict[str, Any] = saver.put(
        config, cp, {"source": "loop", "step": 1}, dict.fromkeys(values, 1)
    )
    saver.put_writes(put, [("a", [1, "w"])], "task")
    return put


def _general(saver: CpstoreSaver, config: dict[str, Any]) -> CheckpointTuple | None:
    """The tuple as the general path reads it (a ``list`` batch's Loader)."""
    c = config["configurable"]
    backend = saver.store.backend
    with backend.read_txn() as txn:
        entry = entry_at(txn, backend.db("meta"), c["thread_id"], "", c["checkpoint_id"])
        assert entry is not None
        return Loader(txn, saver.store, saver.serde, share=True).tuple(entry)


@pytest.mark.parametrize("serde", [None, _OwnSerde()], ids=["default", "own"])
@given(values=_CHANNELS)
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_get_from_part_bytes_agrees_with_the_general_path(
    store: Store, serde: Any, values: dict[str, Any]
) -> None:
    saver = CpstoreSaver(store, serde=serde)
    config = _put(saver, values)
    taken: list[bool] = []
    real = Loader._from_views

    def spy(self: Loader, entry: Any) -> CheckpointTuple | None:
        got = real(self, entry)
        taken.append(got is not None)
        return got

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Loader, "_from_views", spy)
        fast = saver.get_tuple(config)
    assert fast is not None
    assert fast == _general(saver, config)
    assert fast.checkpoint["channel_values"] == values
    # The new path is taken for values the serde packs as msgpack (not None: its own
    # type) of the common size, none stored as a list's segments (a large value may be
    # stored chunked: the general path reads it), unless the recursion limit is raised
    # (hypothesis may raise it): then msgpack decodes, as read_parts says.
    packed = [p for k, v in values.items() for p in pack_value(saver.serde, k, v).values()]
    if (
        msgspec_safe()
        and len(packed) == len(values)
        and all(p.startswith(b"msgpack\x00") and len(p) <= SEGMENT_BYTES for p in packed)
    ):
        assert taken == [True]
    else:
        assert len(taken) == 1


def test_a_changed_value_never_changes_the_next_get(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    saver = CpstoreSaver(store)
    config = _put(saver, {"a": {"k": ["v"]}, "b": "text", "c": 7, "messages": "m" * 300})
    taken: list[bool] = []
    real = Loader._from_views

    def spy(self: Loader, entry: Any) -> CheckpointTuple | None:
        got = real(self, entry)
        taken.append(got is not None)
        return got

    monkeypatch.setattr(Loader, "_from_views", spy)
    first = saver.get_tuple(config)
    assert first is not None and taken == [True]
    assert first == _general(saver, config)
    first.checkpoint["channel_values"]["a"]["k"].append("changed")
    first.checkpoint["channel_values"]["b"] = "changed"
    again = saver.get_tuple(config)
    assert again is not None
    assert again == _general(saver, config)
    assert again.checkpoint["channel_values"]["a"] == {"k": ["v"]}
    assert again.checkpoint["channel_values"]["b"] == "text"


def test_a_part_that_is_no_bin_takes_the_general_path(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hash-checked part whose framing is not a bin of "msgpack" bytes is decoded (or
    refused) by the general path: here every part is made to look so, and the tuple is
    the same."""
    saver = CpstoreSaver(store)
    config = _put(saver, {"a": "x", "b": {"k": 1}, "c": "y" * 300})
    expected = _general(saver, config)
    for header in ("_BIN16", "_BIN8"):
        monkeypatch.setattr(loader_mod, header, lambda view: (0, 0, b""))
    assert saver.get_tuple(config) == expected


def test_a_damaged_part_is_refused_as_before(tmp_path: Path) -> None:
    """A part whose bytes no longer hash to its digest: the views path finds no match and
    the general path refuses it as it refuses it for a ``list`` batch."""
    path = tmp_path / "s"
    with cpstore_store.open(str(path)) as s:
        assert isinstance(s, Store)
        config = _put(CpstoreSaver(s), {"a": "y" * 300, "b": 1})
        c = config["configurable"]
        backend = s.backend
        with backend.read_txn() as txn:
            entry = entry_at(txn, backend.db("meta"), c["thread_id"], "", c["checkpoint_id"])
            assert entry is not None
            raw, _ = backend.load_raw(txn, entry.cid, verify=True)
    edit_raw(path, "objects", raw["state"]["parts"]["channel/a"], flip_byte(-1))
    with cpstore_store.open(str(path)) as s:
        assert isinstance(s, Store)
        saver = CpstoreSaver(s)
        with pytest.raises(IntegrityError) as got:
            saver.get_tuple(config)
        with pytest.raises(IntegrityError) as general:
            _general(saver, config)
    assert (got.value.what, got.value.where, got.value.expected, got.value.got) == (
        general.value.what,
        general.value.where,
        general.value.expected,
        general.value.got,
    )
