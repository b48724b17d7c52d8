"""Group commit: aggregate durable puts/s of 4 writers on one store (issue 12).

Target: 4 writer threads, and 4 writer processes, on one cpstore store
(``durability="sync"``) reach >= 3x the aggregate durable puts/s of 4
``SqliteSaver`` writers (WAL, ``synchronous=FULL``, each writer its own
connection to one database file, as 4 LangGraph workers would have).
``LMDBSaver`` on a durable env (one env per process, a saver per thread) and
bare LMDB (one sync commit per put: :class:`RawWriter`) run beside them; bare
LMDB is the raw limit of one-writer-at-a-time LMDB across processes;
:class:`CoalescedRawWriter` is the raw limit of sharing fsyncs (not txns)
between them without weakening durability. For
threads, :func:`run_raw_grouped` is the raw limit of grouping: all 4 writers'
step in one fsync'd txn, with nothing else to do.

Each writer records its own LangGraph thread (cpstore: its own run) of the
issue-12 workload (10 channels x 1 KB, one changes per step), ``WRITES`` puts.
A figure is the wall time from the moment all 4 writers start (a barrier,
after every store is open) until the last finishes, divided by all puts: the
per-put time of the aggregate, so ``peer / cpstore`` is cpstore's aggregate
puts/s over the peer's. Repeats are interleaved as in bench_store.py.

``CPSTORE_BENCH_SIZE=quick`` 60 puts per writer, ``full`` 250
(``CPSTORE_GC_WRITES`` overrides). Run: ``.venv/bin/python -m pytest
benchmarks/bench_group_commit.py --benchmark-only``.
"""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lmdb
import msgpack
import pytest
import xxhash
from bench_store import (
    HAVE_PEERS,
    MAP_SIZE,
    Comparison,
    Workload,
    interleave,
    make_workload,
    needs_peers,
)
from pytest_benchmark.fixture import BenchmarkFixture

from cpstore.store.facade import open as open_store

pytestmark = needs_peers

WRITERS = 4

if HAVE_PEERS:
    import sqlite3

    from bench_store import LMDBSaver
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.sqlite import SqliteSaver


# -- one writer of each kind: open (untimed), then ``run`` its puts -----------------


class CpstoreWriter:
    """A recorder on a shared (threads) or own (processes) sync store."""

    def __init__(self, store: Any, name: str) -> None:
        self.rec = store.recorder(name)

    def run(self, wl: Workload) -> None:
        """One durable checkpoint per step."""
        for step, state in enumerate(wl.states):
            self.rec.checkpoint(step, state)


class SaverWriter:
    """A LangGraph saver ``put`` per step, with the versions LangGraph passes."""

    def __init__(self, saver: Any, name: str) -> None:
        self.saver = saver
        self.name = name

    def run(self, wl: Workload) -> None:
        """``put(config, checkpoint, metadata, new_versions)`` per step."""
        saver = self.saver
        config: dict[str, Any] = {"configurable": {"thread_id": self.name, "checkpoint_ns": ""}}
        versions: dict[str, Any] = {}
        for step, (state, changed) in enumerate(zip(wl.states, wl.changed, strict=True)):
            new = {k: saver.get_next_version(versions.get(k), None) for k in changed}
            versions.update(new)
            cp = empty_checkpoint()
            cp["channel_values"] = dict(state)
            cp["channel_versions"] = dict(versions)
            config = saver.put(config, cp, {"source": "loop", "step": step, "parents": {}}, new)


class RawWriter:
    """Bare LMDB, one sync + metasync commit per put (parts, then a manifest).

    py-lmdb allows one write txn per env at a time, so threads of one process
    take a lock around their txn (what any program sharing an env must do).
    """

    def __init__(self, shared: tuple[Any, threading.Lock], name: str) -> None:
        self.env, self.lock = shared
        self.name = name.encode()

    def run(self, wl: Workload) -> None:
        """One write txn per step."""
        for step, state in enumerate(wl.states):
            with self.lock, self.env.begin(write=True) as txn:
                put_step(txn, self.name, step, state)


def put_step(txn: Any, writer: bytes, step: int, state: dict[str, Any]) -> None:
    """One writer's step in bare LMDB: its parts (write-once), then its manifest, in ``txn``."""
    h, pack = xxhash.xxh3_128_digest, msgpack.packb
    parts = {}
    for name, value in state.items():
        enc = pack(value)
        parts[name] = key = h(enc)
        txn.put(key, enc, overwrite=False)
    manifest = pack({"thread": writer, "parts": parts, "step": step})
    txn.put(h(manifest), manifest)


class CoalescedRawWriter(RawWriter):
    """Bare LMDB with ``MDB_NOMETASYNC``, acknowledged after one shared fdatasync.

    The safe engine limit of sharing fsyncs across processes without sharing
    txns: each commit fsyncs its data pages under LMDB's writer lock and writes
    its meta page unsynced (LMDB keeps the file intact after a power loss:
    "preserves the ACI properties"); a put is acknowledged only after an
    ``env.sync`` that began after its meta page was written. Writers take turns
    on a flock'd file holding the highest txn id a finished sync covered, and
    sync only when it is below their own, so one fdatasync acknowledges every
    commit whose meta page it covers, whichever process made it.
    """

    def __init__(self, shared: tuple[Any, threading.Lock], name: str) -> None:
        super().__init__(shared, name)
        self.synced = os.open(os.path.join(self.env.path(), "synced"), os.O_RDWR | os.O_CREAT)

    def run(self, wl: Workload) -> None:
        """One write txn per step, then a shared sync unless one already covers it."""
        env, fd = self.env, self.synced
        try:
            for step, state in enumerate(wl.states):
                with self.lock:
                    txn = env.begin(write=True)
                    try:
                        put_step(txn, self.name, step, state)
                        mine = txn.id()
                        txn.commit()
                    except BaseException:
                        txn.abort()
                        raise
                fcntl.flock(fd, fcntl.LOCK_EX)
                try:
                    if int.from_bytes(os.pread(fd, 8, 0), "big") < mine:
                        upto = env.info()["last_txnid"]
                        env.sync(True)
                        os.pwrite(fd, upto.to_bytes(8, "big"), 0)
                finally:
                    fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def _sqlite(path: Path) -> Any:
    conn = sqlite3.connect(str(path / "cp.sqlite"), check_same_thread=False, timeout=60)
    saver = SqliteSaver(conn)
    saver.setup()
    conn.execute("PRAGMA synchronous=FULL")
    return saver


#: kind -> (open what one process shares, make one writer on it).
KINDS: dict[str, tuple[Callable[[Path], Any], Callable[[Any, str], Any]]] = {
    "cpstore": (lambda p: open_store(p, durability="sync"), CpstoreWriter),
    "LMDBSaver durable": (
        lambda p: lmdb.open(str(p), max_dbs=4, map_size=MAP_SIZE, sync=True),
        lambda env, name: SaverWriter(LMDBSaver(env), name),
    ),
    # One connection per writer: a shared one would serialise them in Python.
    "SqliteSaver FULL": (lambda p: p, lambda p, name: SaverWriter(_sqlite(p), name)),
    "raw LMDB durable": (
        lambda p: (
            lmdb.open(str(p), map_size=MAP_SIZE, sync=True, metasync=True),
            threading.Lock(),
        ),
        RawWriter,
    ),
    "raw LMDB coalesced": (
        lambda p: (
            lmdb.open(str(p), map_size=MAP_SIZE, sync=True, metasync=False),
            threading.Lock(),
        ),
        CoalescedRawWriter,
    ),
}


def _close(shared: Any) -> None:
    if isinstance(shared, tuple):
        shared[0].close()
    elif hasattr(shared, "close"):
        shared.close()


def _prepare(path: Path) -> None:
    """Create the store/database once, so writers only open it (creation is not timed)."""
    path.mkdir(parents=True, exist_ok=True)


def run_threads(kind: str, path: Path, wls: list[Workload]) -> float:
    """Seconds for 4 threads of one process to put their workloads (from a common start)."""
    _prepare(path)
    opener, make = KINDS[kind]
    shared = opener(path)
    try:
        writers = [make(shared, f"writer{i}") for i in range(WRITERS)]
        start = threading.Barrier(WRITERS + 1)
        errors: list[BaseException] = []

        def go(w: Any, wl: Workload) -> None:
            start.wait()
            try:
                w.run(wl)
            except BaseException as exc:  # surfaced below: a failed writer fails the figure
                errors.append(exc)

        threads = [
            threading.Thread(target=go, args=(w, wl)) for w, wl in zip(writers, wls, strict=True)
        ]
        for t in threads:
            t.start()
        start.wait()
        t0 = time.perf_counter()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - t0
        if errors:
            raise errors[0]
        return elapsed
    finally:
        _close(shared)


def run_raw_grouped(path: Path, wls: list[Workload]) -> float:
    """The ideal group: every writer's step ``i`` in one sync commit, no threads, no checks.

    The raw limit of grouping on LMDB: what one fsync'd txn per round of 4
    puts costs when nothing else does (the encoding and hashing are the same
    as :class:`RawWriter`'s: :func:`put_step`).
    """
    path.mkdir(parents=True, exist_ok=True)
    env = lmdb.open(str(path), map_size=MAP_SIZE, sync=True, metasync=True)
    names = [f"writer{i}".encode() for i in range(len(wls))]
    try:
        t0 = time.perf_counter()
        for step in range(len(wls[0].states)):
            with env.begin(write=True) as txn:
                for name, wl in zip(names, wls, strict=True):
                    put_step(txn, name, step, wl.states[step])
        return time.perf_counter() - t0
    finally:
        env.close()


def _process_writer(job: tuple[str, str, int, int], start: Any, out: Any) -> None:
    kind, path, index, steps = job
    opener, make = KINDS[kind]
    shared = opener(Path(path))
    try:
        writer = make(shared, f"writer{index}")
        wl = make_workload(steps, seed=100 + index)
        start.wait()
        t0 = time.time()
        writer.run(wl)
        out.put((t0, time.time()))
    finally:
        _close(shared)


def run_processes(kind: str, path: Path, steps: int) -> float:
    """Seconds from the first of 4 processes starting its puts to the last finishing."""
    _prepare(path)
    if kind == "cpstore":
        open_store(path).close()  # created once, before the writers open it
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(WRITERS)
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_process_writer, args=((kind, str(path), i, steps), start, out))
        for i in range(WRITERS)
    ]
    for p in procs:
        p.start()
    spans: list[tuple[float, float]] = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise RuntimeError(f"{kind} writer process failed: exit {p.exitcode}")
    return max(e for _, e in spans) - min(s for s, _ in spans)


@pytest.fixture(scope="module")
def repeats(size: str) -> int:
    """Interleaved repeats per figure (at least 5), as bench_store.py."""
    return max(5, int(os.environ.get("CPSTORE_BENCH_REPEATS", "5" if size == "quick" else "7")))


@pytest.fixture(scope="module")
def writes(size: str) -> int:
    """Puts per writer."""
    return int(os.environ.get("CPSTORE_GC_WRITES", "60" if size == "quick" else "250"))


def _comparisons(suffix: str) -> list[Comparison]:
    ours = f"cpstore {suffix}"
    return [
        Comparison(ours, f"SqliteSaver FULL {suffix}", 3.0, True),
        Comparison(ours, f"LMDBSaver durable {suffix}", None, True),
        Comparison(ours, f"raw LMDB durable {suffix}", None, True, "raw limit"),
        Comparison(
            f"raw LMDB durable {suffix}",
            f"SqliteSaver FULL {suffix}",
            None,
            True,
            "raw limit vs peer",
        ),
        Comparison(
            f"raw LMDB coalesced {suffix}",
            f"SqliteSaver FULL {suffix}",
            None,
            True,
            "raw limit of shared fsyncs vs peer",
        ),
    ]


def test_group_commit_threads(
    benchmark: BenchmarkFixture,
    tmp_path_factory: pytest.TempPathFactory,
    writes: int,
    repeats: int,
) -> None:
    """4 writer threads in one process, per kind, interleaved."""
    # A workload of its own per writer: identical states would dedupe across writers.
    wls = [make_workload(writes, seed=100 + i) for i in range(WRITERS)]

    def contender(kind: str) -> Callable[[], float]:
        return lambda: run_threads(kind, tmp_path_factory.mktemp("gct"), wls)

    contenders = {f"{kind} 4 threads": contender(kind) for kind in KINDS}
    contenders["raw LMDB ideal group"] = lambda: run_raw_grouped(
        tmp_path_factory.mktemp("gcr"), wls
    )
    interleave(
        benchmark,
        f"group commit, {WRITERS} writer threads (aggregate)",
        contenders,
        repeats,
        [
            *_comparisons("4 threads"),
            Comparison("cpstore 4 threads", "raw LMDB ideal group", None, True, "raw limit"),
            Comparison(
                "raw LMDB ideal group",
                "SqliteSaver FULL 4 threads",
                None,
                True,
                "raw limit of grouping vs peer",
            ),
        ],
        items=WRITERS * writes,
    )


def test_group_commit_processes(
    benchmark: BenchmarkFixture,
    tmp_path_factory: pytest.TempPathFactory,
    writes: int,
    repeats: int,
) -> None:
    """4 writer processes, per kind, interleaved (process start-up is not timed)."""

    def contender(kind: str) -> Callable[[], float]:
        return lambda: run_processes(kind, tmp_path_factory.mktemp("gcp"), writes)

    interleave(
        benchmark,
        f"group commit, {WRITERS} writer processes (aggregate)",
        {f"{kind} 4 processes": contender(kind) for kind in KINDS},
        repeats,
        _comparisons("4 processes"),
        items=WRITERS * writes,
    )
