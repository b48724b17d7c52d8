"""The two head halves' decoders (``load_checkpoint``, ``load_metadata``) share one
helper; each keeps its own errors: what, where, expected and got, for a half that is
not a map, one the serde refuses, one that is not a serde pair, and (checkpoint only)
a ``channel_versions`` that is not a map."""

from __future__ import annotations

from typing import Any

import ormsgpack
import pytest
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from cpstore.errors import IntegrityError
from cpstore.langgraph._codec import load_checkpoint, load_metadata, pack_typed

SERDE = JsonPlusSerializer()


def _part(value: Any) -> bytes:
    return pack_typed(SERDE.dumps_typed(value))


def test_maps_decode() -> None:
    cp = {"id": "1", "channel_versions": {"a": 1}}
    assert load_checkpoint(SERDE, _part(cp), "cp 1") == cp
    assert load_checkpoint(SERDE, _part({"id": "2"}), "cp 2") == {"id": "2"}
    assert load_metadata(SERDE, _part({"step": 3}), "cp 1") == {"step": 3}


@pytest.mark.parametrize(
    ("load", "half", "what"),
    [
        (load_checkpoint, "checkpoint", "a LangGraph checkpoint head does not decode to a map"),
        (load_metadata, "metadata", "LangGraph checkpoint metadata does not decode to a map"),
    ],
)
def test_not_a_map(load: Any, half: str, what: str) -> None:
    with pytest.raises(IntegrityError) as info:
        load(SERDE, _part([1, 2]), "checkpoint ab")
    err = info.value
    assert (err.what, err.where, err.expected, err.got) == (
        what,
        f"checkpoint ab: head {half}",
        "dict",
        "list",
    )


@pytest.mark.parametrize(
    ("load", "half"), [(load_checkpoint, "checkpoint"), (load_metadata, "metadata")]
)
def test_undecodable_and_unframed(load: Any, half: str) -> None:
    bad = pack_typed(("msgpack", b"\xc1"))  # 0xc1: never used in msgpack
    with pytest.raises(IntegrityError) as info:
        load(SERDE, bad, "cp")
    assert info.value.what == "a stored LangGraph value does not decode with the saver's serde"
    assert info.value.where == f"cp: head {half}"
    with pytest.raises(IntegrityError) as info:
        load(SERDE, b"no nul here", "cp")
    assert info.value.where is not None and info.value.where.startswith(f"cp: head {half}")


def test_channel_versions_not_a_map() -> None:
    part = pack_typed(("msgpack", ormsgpack.packb({"id": "1", "channel_versions": [1]})))
    with pytest.raises(IntegrityError) as info:
        load_checkpoint(SERDE, part, "cp")
    err = info.value
    assert (err.what, err.where, err.expected, err.got) == (
        "a LangGraph checkpoint's channel_versions is not a map",
        "cp: head checkpoint",
        "dict",
        "list",
    )
