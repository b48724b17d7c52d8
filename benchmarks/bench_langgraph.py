"""CpstoreSaver against LangGraph's own savers, side by side in one run (issue 15).

Every contender is a LangGraph ``BaseCheckpointSaver`` driven exactly as the
Pregel loop drives it (``put(config, checkpoint, metadata, new_versions)``,
``get_tuple``, ``list``), so both sides do the same work: serialize with the
same JsonPlusSerializer, store, read back and deserialize.

- ``cpstore durable``: ``CpstoreSaver`` on a store opened with ``durability="sync"``
  (fsync per put); ``cpstore none``: ``durability="none"`` (no fsync by cpstore).
- ``LMDBSaver`` (langgraph-checkpoint-lmdb) on an env with LMDB's defaults
  (durable) or ``sync=False``; ``SqliteSaver`` WAL with ``synchronous=FULL`` or
  ``OFF``; ``InMemorySaver``. Built by bench_store.py's helpers, same settings.

Workloads: *channels* (bench_store.py's: 10 channels x 1 KB random text, one
changing per step) and *chat* (a ``messages`` channel growing by one ~1 KB
message per step: HumanMessage/AIMessage alternating). Sizes:
``CPSTORE_BENCH_SIZE=quick`` (300 steps) or ``full`` (2,000 steps);
``CPSTORE_BENCH_STEPS``/``CPSTORE_BENCH_REPEATS`` override, ``CPSTORE_BENCH_CLOCK=cpu``
times the reads by CPU time instead of wall time (``READ_CLOCK``); the graph figure
runs ``GRAPH_STEPS`` supersteps per repeat.

Figures are interleaved repeats (bench_store.py's ``interleave``): each repeat
runs every contender once, order rotated; a ratio is peer time / cpstore time
paired within a repeat (> 1: cpstore faster), median (min-max). Disk is one
deterministic recording per saver: bytes in use after the chat workload,
divided by the unique message bytes.

Run: ``.venv/bin/python -m pytest benchmarks/bench_langgraph.py --benchmark-only``.
"""

from __future__ import annotations

import os
import random
import shutil
import string
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import bench_store
import lmdb
import pytest
from bench_store import (
    HAVE_PEERS,
    PARTS,
    Comparison,
    SaverSide,
    Workload,
    interleave,
    make_workload,
    memory_saver,
    sqlite_saver,
)
from pytest_benchmark.fixture import BenchmarkFixture

from cpstore.store.facade import open as open_store

try:
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.graph import END, START, StateGraph

    from cpstore.langgraph import CpstoreSaver

    HAVE_LANGGRAPH = HAVE_PEERS
except ImportError:  # optional benchmark extra
    HAVE_LANGGRAPH = False

pytestmark = pytest.mark.skipif(
    not HAVE_LANGGRAPH, reason="the bench extra (langgraph and its savers) is not installed"
)

THREAD = "thread-1"
GETS = 200
LIST = 100
MESSAGE = 1000
GRAPH_STEPS = 100
#: Steps of the chat put figure (every put serializes the whole history, on every saver).
CHAT_PUT_STEPS = 500
CHAT_MAP = 1 << 36


def lmdb_big(path: Path, *, sync: bool) -> SaverSide:
    """LMDBSaver as bench_store's ``lmdb_saver``, with a map large enough for the chat workload.

    LMDBSaver stores the whole history at every step: 2,000 chat steps need more
    than bench_store's 2 GiB map (the map is sparse: only pages in use take disk).
    """
    path.mkdir(parents=True, exist_ok=True)
    env = lmdb.open(str(path), max_dbs=4, map_size=CHAT_MAP, sync=sync)

    def disk() -> int:
        return int((env.info()["last_pgno"] + 1) * env.stat()["psize"])

    return SaverSide(bench_store.LMDBSaver(env), env.close, disk)


def cpstore_saver(path: Path, durability: str) -> SaverSide:
    """CpstoreSaver on a fresh store with ``durability``."""
    store = open_store(path, durability=durability)  # type: ignore[arg-type]
    return SaverSide(CpstoreSaver(store), store.close, store.disk_bytes)


SAVERS: dict[str, Callable[[Path], SaverSide]] = {
    "cpstore durable": lambda p: cpstore_saver(p / "s", "sync"),
    "cpstore none": lambda p: cpstore_saver(p / "s", "none"),
    "LMDBSaver durable": lambda p: lmdb_big(p, sync=True),
    "LMDBSaver sync=False": lambda p: lmdb_big(p, sync=False),
    "SqliteSaver FULL": lambda p: sqlite_saver(p, sync=True),
    "SqliteSaver OFF": lambda p: sqlite_saver(p, sync=False),
    "InMemorySaver": memory_saver,
}

PUT_COMPARISONS = [
    Comparison("cpstore durable", "LMDBSaver durable", 1.0, True),
    Comparison("cpstore durable", "SqliteSaver FULL", None, True),
    Comparison("cpstore none", "LMDBSaver sync=False", 1.0, True),
    Comparison("cpstore none", "SqliteSaver OFF", None, True),
    Comparison("cpstore none", "InMemorySaver", None, False),
]


@pytest.fixture(scope="module")
def steps(size: str) -> int:
    """Steps of each workload."""
    return int(os.environ.get("CPSTORE_BENCH_STEPS", "300" if size == "quick" else "2000"))


@pytest.fixture(scope="module")
def repeats(size: str) -> int:
    """Interleaved repeats per figure (at least 5)."""
    return max(5, int(os.environ.get("CPSTORE_BENCH_REPEATS", "5" if size == "quick" else "11")))


@pytest.fixture(scope="module")
def channels(steps: int) -> Workload:
    """The 10 x 1 KB workload, one channel changing per step."""
    return make_workload(steps)


@dataclass(frozen=True)
class Chat:
    """The chat workload: one message more per step."""

    messages: list[Any]

    def unique_bytes(self) -> int:
        """The message text a perfect store keeps once."""
        return sum(len(m.content) for m in self.messages)


@pytest.fixture(scope="module")
def chat(steps: int) -> Chat:
    """``steps`` alternating Human/AI messages of ~1 KB random text."""
    rng = random.Random(15)
    alphabet = string.ascii_letters + string.digits + " "
    kinds = (HumanMessage, AIMessage)
    return Chat(
        [
            kinds[i % 2](content="".join(rng.choices(alphabet, k=MESSAGE)), id=f"m{i}")
            for i in range(steps)
        ]
    )


def record_chat(saver: Any, chat: Chat) -> list[str]:
    """``put`` per step as the Pregel loop does: the messages channel at a new version."""
    config: dict[str, Any] = {"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}}
    version = None
    ids = []
    for step in range(len(chat.messages)):
        version = saver.get_next_version(version, None)
        cp = empty_checkpoint()
        cp["channel_values"] = {"messages": chat.messages[: step + 1]}
        cp["channel_versions"] = {"messages": version}
        meta = {"source": "loop", "step": step, "parents": {}}
        config = saver.put(config, cp, meta, {"messages": version})
        ids.append(config["configurable"]["checkpoint_id"])
    return ids


def _contender(
    tmp: pytest.TempPathFactory, opener: Callable[[Path], SaverSide], run: Callable[[Any], object]
) -> Callable[[], float]:
    def timed() -> float:
        path = tmp.mktemp("lg")
        side = opener(path)
        try:
            t0 = time.perf_counter()
            run(side.saver)
            return time.perf_counter() - t0
        finally:
            side.close()
            shutil.rmtree(path, ignore_errors=True)

    return timed


def test_put_channels(
    benchmark: BenchmarkFixture,
    tmp_path_factory: pytest.TempPathFactory,
    channels: Workload,
    repeats: int,
) -> None:
    """``put`` per step, 10 channels x 1 KB, one changing per step."""
    interleave(
        benchmark,
        "put (10 channels x 1 KB)",
        {
            name: _contender(tmp_path_factory, opener, lambda s: _record(s, channels))
            for name, opener in SAVERS.items()
        },
        repeats,
        PUT_COMPARISONS,
        items=channels.steps,
    )


def _record(saver: Any, channels: Workload) -> list[str]:
    return SaverSide(saver, lambda: None, lambda: 0).record(channels)


def test_put_chat(
    benchmark: BenchmarkFixture,
    tmp_path_factory: pytest.TempPathFactory,
    chat: Chat,
    repeats: int,
) -> None:
    """``put`` per step of the chat workload's first ``CHAT_PUT_STEPS`` steps."""
    head = Chat(chat.messages[:CHAT_PUT_STEPS])
    interleave(
        benchmark,
        f"put (chat, growing messages, {len(head.messages)} steps)",
        {
            name: _contender(tmp_path_factory, opener, lambda s: record_chat(s, head))
            for name, opener in SAVERS.items()
        },
        repeats,
        PUT_COMPARISONS,
        items=len(head.messages),
    )


def test_chat_disk(
    benchmark: BenchmarkFixture, tmp_path_factory: pytest.TempPathFactory, chat: Chat
) -> None:
    """Disk after the chat workload, per saver, divided by the unique message bytes.

    The no-fsync variants: fsync changes when bytes reach the disk, not how many.
    """
    unique = chat.unique_bytes()
    disk: dict[str, int] = {}

    def measure() -> None:
        for name in ("cpstore none", "LMDBSaver sync=False", "SqliteSaver OFF"):
            path = tmp_path_factory.mktemp("disk")
            side = SAVERS[name](path)
            try:
                record_chat(side.saver, chat)
                disk[name] = side.disk()
            finally:
                side.close()
                shutil.rmtree(path, ignore_errors=True)

    benchmark.pedantic(measure, rounds=1, iterations=1, warmup_rounds=0)
    ours = disk["cpstore none"]
    benchmark.extra_info["disk"] = {
        "unique_bytes": unique,
        "bytes": disk,
        "per_unique": {n: b / unique for n, b in disk.items()},
        "cpstore_vs": {n: ours / b for n, b in disk.items() if n != "cpstore none"},
        "target": "cpstore <= 0.1 x SqliteSaver",
    }
    print(f"\nchat disk ({len(chat.messages)} steps, {unique:,} unique bytes):")
    for name, size in disk.items():
        print(
            f"  {name:20} {size:>14,} B {size / unique:8.2f}x unique, cpstore/it {ours / size:.3f}"
        )


@dataclass
class Stored:
    """The channels workload recorded once by each durable saver, for the reads."""

    sides: dict[str, SaverSide]
    ids: dict[str, list[str]]


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory, channels: Workload) -> Iterator[Stored]:
    """cpstore (sync), LMDBSaver (durable), SqliteSaver (FULL), InMemorySaver."""
    names = ("cpstore durable", "LMDBSaver durable", "SqliteSaver FULL", "InMemorySaver")
    sides = {n: SAVERS[n](tmp_path_factory.mktemp("rd")) for n in names}
    out = Stored(sides, {n: s.record(channels) for n, s in sides.items()})
    try:
        yield out
    finally:
        for side in sides.values():
            side.close()


READ_COMPARISONS = [
    Comparison("cpstore durable", "LMDBSaver durable", 1.0),
    Comparison("cpstore durable", "SqliteSaver FULL", None),
    Comparison("cpstore durable", "InMemorySaver", None),
]


#: The reads' clock: wall time, or with ``CPSTORE_BENCH_CLOCK=cpu`` this process's CPU
#: time (reads do no I/O wait: on a shared machine CPU time leaves out the time another
#: process held the core). Puts are always timed by the wall clock (fsync is waiting).
READ_CLOCK = (
    time.process_time if os.environ.get("CPSTORE_BENCH_CLOCK") == "cpu" else time.perf_counter
)


def _timer(
    fn: Callable[[], object], clock: Callable[[], float] = time.perf_counter
) -> Callable[[], float]:
    def run() -> float:
        t0 = clock()
        fn()
        return clock() - t0

    return run


def _config(checkpoint_id: str | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {"thread_id": THREAD, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def test_get_tuple(benchmark: BenchmarkFixture, stored: Stored, repeats: int) -> None:
    """``get_tuple`` by id, whole checkpoint deserialized (cpstore: every object hash-checked)."""

    def reader(name: str) -> Callable[[], None]:
        saver = stored.sides[name].saver
        ids = stored.ids[name]
        cfgs = [_config(c) for c in ids[:: max(1, len(ids) // GETS)][:GETS]]

        def run() -> None:
            for cfg in cfgs:
                if len(saver.get_tuple(cfg).checkpoint["channel_values"]) != PARTS:
                    raise AssertionError(name)

        return run

    runs = {n: reader(n) for n in stored.sides}
    for fn in runs.values():
        fn()
    interleave(
        benchmark,
        "get_tuple by id",
        {n: _timer(fn, READ_CLOCK) for n, fn in runs.items()},
        repeats,
        READ_COMPARISONS,
        items=min(GETS, len(next(iter(stored.ids.values())))),
    )


def test_list_100(benchmark: BenchmarkFixture, stored: Stored, repeats: int) -> None:
    """``list(config with checkpoint_ns, limit=100)``, every checkpoint deserialized."""

    def lister(name: str) -> Callable[[], None]:
        saver = stored.sides[name].saver

        def run() -> None:
            got = list(saver.list(_config(), limit=LIST))
            if len(got) != min(LIST, len(stored.ids[name])):
                raise AssertionError(name)

        return run

    runs = {n: lister(n) for n in stored.sides}
    for fn in runs.values():
        fn()
    interleave(
        benchmark,
        "list(limit=100)",
        {n: _timer(fn, READ_CLOCK) for n, fn in runs.items()},
        repeats,
        READ_COMPARISONS,
    )


class Ten(TypedDict):
    step: int
    c0: str
    c1: str
    c2: str
    c3: str
    c4: str
    c5: str
    c6: str
    c7: str
    c8: str
    c9: str


def _graph(checkpointer: Any) -> Any:
    rng = random.Random(7)
    texts = ["".join(rng.choices(string.ascii_letters, k=1000)) for _ in range(GRAPH_STEPS + 1)]

    def step(state: Ten) -> dict[str, Any]:
        i = state["step"]
        return {"step": i + 1, f"c{i % 10}": texts[i]}

    g = StateGraph(Ten)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: END if s["step"] >= GRAPH_STEPS else "step")
    return g.compile(checkpointer=checkpointer)


def test_graph_step(
    benchmark: BenchmarkFixture, tmp_path_factory: pytest.TempPathFactory, repeats: int
) -> None:
    """A real StateGraph of 10 x 1 KB channels, one changing per superstep: time per step."""
    start = {"step": 0, **{f"c{i}": "x" * 1000 for i in range(10)}}
    config = {"configurable": {"thread_id": THREAD}, "recursion_limit": GRAPH_STEPS + 10}

    def run_graph(saver: Any) -> None:
        graph = _graph(saver)
        out = (
            graph.invoke(start, config)
            if saver is None
            else graph.invoke(start, config, durability="sync")
        )
        if out["step"] != GRAPH_STEPS:
            raise AssertionError(out["step"])

    contenders = {
        name: _contender(tmp_path_factory, opener, run_graph) for name, opener in SAVERS.items()
    }
    contenders["no checkpointer"] = _timer(lambda: run_graph(None))
    interleave(
        benchmark,
        "graph superstep (durability=sync)",
        contenders,
        repeats,
        [*PUT_COMPARISONS, Comparison("cpstore none", "no checkpointer", None, False)],
        items=GRAPH_STEPS,
    )
