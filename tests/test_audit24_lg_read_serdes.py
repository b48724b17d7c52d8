"""audit24: the lgread read paths (inline msgpack decode, single-use get_tuple Loader,
one writes seek per namespace in a list batch) against an oracle on every kind of serde.

The oracle reads a checkpoint through a CheckpointView only (``load_parts``) and
decodes every stored serde pair with ``serde.loads_typed`` as it is *at read
time*, and the writes through ``stored_writes``. Whatever the serde (the exact
default, a subclass, another allowlist, a custom or later replaced ext hook, an
encrypted serde, replaced ``loads_typed`` or ``dumps_typed``), ``get_tuple``,
``list`` (per namespace, across namespaces and threads, with ``before``,
``limit``, ``filter``), ``aget_tuple`` and ``alist`` give the oracle's tuples,
values of the same types, and a caller's changes never reach a later read nor
another tuple of the same read (also through a real graph's ``get_state`` and
``get_state_history``, sync and async). Heads that pass every hash check but are
malformed decode, or raise, as the decode before lgread did; writes another
process commits during lists are seen as one snapshot on both backends.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import datetime
import decimal
import enum
import multiprocessing
import operator
import pickle
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import ormsgpack
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import CheckpointTuple, empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, StateGraph
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures
from pydantic import BaseModel

import cpstore.store as cpstore_store
from cpstore.langgraph import CpstoreSaver
from cpstore.langgraph._codec import (
    CHANNEL,
    HEAD_KEY,
    LIST_KIND,
    branch_label,
    load_value,
    pack_head,
    pack_typed,
    run_for,
    unpack_typed,
)
from cpstore.langgraph._read import Entry, entry_at, load_parts, stored, stored_writes
from cpstore.store import Store
from cpstore.store.lg_index import checkpoint_key, pack


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


def _oracle(saver: CpstoreSaver, entry: Entry, txn: Any) -> CheckpointTuple | None:
    """The tuple through a CheckpointView and ``serde.loads_typed`` alone (no Loader)."""
    store, serde = saver.store, saver.serde
    if not stored(txn, store, entry):
        return None
    parts = load_parts(txn, store, entry)
    checkpoint = serde.loads_typed(unpack_typed(parts["checkpoint"], "oracle"))
    metadata = serde.loads_typed(unpack_typed(parts["metadata"], "oracle"))
    values: dict[str, Any] = {}
    for name, part in parts.items():
        if not name.startswith(CHANNEL):
            continue
        channel = name[len(CHANNEL) :]
        kind, data = unpack_typed(part, name)
        if kind == LIST_KIND:
            values[channel] = load_value(serde, parts, channel, "oracle")
        elif kind != "empty":
            values[channel] = serde.loads_typed((kind, data))
    checkpoint["channel_values"] = values
    meta = saver.store.backend.db("meta")
    writes = [
        (w.task_id, w.channel, serde.loads_typed(w.typed))
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


_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.binary(max_size=20)
    | st.datetimes(timezones=st.none() | st.just(datetime.UTC))
    | st.dates()
    | st.uuids()
    | st.decimals(allow_nan=False, allow_infinity=False, places=3)
    | st.sampled_from([Colour.RED, Point(1, [2, 3]), Model(name="n", tags=["a"])])
    | st.builds(HumanMessage, content=st.text(max_size=10), id=st.text(max_size=4))
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
    max_leaves=12,
)
#: Steps of (namespace, channel values set at that step, writes put for it).
_steps = st.lists(
    st.tuples(
        st.sampled_from(["", "a", "a:b", "a\x00"]),
        st.dictionaries(st.sampled_from(["x", "y", "big"]), _values, min_size=1, max_size=2),
        st.lists(_values, max_size=2),
    ),
    min_size=1,
    max_size=5,
)


def _put_steps(
    saver: CpstoreSaver, thread: str, steps: list[tuple[str, dict[str, Any], list[Any]]]
) -> list[dict[str, Any]]:
    """Put each step on its namespace (values carried over), with its writes; the configs."""
    values: dict[str, dict[str, Any]] = {}
    versions: dict[str, dict[str, int]] = {}
    last: dict[str, dict[str, Any]] = {}
    configs = []
    for step, (ns, changed, writes) in enumerate(steps):
        held, vers = values.setdefault(ns, {}), versions.setdefault(ns, {})
        for name, value in changed.items():
            # "big": a list long enough to be stored in segments (pack_value).
            held[name] = [value, *["p" * 100] * 200] if name == "big" else value
            vers[name] = vers.get(name, 0) + 1
        cp = empty_checkpoint()
        cp["channel_values"] = dict(held)
        cp["channel_versions"] = dict(vers)
        config = saver.put(
            last.get(ns, _conf(thread, ns)),
            cp,
            {"source": "loop", "step": step, "writes": {"n": [step]}},
            {k: vers[k] for k in changed},
        )
        last[ns] = config
        configs.append(config)
        if writes:
            saver.put_writes(config, [("w", v) for v in writes], f"task-{step}")
    return configs


def _check_reads(saver: CpstoreSaver, thread: str, configs: list[dict[str, Any]]) -> None:
    """Every read path against the oracle, each result mutated before the next read."""
    for config in configs:
        _same_tuple(saver.get_tuple(config), _oracle_of(saver, config))
        _same_tuple(asyncio.run(saver.aget_tuple(config)), _oracle_of(saver, config))
    for ns in {c["configurable"]["checkpoint_ns"] for c in configs}:
        latest = _conf(thread, ns)
        _same_tuple(saver.get_tuple(latest), _oracle_of(saver, latest))
    listed = list(saver.list(_conf(thread, None)))
    by_ns = sorted(configs, key=lambda c: c["configurable"]["checkpoint_ns"], reverse=True)
    assert [t.config for t in listed] == [
        c
        for ns in dict.fromkeys(c["configurable"]["checkpoint_ns"] for c in by_ns)
        for c in reversed([c for c in configs if c["configurable"]["checkpoint_ns"] == ns])
    ]
    for tup in listed:  # each changed before the next is compared: no tuple shares with another
        _same_tuple(tup, _oracle_of(saver, tup.config))
        _mutate(tup)
    listed = list(saver.list(_conf(thread, None)))

    async def alist(config: Any, **kw: Any) -> list[CheckpointTuple]:
        return [t async for t in saver.alist(config, **kw)]

    for tup in asyncio.run(alist(_conf(thread, None))):
        _same_tuple(tup, _oracle_of(saver, tup.config))
    for config in configs:
        ns = config["configurable"]["checkpoint_ns"]
        for kw in ({"before": config}, {"limit": 1}, {"filter": {"source": "loop"}}):
            got = list(saver.list(_conf(thread, ns), **kw))
            for tup in got:
                _same_tuple(tup, _oracle_of(saver, tup.config))
            if "before" in kw:
                cid = config["configurable"]["checkpoint_id"]
                assert all(t.config["configurable"]["checkpoint_id"] < cid for t in got)
        step = saver.get_tuple(config)
        assert step is not None
        got = list(saver.list(_conf(thread, ns), filter={"step": step.metadata["step"]}))
        assert [t.config for t in got] == [config]
        _mutate(got[0])
        _same_tuple(saver.get_tuple(config), _oracle_of(saver, config))
    for tup in listed:
        _mutate(tup)
    for tup in saver.list(_conf(thread, None)):
        _same_tuple(tup, _oracle_of(saver, tup.config))


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


_counter = iter(range(10**9))


@pytest.mark.parametrize("variant", list(SERDES))
@settings(
    max_examples=10,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # a failure is shown unshrunk
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=_steps)
def test_every_read_path_equals_the_serdes_own_loads_typed(
    variant: str, steps: list[tuple[str, dict[str, Any], list[Any]]]
) -> None:
    """Hypothesis values (ext types, models, sets, tuples, bytes, nested; a segmented
    list) on four namespaces with a common prefix: each serde's reads as its loads_typed."""
    make, later = SERDES[variant]
    with tempfile.TemporaryDirectory() as tmp:
        store = cpstore_store.open(str(Path(tmp) / "s"), durability="none")
        assert isinstance(store, Store)
        try:
            saver = CpstoreSaver(store, serde=make())
            thread = f"t{next(_counter)}"
            configs = _put_steps(saver, thread, steps)
            saver.get_tuple(configs[-1])  # the saver's loaders are built and kept
            if later is not None:
                later(saver.serde)
            _check_reads(saver, thread, configs)
        finally:
            store.close()


@pytest.fixture(params=["lmdb", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store's address on each backend."""
    if request.param == "lmdb":
        return str(tmp_path / "s")
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    opened = cpstore_store.open(url)
    assert isinstance(opened, Store)
    yield opened
    opened.close()


_FIXED: list[tuple[str, dict[str, Any], list[Any]]] = [
    ("", {"x": uuid.UUID(int=7), "y": [Point(1, [2]), {1, 2}]}, []),
    ("a", {"x": (decimal.Decimal("1.5"), b"raw"), "big": HumanMessage(content="m", id="1")}, []),
    ("", {"y": Model(name="n", tags=["t"])}, [datetime.datetime(2026, 1, 2)]),
    ("a:b", {"x": AIMessage(content="ai", id="2")}, [Colour.RED]),
    ("a", {"x": {"nested": [{"k": (1, 2)}]}}, [bytearray(b"ba")]),
]


@pytest.mark.parametrize("variant", list(SERDES))
def test_each_serde_reads_as_its_loads_typed_on_each_backend(store: Store, variant: str) -> None:
    """The same on PostgreSQL (fixed values: each serde, both backends)."""
    make, later = SERDES[variant]
    saver = CpstoreSaver(store, serde=make())
    configs = _put_steps(saver, "fixed", _FIXED)
    saver.get_tuple(configs[-1])
    if later is not None:
        later(saver.serde)
    _check_reads(saver, "fixed", configs)


def test_a_replaced_ext_hook_is_used_by_the_next_read(tmp_path: Path) -> None:
    """``serde._unpack_ext_hook`` replaced after a read built the saver's loaders: the
    next get_tuple and list decode ext types with the new hook, as loads_typed does.
    (Its own serde: without one a saver gets LangGraph's class-level default, which
    every other saver in the process shares.)"""
    serde = JsonPlusSerializer()
    with CpstoreSaver.from_conn_string(tmp_path / "s", serde=serde, durability="none") as saver:
        assert saver.serde is serde
        cp = empty_checkpoint()
        cp["channel_values"] = {"x": uuid.UUID(int=5)}
        cp["channel_versions"] = {"x": 1}
        config = saver.put(_conf("t", ""), cp, {"step": 0}, {"x": 1})
        saver.put_writes(config, [("x", uuid.UUID(int=6))], "task")
        first = saver.get_tuple(config)
        assert first is not None and first.checkpoint["channel_values"] == {"x": uuid.UUID(int=5)}
        saver.serde._unpack_ext_hook = _ext_marker
        want = saver.serde.loads_typed(saver.serde.dumps_typed(uuid.UUID(int=5)))
        assert want[0] == "ext"
        for got in (saver.get_tuple(config), next(iter(saver.list(_conf("t", ""))))):
            assert got is not None
            assert got.checkpoint["channel_values"] == {"x": want}
            assert got.pending_writes == [("task", "x", want)]


def test_a_with_allowlist_clone_reads_by_its_serde_and_the_original_by_its_own(
    tmp_path: Path,
) -> None:
    """``with_allowlist`` shallow-copies the saver (its kept loaders too) and gives the copy
    a derived serde: the copy decodes the allowed type, the original still refuses it."""
    strict = JsonPlusSerializer(allowed_msgpack_modules=None)
    with CpstoreSaver.from_conn_string(tmp_path / "s", serde=strict, durability="none") as saver:
        cp = empty_checkpoint()
        cp["channel_values"] = {"p": Point(1, [2])}
        cp["channel_versions"] = {"p": 1}
        config = saver.put(_conf("t", ""), cp, {"step": 0}, {"p": 1})
        saver.put_writes(config, [("p", Point(3, [4]))], "task")
        refused = saver.get_tuple(config)  # builds and keeps the strict loaders
        assert refused is not None and refused.checkpoint["channel_values"]["p"] == {
            "x": 1,
            "y": [2],
        }
        clone = saver.with_allowlist([(__name__, "Point")])
        assert isinstance(clone, CpstoreSaver) and clone.serde is not strict
        for got in (clone.get_tuple(config), next(iter(clone.list(_conf("t", ""))))):
            assert got is not None
            _same_tuple(got, _oracle_of(clone, config))
            assert got.checkpoint["channel_values"]["p"] == Point(1, [2])
            assert got.pending_writes == [("task", "p", Point(3, [4]))]
        again = saver.get_tuple(config)
        _same_tuple(again, refused)
        # Another instance of one subclass (the same loads_typed function): its own
        # allowlist, not the kept loaders' instance's.
        saver.serde = _Plain(allowed_msgpack_modules=None)
        assert saver.get_tuple(config) is not None
        saver.serde = _Plain(allowed_msgpack_modules=[(__name__, "Point")])
        got = saver.get_tuple(config)
        assert got is not None and got.checkpoint["channel_values"]["p"] == Point(1, [2])


# -- the head's inline decode: hash-valid but malformed heads -----------------------------

_GOOD_CK = pack_typed(JsonPlusSerializer().dumps_typed(dict(empty_checkpoint())))
_GOOD_MD = pack_typed(JsonPlusSerializer().dumps_typed({"source": "loop", "step": 0}))
#: Head halves a writer never makes but that pass every hash check.
_HALVES: list[bytes] = [
    _GOOD_CK,
    _GOOD_MD,
    b"msgpack\x00\xc1",  # reserved msgpack byte
    b"msgpack\x00",  # nothing to decode
    b"msgpack\x00\x92\x01",  # an array cut short
    pack_typed(("msgpack", ormsgpack.packb([1, 2]))),  # not a map
    pack_typed(("msgpack", ormsgpack.packb(7))),
    pack_typed(("msgpack", ormsgpack.packb({1: 2}, option=ormsgpack.OPT_NON_STR_KEYS))),
    pack_typed(("msgpack", ormsgpack.packb({"a": 1}) + b"\x00")),  # trailing byte
    pack_typed(("msgpack", b"\xc7\x03\x63abc")),  # ext of an unknown code
    pack_typed(("msgpack", b"\xc7\x03\x00abc")),  # ext 0 with junk
    b"json\x00{}",
    b"null\x00",
    b"pickle\x00x",
    b"no type tag",
    b"\xff\xfe\x00x",
]


def _outcome(fn: Callable[[], Any]) -> Any:
    try:
        return ("ok", repr(fn()))
    except Exception as exc:  # the class is what the two paths must share
        return ("raised", type(exc))


def _forge_head(
    saver: CpstoreSaver, thread: str, ck: Any, md: Any, *, layout: int = 2
) -> dict[str, Any]:
    """A checkpoint whose head is (ck, md), named by a valid index entry: layout 2 (the
    head in the manifest's metadata) or layout 1 (the head as state parts, any value)."""
    rec = saver.store.recorder(run_for(thread), branch=branch_label(""))
    checkpoint_id = str(uuid.uuid4())
    key = checkpoint_key(thread, "", checkpoint_id)

    def extra(cid: bytes) -> list[tuple[bytes, bytes | None]]:
        body = Entry.body_of(
            bytes(cid), run=run_for(thread), branch="main", parent=None, run_id=None, have=["c"]
        )
        return [(key, pack(key, body))]

    parts: dict[str, Any] = {CHANNEL + "c": _GOOD_MD}
    if layout == 1:
        parts.update(checkpoint=ck, metadata=md)
        rec.checkpoint(0, parts, extra_meta=extra)
    else:
        rec.checkpoint(0, parts, metadata={HEAD_KEY: pack_head(ck, md)}, extra_meta=extra)
    rec.close()
    return _conf(thread, "", checkpoint_id)


@pytest.mark.parametrize("md", range(len(_HALVES)))
@pytest.mark.parametrize("ck", range(len(_HALVES)))
def test_a_malformed_head_reads_as_loads_typed_of_it_or_raises_its_class(
    tmp_path_factory: pytest.TempPathFactory, ck: int, md: int
) -> None:
    """Every pair of head halves: get_tuple, list and the oracle give the same tuple or
    raise the same class (the inline decode is no worse than load() before it)."""
    path = tmp_path_factory.mktemp("head") / "s"
    with CpstoreSaver.from_conn_string(path, durability="none") as saver:
        config = _forge_head(saver, "t", _HALVES[ck], _HALVES[md])
        want = _outcome(lambda: _oracle_of(saver, config))
        assert _outcome(lambda: saver.get_tuple(config)) == want
        assert _outcome(lambda: list(saver.list(_conf("t", "")))) == (
            want if want[0] == "raised" else ("ok", repr([_oracle_of(saver, config)]))
        )


#: Layout-1 head parts may be any canonical value, not only bytes.
_PART_HALVES: list[Any] = [*_HALVES, "msgpack\x00\x80", 7, None, [_GOOD_CK], {"a": _GOOD_CK}]


@pytest.mark.parametrize(
    ("ck", "md"),
    [(i, 1) for i in range(len(_PART_HALVES))] + [(0, i) for i in range(len(_PART_HALVES))],
)
def test_a_malformed_layout_1_head_reads_as_before(
    tmp_path_factory: pytest.TempPathFactory, ck: int, md: int
) -> None:
    """The head as state parts (layout 1), each half malformed in turn, non-bytes too:
    the same tuple as the oracle or the same error class."""
    path = tmp_path_factory.mktemp("head1") / "s"
    with CpstoreSaver.from_conn_string(path, durability="none") as saver:
        config = _forge_head(saver, "t", _PART_HALVES[ck], _PART_HALVES[md], layout=1)
        want = _outcome(lambda: _oracle_of(saver, config))
        assert _outcome(lambda: saver.get_tuple(config)) == want
        assert _outcome(lambda: list(saver.list(_conf("t", "")))) == (
            want if want[0] == "raised" else ("ok", repr([_oracle_of(saver, config)]))
        )


# -- the per-namespace writes answer: threads, namespaces, concurrent writers ---------------


def test_a_namespace_without_writes_in_one_thread_hides_no_write_of_another(
    store: Store,
) -> None:
    """list() over every thread: thread t1's namespace "" has no writes, t2's does (same
    namespace name, same checkpoint ids' prefixes): each tuple has exactly its writes."""
    saver = CpstoreSaver(store)
    want: dict[tuple[str, str], list[Any]] = {}
    for thread in ("t1", "t2", "t10"):
        for ns in ("", "a", "a:b"):
            config = _conf(thread, ns)
            for step in range(3):
                cp = empty_checkpoint()
                cp["channel_values"] = {"x": step}
                cp["channel_versions"] = {"x": step + 1}
                config = saver.put(config, cp, {"step": step}, {"x": step + 1})
                writes: list[Any] = []
                if thread != "t1" and (ns == "a") == (thread == "t10") and step != 1:
                    saver.put_writes(config, [("x", [thread, ns, step])], f"task{step}")
                    writes = [(f"task{step}", "x", [thread, ns, step])]
                want[(thread, config["configurable"]["checkpoint_id"])] = writes
    everything = list(saver.list(None))
    assert len(everything) == len(want)
    for tup in everything:
        conf = tup.config["configurable"]
        assert tup.pending_writes == want[(conf["thread_id"], conf["checkpoint_id"])]
    for thread in ("t1", "t2", "t10"):
        for tup in saver.list(_conf(thread, None), limit=4):
            conf = tup.config["configurable"]
            assert tup.pending_writes == want[(thread, conf["checkpoint_id"])]


_WRITES = 40


def _writer(url: str, configs: list[dict[str, Any]], started: Any) -> None:
    """Put one write at a time, cycling over the checkpoints, each its own commit."""
    store = cpstore_store.open(url)
    assert isinstance(store, Store)
    saver = CpstoreSaver(store)
    started.set()
    for i in range(_WRITES):
        saver.put_writes(configs[i % len(configs)], [("x", i)], f"task{i:03d}")
    store.close()


def test_writes_put_by_another_process_during_lists_are_seen_as_a_prefix(
    store: Store, url: str
) -> None:
    """One list is one snapshot: the writes its tuples carry are exactly the first k
    writes the other process committed (never a later one without an earlier one), on
    both backends, while a writer process commits one write at a time."""
    saver = CpstoreSaver(store)
    configs = []
    config = _conf("t", "a")
    for step in range(6):
        cp = empty_checkpoint()
        cp["channel_values"] = {"x": step}
        cp["channel_versions"] = {"x": step + 1}
        config = saver.put(config, cp, {"step": step}, {"x": step + 1})
        configs.append(config)
    other = CpstoreSaver(store)
    for ns in ("a:b", "b"):  # namespaces of the same thread read in the same list
        cp = empty_checkpoint()
        other.put(_conf("t", ns), cp, {"step": 0}, {})
    ctx = multiprocessing.get_context("spawn")
    started = ctx.Event()
    proc = ctx.Process(target=_writer, args=(url, configs, started))
    proc.start()
    try:
        assert started.wait(60)
        seen_counts = []
        while True:
            alive = proc.is_alive()
            listed = list(saver.list(_conf("t", None)))
            got = sorted(v for t in listed for _, _, v in t.pending_writes)
            assert got == list(range(len(got))), got
            for tup in listed:
                conf = tup.config["configurable"]
                if conf["checkpoint_ns"] != "a":
                    assert tup.pending_writes == []
                    continue
                at = [c["configurable"]["checkpoint_id"] for c in configs].index(
                    conf["checkpoint_id"]
                )
                assert all(v % len(configs) == at for _, _, v in tup.pending_writes)
            seen_counts.append(len(got))
            if not alive:
                break
    finally:
        proc.join(60)
    assert proc.exitcode == 0
    assert seen_counts[-1] == _WRITES


# -- a real graph: what get_state and get_state_history hand out is the caller's ----------


class _State(TypedDict):
    items: Annotated[list[str], operator.add]
    doc: dict[str, Any]


def _graph(checkpointer: Any) -> Any:
    """Node a sets items and doc, node b items only: doc is unchanged between checkpoints."""

    def step(state: _State) -> dict[str, Any]:
        n = len(state["items"])
        return {"items": [f"i{n}"], "doc": {"n": n, "seen": list(state["items"])}}

    def items_only(state: _State) -> dict[str, Any]:
        return {"items": [f"b{len(state['items'])}"]}

    g = StateGraph(_State)
    g.add_node("a", step)
    g.add_node("b", items_only)
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("b", END)
    return g.compile(checkpointer=checkpointer)


def _snapshot_view(snapshot: Any) -> Any:
    return (snapshot.values, snapshot.next, snapshot.config, snapshot.metadata)


def test_changing_state_snapshots_never_changes_the_next_history(store: Store) -> None:
    """get_state, get_state_history and their async twins on both backends: every value,
    config and metadata a caller changes stays the caller's."""
    saver = CpstoreSaver(store, serde=JsonPlusSerializer())
    graph = _graph(saver)
    config: dict[str, Any] = {"configurable": {"thread_id": "g"}}
    for _ in range(3):
        graph.invoke({"items": ["start"], "doc": {}}, config)
    pristine = copy.deepcopy([_snapshot_view(s) for s in graph.get_state_history(config)])
    memory = _graph(InMemorySaver())
    for _ in range(3):
        memory.invoke({"items": ["start"], "doc": {}}, config)
    assert [v[0] for v in pristine] == [s.values for s in memory.get_state_history(config)]

    def history() -> list[Any]:
        return [_snapshot_view(s) for s in graph.get_state_history(config)]

    async def ahistory() -> list[Any]:
        return [_snapshot_view(s) async for s in graph.aget_state_history(config)]

    reads: list[Callable[[], list[Any]]] = [
        history,
        lambda: asyncio.run(ahistory()),
        lambda: [_snapshot_view(graph.get_state(config))],
        lambda: [_snapshot_view(asyncio.run(graph.aget_state(config)))],
    ]
    for read in reads:
        got = read()
        assert got == pristine[: len(got)]
        for i, (values, _, conf, meta) in enumerate(got):
            for value in values.values():
                _mutate_value(value)
                if type(value) is dict:
                    _mutate_value(value.get("seen"))
            values["new"] = 1
            conf["configurable"]["checkpoint_id"] = "changed"
            meta["step"] = -1
            meta.setdefault("writes", {})
            assert got[i + 1 :] == pristine[i + 1 : len(got)]  # shared with no other
        assert history() == pristine
