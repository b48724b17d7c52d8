"""cpstore on PostgreSQL against LangGraph's PostgresSaver, same server, same run (issue 17).

Both sides talk to one throwaway PostgreSQL cluster (tests/pg_cluster.py:
initdb + pg_ctl, Unix socket, the server's default ``synchronous_commit=on``
and ``fsync=on``: every commit is durable on both sides). Each repeat uses
fresh tables (a new schema per side), so no side reads the other's cache.

Workloads (generated once, not timed):

- ``10x1KB``: bench_store's issue-12 workload, 10 channels of 1 KB random
  text, one channel changing per step;
- ``chat``: one ``messages`` channel, a list that grows by one ~300-byte
  message per step (a conversation), which LangGraph stores whole at every
  version.

Figures (interleaved repeats, order rotated, paired ratios = peer time / our
time, higher = cpstore faster; medians with min-max):

- put: every step's checkpoint (cpstore ``recorder.checkpoint``, durable
  commit each; PostgresSaver ``put`` with the ``new_versions`` LangGraph
  passes, on an autocommit connection as its docs set it up);
- get: the state of a checkpoint by id (``read(id).state()``, every object
  hash-checked, vs ``get_tuple``);
- list: the newest ``HISTORY`` checkpoints with their states
  (``history_states`` vs ``list(limit=...)``, which loads channel values);
- table bytes: ``pg_total_relation_size`` over each side's tables after the
  chat workload (target <= 0.2x of PostgresSaver's);
- push: an embedded store's run pushed to PostgreSQL (objects/s, MB/s), against
  a raw limit: the same objects inserted with bare ``INSERT ... unnest`` in the
  same batch size and nothing else (no reads, no hashing, no checkpoints).

Run: ``./dev bench -k bench_pg`` (needs the ``bench`` extra for PostgresSaver).
"""

from __future__ import annotations

import os
import random
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from bench_store import Comparison, interleave, make_workload
from pytest_benchmark.fixture import BenchmarkFixture

import cpstore
from cpstore.store.content import objects_of
from cpstore.store.pg_open import parse_url
from cpstore.store.transfer import BATCH_OBJECTS, transfer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from pg_cluster import Cluster, cluster

try:
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    HAVE_PEER = True
except ImportError:  # the optional bench extra
    HAVE_PEER = False

THREAD = "thread-1"
HISTORY = 50
GETS = 50


@dataclass(frozen=True)
class Work:
    """Every step's state and the channels that changed in it."""

    name: str
    states: list[dict[str, Any]]
    changed: list[tuple[str, ...]]


def chat_workload(steps: int, seed: int = 17) -> Work:
    """A conversation: ``messages`` grows by one ~300-byte message per step."""
    rng = random.Random(seed)
    words = ["agent", "tool", "result", "search", "the", "a", "plan", "answer", "user", "ok"]
    messages: list[dict[str, str]] = []
    states: list[dict[str, Any]] = []
    changed: list[tuple[str, ...]] = []
    for step in range(steps):
        role = "user" if step % 2 == 0 else "assistant"
        text = " ".join(rng.choice(words) for _ in range(55))[:300]
        messages.append({"role": role, "content": text, "id": f"m{step}"})
        states.append({"messages": list(messages)})
        changed.append(("messages",))
    return Work("chat", states, changed)


def tenk_workload(steps: int) -> Work:
    """bench_store's 10 x 1 KB workload."""
    wl = make_workload(steps)
    changed: list[tuple[str, ...]] = [tuple(c) for c in wl.changed]
    return Work("10x1KB", [dict(s) for s in wl.states], changed)


def _steps() -> int:
    size = os.environ.get("CPSTORE_BENCH_SIZE", "quick")
    return int(os.environ.get("CPSTORE_BENCH_STEPS", "200" if size == "quick" else "1000"))


def _repeats() -> int:
    return max(5, int(os.environ.get("CPSTORE_BENCH_REPEATS", "5")))


@pytest.fixture(scope="module")
def server() -> Cluster:
    """The throwaway cluster both sides use."""
    return cluster()


_schemas = iter(range(10**9))


def _fresh(server: Cluster, side: str) -> str:
    return str(server.url(f"b_{side}_{os.getpid()}_{next(_schemas)}"))


def _relation_bytes(conninfo: str, schema: str) -> int:
    with psycopg.connect(conninfo, autocommit=True) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind = 'r'",
            (schema,),
        ).fetchone()
    return int(row[0]) if row else 0


class Ours:
    """cpstore on PostgreSQL through its public API (durable commits)."""

    def __init__(self, server: Cluster) -> None:
        self.url = _fresh(server, "cp")
        self.store = cpstore.open(self.url)

    def record(self, work: Work) -> list[str]:
        rec = self.store.recorder(THREAD)
        return [rec.checkpoint(i, s) for i, s in enumerate(work.states)]

    def table_bytes(self) -> int:
        return int(self.store.disk_bytes())

    def close(self) -> None:
        self.store.close()


class Peer:
    """PostgresSaver as its docs set it up: autocommit, dict rows, ``setup()``."""

    def __init__(self, server: Cluster) -> None:
        url = _fresh(server, "lg")
        parsed = parse_url(url)
        self.schema = parsed.schema
        self.conninfo = parsed.conninfo
        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{self.schema}"')
        self.conn: Any = psycopg.connect(
            self.conninfo,
            autocommit=True,
            prepare_threshold=0,
            row_factory=dict_row,
            options=f"-c search_path={self.schema}",
        )
        self.saver = PostgresSaver(self.conn)
        self.saver.setup()

    def record(self, work: Work) -> list[str]:
        saver = self.saver
        config: dict[str, Any] = {"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}}
        versions: dict[str, Any] = {}
        ids = []
        for step, (state, changed) in enumerate(zip(work.states, work.changed, strict=True)):
            new = {k: saver.get_next_version(versions.get(k), None) for k in changed}
            versions.update(new)
            cp = empty_checkpoint()
            cp["channel_values"] = dict(state)
            cp["channel_versions"] = dict(versions)
            config = saver.put(config, cp, {"source": "loop", "step": step, "parents": {}}, new)
            ids.append(config["configurable"]["checkpoint_id"])
        return ids

    def config(self, cid: str) -> dict[str, Any]:
        return {"configurable": {"thread_id": THREAD, "checkpoint_ns": "", "checkpoint_id": cid}}

    def table_bytes(self) -> int:
        return _relation_bytes(self.conninfo, self.schema)

    def close(self) -> None:
        self.conn.close()


@dataclass
class Recorded:
    ours: Ours
    our_ids: list[str]
    peer: Peer
    peer_ids: list[str]


WORKS = ("10x1KB", "chat")


def _work(name: str) -> Work:
    return tenk_workload(_steps()) if name == "10x1KB" else chat_workload(_steps())


@pytest.fixture(scope="module", params=WORKS)
def recorded(request: pytest.FixtureRequest, server: Cluster) -> Iterator[tuple[Work, Recorded]]:
    """Both sides with the same workload recorded (for the read figures)."""
    if not HAVE_PEER:
        pytest.skip("langgraph-checkpoint-postgres is not installed (./dev bench installs it)")
    work = _work(str(request.param))
    ours, peer = Ours(server), Peer(server)
    rec = Recorded(ours, ours.record(work), peer, peer.record(work))
    try:
        yield work, rec
    finally:
        ours.close()
        peer.close()


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


@pytest.mark.parametrize("work_name", WORKS)
def test_pg_put(benchmark: BenchmarkFixture, server: Cluster, work_name: str) -> None:
    """Per-put time over the workload, fresh tables each repeat (opening not timed)."""
    if not HAVE_PEER:
        pytest.skip("langgraph-checkpoint-postgres is not installed")
    work = _work(work_name)

    def side(make: Callable[[Cluster], Ours | Peer]) -> Callable[[], float]:
        def run() -> float:
            s = make(server)
            try:
                return _timed(lambda: s.record(work))
            finally:
                s.close()

        return run

    interleave(
        benchmark,
        f"put ({work.name}, durable commits)",
        {"cpstore on PostgreSQL": side(Ours), "PostgresSaver": side(Peer)},
        _repeats(),
        [Comparison("cpstore on PostgreSQL", "PostgresSaver", 1.0, True)],
        items=len(work.states),
    )


def _picks(ids: list[str]) -> list[str]:
    return ids[:: max(1, len(ids) // GETS)][:GETS]


def test_pg_get_by_id(benchmark: BenchmarkFixture, recorded: tuple[Work, Recorded]) -> None:
    """State of a checkpoint by id: ``read(id).state()`` (hash-checked) vs ``get_tuple``."""
    work, rec = recorded
    ours, theirs = _picks(rec.our_ids), _picks(rec.peer_ids)
    store, saver = rec.ours.store, rec.peer.saver
    want = len(work.states[0])

    def cp() -> None:
        for cid in ours:
            with store.read(cid) as view:
                assert len(view.state()) == want

    def peer() -> None:
        for cid in theirs:
            got = saver.get_tuple(rec.peer.config(cid))
            assert len(got.checkpoint["channel_values"]) == want

    interleave(
        benchmark,
        f"get by id ({work.name})",
        {"cpstore on PostgreSQL": lambda: _timed(cp), "PostgresSaver": lambda: _timed(peer)},
        _repeats(),
        [Comparison("cpstore on PostgreSQL", "PostgresSaver", 1.0)],
        items=len(ours),
    )


def test_pg_list(benchmark: BenchmarkFixture, recorded: tuple[Work, Recorded]) -> None:
    """The newest HISTORY checkpoints with states: ``history_states`` vs ``list(limit)``."""
    work, rec = recorded
    store, saver = rec.ours.store, rec.peer.saver
    config = {"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}}

    def cp() -> None:
        assert len(store.history_states(THREAD, limit=HISTORY)) == HISTORY

    def peer() -> None:
        got = list(saver.list(config, limit=HISTORY))
        assert len(got) == HISTORY and got[0].checkpoint["channel_values"]

    interleave(
        benchmark,
        f"list {HISTORY} with states ({work.name})",
        {"cpstore on PostgreSQL": lambda: _timed(cp), "PostgresSaver": lambda: _timed(peer)},
        _repeats(),
        [Comparison("cpstore on PostgreSQL", "PostgresSaver", 1.0)],
        items=HISTORY,
    )


def test_pg_table_bytes(benchmark: BenchmarkFixture, recorded: tuple[Work, Recorded]) -> None:
    """pg_total_relation_size of each side's tables after the same workload (not timed)."""
    work, rec = recorded
    ours, theirs = rec.ours.table_bytes(), rec.peer.table_bytes()
    ratio = ours / theirs
    benchmark.extra_info.update(
        workload=work.name,
        cpstore_bytes=ours,
        postgressaver_bytes=theirs,
        ratio=round(ratio, 3),
        target=0.2 if work.name == "chat" else None,
    )
    print(f"\ntable bytes ({work.name}): cpstore {ours:,} / PostgresSaver {theirs:,} = {ratio:.3f}")
    benchmark.pedantic(rec.ours.table_bytes, rounds=1, iterations=1)


def test_pg_push_throughput(
    benchmark: BenchmarkFixture, server: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """An embedded run pushed to a fresh PostgreSQL store, vs bare batched INSERTs."""
    work = tenk_workload(_steps() * 5)
    local = tmp_path_factory.mktemp("push") / "s"
    with cpstore.open(local) as src:
        rec = src.recorder(THREAD)
        for i, s in enumerate(work.states):
            rec.checkpoint(i, s)
        with src.backend.read_txn() as txn:  # wherever the layout keeps them (content.py)
            items = objects_of(src.backend.dbs).items(txn)
            objects = [(k, bytes(v)) for k, v in items if v is not None]
    total = sum(len(v) for _, v in objects)
    counts: dict[str, int] = {}

    def push() -> float:
        with cpstore.open(local, readonly=True) as src, cpstore.open(_fresh(server, "push")) as dst:
            t0 = time.perf_counter()
            report = transfer(src.backend, dst.backend)
            took = time.perf_counter() - t0
            counts["objects"] = report.objects
            return took

    def raw() -> float:
        url = parse_url(_fresh(server, "raw"))
        with psycopg.connect(url.conninfo, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{url.schema}"')
            conn.execute(f'CREATE TABLE "{url.schema}".o (k bytea PRIMARY KEY, v bytea NOT NULL)')
            t0 = time.perf_counter()
            for i in range(0, len(objects), BATCH_OBJECTS):
                part = objects[i : i + BATCH_OBJECTS]
                with conn.transaction():
                    conn.execute(
                        f'INSERT INTO "{url.schema}".o '
                        "SELECT * FROM unnest(%b::bytea[], %b::bytea[])",
                        ([k for k, _ in part], [v for _, v in part]),
                    )
            return time.perf_counter() - t0

    fig = interleave(
        benchmark,
        f"push embedded -> PostgreSQL ({len(objects)} objects, {total / 1e6:.1f} MB)",
        {"cpstore push": push, "raw INSERT limit": raw},
        _repeats(),
        [
            Comparison(
                "cpstore push",
                "raw INSERT limit",
                None,
                True,
                "raw: objects only, no reads, no hashing, no checkpoints or refs",
            )
        ],
        items=len(objects),
    )
    per_object = sorted(fig.runs["cpstore push"])[len(fig.runs["cpstore push"]) // 2]
    seconds = per_object * len(objects)
    benchmark.extra_info.update(
        push_objects=len(objects),
        push_bytes=total,
        push_objects_per_s=round(len(objects) / seconds),
        push_mb_per_s=round(total / 1e6 / seconds, 2),
    )
    print(
        f"\npush: {len(objects)} objects, {total / 1e6:.1f} MB in {seconds:.2f} s = "
        f"{len(objects) / seconds:,.0f} objects/s, {total / 1e6 / seconds:.1f} MB/s"
    )
    assert counts["objects"] == len(objects)
