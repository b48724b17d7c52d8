"""Helpers of the audit24 LangGraph read tests: serde variants, the oracle, comparisons;
and the user types (an enum, a dataclass, a pydantic model) every LangGraph read test
stores (tests/test_langgraph_reads.py imports them too: one definition).

The oracle reads a checkpoint through a CheckpointView only (``load_parts``) and
decodes every stored serde pair with ``serde.loads_typed`` as it is *at read
time*, and the writes through ``stored_writes`` (no Loader, no fast decode).
"""

from __future__ import annotations

import dataclasses
import enum
import pickle
from collections.abc import Callable
from typing import Any

from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from pydantic import BaseModel

from cpstore.errors import CpstoreError, IntegrityError
from cpstore.langgraph import CpstoreSaver
from cpstore.langgraph._codec import (
    CHANNEL,
    LIST_KIND,
    load_value,
    unpack_typed,
)
from cpstore.langgraph._read import Entry, entry_at, load_parts, stored, stored_writes


class Colour(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Point:
    x: int
    y: list[int]


class Model(BaseModel):
    name: str
    tags: list[str]


class _Tupled(JsonPlusSerializer):  # type: ignore[misc]
    """A subclass whose loads_typed turns every list into a tuple (observably not the default)."""

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        return _tuples(super().loads_typed(data))


class _Plain(JsonPlusSerializer):  # type: ignore[misc]
    """A subclass that changes nothing: still not the exact default (decoded by its method)."""


def _tuples(value: Any) -> Any:
    if type(value) is list:
        return tuple(_tuples(v) for v in value)
    if type(value) is dict:
        return {k: _tuples(v) for k, v in value.items()}
    return value


def _ext_marker(code: int, data: bytes) -> Any:
    return ["ext", code, len(data)]


class _Xor:
    """A cipher for EncryptedSerializer (no AES package needed): XOR with one byte."""

    def encrypt(self, plaintext: bytes) -> tuple[str, bytes]:
        return "xor", bytes(b ^ 0x5A for b in plaintext)

    def decrypt(self, ciphername: str, ciphertext: bytes) -> bytes:
        assert ciphername == "xor"
        return bytes(b ^ 0x5A for b in ciphertext)


def _instance_loads() -> JsonPlusSerializer:
    serde = JsonPlusSerializer()
    serde.loads_typed = lambda data: _tuples(JsonPlusSerializer.loads_typed(serde, data))
    return serde


def _instance_dumps() -> JsonPlusSerializer:
    """dumps_typed replaced on the instance: every value pickled (parts not tagged msgpack)."""
    serde = JsonPlusSerializer(pickle_fallback=True)
    serde.dumps_typed = lambda obj: ("pickle", pickle.dumps(obj))
    return serde


#: name -> (serde factory, what to do to the serde after the puts, before the reads).
SERDES: dict[str, tuple[Callable[[], Any], Callable[[Any], None] | None]] = {
    "default": (JsonPlusSerializer, None),
    "subclass": (_Plain, None),
    "subclass-loads": (_Tupled, None),
    "pickle-fallback": (lambda: JsonPlusSerializer(pickle_fallback=True), None),
    "strict-allowlist": (lambda: JsonPlusSerializer(allowed_msgpack_modules=None), None),
    "allowlist": (
        lambda: JsonPlusSerializer(allowed_msgpack_modules=[(__name__, "Point")]),
        None,
    ),
    "custom-ext-hook": (lambda: JsonPlusSerializer(__unpack_ext_hook__=_ext_marker), None),
    "ext-hook-replaced-later": (
        JsonPlusSerializer,
        lambda serde: setattr(serde, "_unpack_ext_hook", _ext_marker),
    ),
    "loads-typed-replaced-later": (
        JsonPlusSerializer,
        lambda serde: setattr(
            serde, "loads_typed", lambda d: _tuples(JsonPlusSerializer.loads_typed(serde, d))
        ),
    ),
    "instance-loads": (_instance_loads, None),
    "instance-dumps": (_instance_dumps, None),
    "encrypted": (lambda: EncryptedSerializer(_Xor(), JsonPlusSerializer()), None),
}


def _same(got: Any, want: Any, at: str = "") -> None:
    """Equal, of the same types all the way down (a list is not a tuple, 1 is not True)."""
    assert type(got) is type(want), (at, got, want)
    if isinstance(want, dict):
        assert list(got) == list(want), at
        for k in want:
            _same(got[k], want[k], f"{at}/{k!r}")
    elif isinstance(want, (list, tuple)) and type(want) in (list, tuple):
        assert len(got) == len(want), at
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _same(g, w, f"{at}[{i}]")
    else:
        assert repr(got) == repr(want), at
        assert got == want, at


def _loads(serde: Any, typed: tuple[str, bytes]) -> Any:
    """``serde.loads_typed(typed)`` with the saver's rule since lgtrust (written here, not
    taken from ``_codec``): a serde's own exception on stored bytes is IntegrityError."""
    try:
        return serde.loads_typed(typed)
    except CpstoreError:
        raise
    except Exception as exc:
        raise IntegrityError("oracle: the serde refused stored bytes", where="oracle") from exc


def _oracle(saver: CpstoreSaver, entry: Entry, txn: Any) -> CheckpointTuple | None:
    """The tuple through a CheckpointView and ``serde.loads_typed`` alone (no Loader)."""
    store, serde = saver.store, saver.serde
    if not stored(txn, store, entry):
        return None
    parts = load_parts(txn, store, entry)
    checkpoint = _loads(serde, unpack_typed(parts["checkpoint"], "oracle"))
    metadata = _loads(serde, unpack_typed(parts["metadata"], "oracle"))
    if type(checkpoint) is not dict or type(metadata) is not dict:
        raise IntegrityError("oracle: a head half is not a map", where="oracle")
    values: dict[str, Any] = {}
    for name, part in parts.items():
        if not name.startswith(CHANNEL):
            continue
        channel = name[len(CHANNEL) :]
        kind, data = unpack_typed(part, name)
        if kind == LIST_KIND:
            values[channel] = load_value(serde, parts, channel, "oracle")
        elif kind != "empty":
            values[channel] = _loads(serde, (kind, data))
    checkpoint["channel_values"] = values
    meta = saver.store.backend.db("meta")
    writes = [
        (w.task_id, w.channel, _loads(serde, w.typed))
        for w in stored_writes(txn, meta, entry.thread_id, entry.ns, entry.checkpoint_id)
    ]
    parent = None if entry.parent is None else _conf(entry.thread_id, entry.ns, entry.parent)
    return CheckpointTuple(entry.config(), checkpoint, metadata, parent, writes)


def _oracle_of(saver: CpstoreSaver, config: dict[str, Any]) -> CheckpointTuple | None:
    conf = config["configurable"]
    backend = saver.store.backend
    with backend.read_txn() as txn:
        entry = entry_at(
            txn, backend.db("meta"), conf["thread_id"], conf["checkpoint_ns"],
            conf.get("checkpoint_id"),
        )  # fmt: skip
        return None if entry is None else _oracle(saver, entry, txn)


def _conf(thread: str, ns: str | None, checkpoint_id: str | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {"thread_id": thread}
    if ns is not None:
        conf["checkpoint_ns"] = ns
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def _same_tuple(got: CheckpointTuple | None, want: CheckpointTuple | None) -> None:
    assert (got is None) == (want is None)
    if got is None or want is None:
        return
    assert type(got) is CheckpointTuple
    _same(got.config, want.config, "config")
    _same(got.checkpoint, want.checkpoint, "checkpoint")
    _same(got.metadata, want.metadata, "metadata")
    _same(got.parent_config, want.parent_config, "parent_config")
    _same(got.pending_writes, want.pending_writes, "pending_writes")


def _outcome(fn: Callable[[], Any]) -> Any:
    try:
        return ("ok", repr(fn()))
    except Exception as exc:  # the class is what the two paths must share
        return ("raised", type(exc))


def _mutate(tup: CheckpointTuple) -> None:
    """Change everything a caller can reach in a tuple."""
    for value in tup.checkpoint["channel_values"].values():
        _mutate_value(value)
    tup.checkpoint["channel_values"]["new"] = 1
    tup.checkpoint["channel_versions"]["new"] = 1
    tup.metadata["step"] = -99
    _mutate_value(tup.metadata["writes"]["n"] if "writes" in tup.metadata else None)
    tup.config["configurable"]["checkpoint_id"] = "changed"
    if tup.parent_config is not None:
        tup.parent_config["configurable"]["thread_id"] = "changed"
    for _, _, value in tup.pending_writes:
        _mutate_value(value)
    tup.pending_writes.append(("x", "y", "z"))


def _mutate_value(value: Any) -> None:
    if type(value) is list:
        value.append("changed")
    elif type(value) is dict:
        value["changed"] = 1
    elif type(value) is set:
        value.add("changed")
    elif type(value) is bytearray:
        value.append(0)
    elif isinstance(value, (Point, HumanMessage)):
        value.__dict__["x" if isinstance(value, Point) else "content"] = "changed"
