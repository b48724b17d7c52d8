"""audit24: the lgread read paths on odd heads, concurrent writes and a real graph.

Heads that pass every hash check but are malformed (either layout) decode, or
raise, as ``serde.loads_typed`` of them (the decode before lgread) does, with
lgtrust's rule on the oracle side (a serde's own exception, or a head half that is
not a map, is IntegrityError: ``lg_audit24._loads``); the
per-namespace "any pending write?" answer belongs to one read snapshot (threads
with one namespace name, writes another process commits during lists, both
backends); what a real graph's ``get_state``/``get_state_history`` (sync and
async) hand out is the caller's.
"""

from __future__ import annotations

import asyncio
import copy
import multiprocessing
import operator
import uuid
from collections.abc import Callable, Iterator
from typing import Annotated, Any, TypedDict

import ormsgpack
import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, StateGraph
from lg_audit24 import (
    _conf,
    _mutate_value,
    _oracle_of,
    _outcome,
)
from pg_cluster import (  # noqa: F401 - fixtures
    backend_url,
    pg_cluster,
    pg_url,
)

import cpstore.store as cpstore_store
from cpstore.langgraph import CpstoreSaver
from cpstore.langgraph._codec import (
    CHANNEL,
    HEAD_KEY,
    branch_label,
    pack_head,
    pack_typed,
    run_for,
)
from cpstore.langgraph._read import Entry
from cpstore.store import Store
from cpstore.store.lg_index import checkpoint_key, pack

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


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    opened = cpstore_store.open(url)
    assert isinstance(opened, Store)
    yield opened
    opened.close()


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
