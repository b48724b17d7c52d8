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
step in one fsync'd txn, with nothing else to do; :func:`run_raw_pipelined` the
raw limit of pipelining groups (two groups of 2 writers alternating, each
committed with ``MDB_NOMETASYNC`` and acknowledged after an ``fdatasync`` begun
after its commit returned, so one group's txn runs while the other's syncs),
with and without a stand-in for cpstore's CPU per put (:data:`CPU_STAND_IN`);
``raw_group_threads.run_raw_grouped_threads`` the raw limit of grouping with 4 real
writer threads (each builds its step, a ``threading.Barrier`` whose action commits
all 4 in one txn that also reads every part back and compare-and-sets a head: the
GIL hand-offs and the least checking a verified commit does), bare and with
:data:`CPU_STAND_IN`.

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
import functools
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
from raw_group_threads import contenders as threaded_raw

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


def timed_threads(targets: list[Callable[[], None]]) -> float:
    """Seconds for ``targets``, one thread each, to run from a common start; the first
    failure is raised (a failed writer fails the figure)."""
    start = threading.Barrier(len(targets) + 1)
    errors: list[BaseException] = []

    def go(target: Callable[[], None]) -> None:
        start.wait()
        try:
            target()
        except BaseException as exc:  # surfaced below: a failed writer fails the figure
            errors.append(exc)

    threads = [threading.Thread(target=go, args=(target,)) for target in targets]
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


def run_threads(kind: str, path: Path, wls: list[Workload]) -> float:
    """Seconds for 4 threads of one process to put their workloads (from a common start)."""
    _prepare(path)
    opener, make = KINDS[kind]
    shared = opener(path)
    try:
        writers = [make(shared, f"writer{i}") for i in range(WRITERS)]
        return timed_threads(
            [functools.partial(w.run, wl) for w, wl in zip(writers, wls, strict=True)]
        )
    finally:
        _close(shared)


def run_raw_grouped(path: Path, wls: list[Workload], *, cpu: bool = False) -> float:
    """The ideal group: every writer's step ``i`` in one sync commit, no threads, no checks.

    The raw limit of grouping on LMDB: what one fsync'd txn per round of 4
    puts costs when nothing else does (the encoding and hashing are the same
    as :class:`RawWriter`'s: :func:`put_step`). ``cpu``: :data:`CPU_STAND_IN`
    burnt per put (the pipelined raw limit's baseline at equal CPU: one group
    of 4, nothing overlapped).
    """
    path.mkdir(parents=True, exist_ok=True)
    env = lmdb.open(str(path), map_size=MAP_SIZE, sync=True, metasync=True)
    names = [f"writer{i}".encode() for i in range(len(wls))]
    build, work = CPU_STAND_IN
    try:
        t0 = time.perf_counter()
        for step in range(len(wls[0].states)):
            if cpu:
                _burn(build * len(wls))
            with env.begin(write=True) as txn:
                for name, wl in zip(names, wls, strict=True):
                    if cpu:
                        _burn(work)
                    put_step(txn, name, step, wl.states[step])
        return time.perf_counter() - t0
    finally:
        env.close()


#: Microseconds of GIL-held CPU per put the pipelined raw limit's second row burns
#: beside bare LMDB: a writer's build of its checkpoint outside the txn and the
#: txn's work per checkpoint inside it (cpstore's, measured per phase in threaded
#: runs, 2026-12-01: ~38 and ~40 us), so what pipelining could hide is on the table.
CPU_STAND_IN = (38.0, 40.0)


def _burn(us: float) -> None:
    """Hold the GIL for ``us`` microseconds (pure Python: no release)."""
    end = time.perf_counter() + us * 1e-6
    while time.perf_counter() < end:
        pass


class SyncedThrough:
    """Which txns of an ``MDB_NOMETASYNC`` env are durable, data and meta page, in one process.

    A commit with ``sync=True, metasync=False`` fdatasyncs its data pages and
    writes its meta page unsynced. Txn ``n`` is durable once an ``fdatasync``
    of the file began after its commit returned: the commit of a later txn of
    this process (its data fdatasync; the caller serialises whole txns, so the
    earlier commit had returned), or an explicit ``env.sync(True)``, shared by
    every commit that returned before it began.
    """

    def __init__(self, env: Any) -> None:
        self.env = env
        self.cond = threading.Condition()
        self.returned = 0  # highest txn id whose commit has returned
        self.through = 0  # every txn up to this one is durable
        self.syncing = False

    def committed(self, txnid: int) -> None:
        """Txn ``txnid`` committed (its commit returned); every earlier one is durable."""
        with self.cond:
            self.returned = max(self.returned, txnid)
            if txnid - 1 > self.through:
                self.through = txnid - 1
                self.cond.notify_all()

    def wait(self, txnid: int) -> None:
        """Return once ``txnid`` is durable: join a sync begun after it, or run one."""
        with self.cond:
            while self.through < txnid:
                if self.syncing:
                    self.cond.wait()
                    continue
                self.syncing, upto = True, self.returned
                self.cond.release()
                try:
                    self.env.sync(True)
                finally:
                    self.cond.acquire()
                    self.syncing = False
                    self.through = max(self.through, upto)
                    self.cond.notify_all()


def run_raw_pipelined(path: Path, wls: list[Workload], *, cpu: bool, lanes: int = 2) -> float:
    """Pipelined groups: ``lanes`` threads, each committing its share of the writers'
    step ``i`` in one ``MDB_NOMETASYNC`` txn, acknowledged through :class:`SyncedThrough`.

    Each lane is a group that alternates with the others: while one lane's
    commit is being made durable, another's txn runs (py-lmdb: one write txn
    per env at a time, hence the lock around a whole txn). ``cpu``: each lane
    also burns :data:`CPU_STAND_IN` per put (the build before the txn, the txn's
    work inside it), GIL-held as cpstore's is.
    """
    path.mkdir(parents=True, exist_ok=True)
    env = lmdb.open(str(path), map_size=MAP_SIZE, sync=True, metasync=False)
    synced = SyncedThrough(env)
    lock = threading.Lock()
    names = [f"writer{i}".encode() for i in range(len(wls))]
    per = len(wls) // lanes
    build, work = CPU_STAND_IN if cpu else (0.0, 0.0)

    def lane(mine: range) -> None:
        for step in range(len(wls[0].states)):
            _burn(build * len(mine))
            with lock:
                txn = env.begin(write=True)
                try:
                    for i in mine:
                        _burn(work)
                        put_step(txn, names[i], step, wls[i].states[step])
                    txnid = txn.id()
                    txn.commit()
                except BaseException:
                    txn.abort()
                    raise
            synced.committed(txnid)
            synced.wait(txnid)

    try:
        return timed_threads(
            [functools.partial(lane, range(k * per, (k + 1) * per)) for k in range(lanes)]
        )
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
    contenders["raw LMDB pipelined 2x2"] = lambda: run_raw_pipelined(
        tmp_path_factory.mktemp("gcq"), wls, cpu=False
    )
    contenders["raw LMDB ideal group +cpu"] = lambda: run_raw_grouped(
        tmp_path_factory.mktemp("gcr"), wls, cpu=True
    )
    contenders["raw LMDB pipelined 2x2 +cpu"] = lambda: run_raw_pipelined(
        tmp_path_factory.mktemp("gcq"), wls, cpu=True
    )
    contenders.update(threaded_raw(tmp_path_factory.mktemp, wls, CPU_STAND_IN))
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
            Comparison(
                "raw LMDB pipelined 2x2",
                "raw LMDB ideal group",
                None,
                True,
                "pipelined groups of 2 vs one group of 4, bare",
            ),
            Comparison(
                "raw LMDB pipelined 2x2 +cpu",
                "raw LMDB ideal group +cpu",
                None,
                True,
                "pipelined groups of 2 vs one group of 4, with cpstore's CPU per put",
            ),
            Comparison(
                "raw LMDB grouped 4 threads",
                "SqliteSaver FULL 4 threads",
                None,
                True,
                "raw limit of grouping 4 threads (GIL hand-offs, checks) vs peer",
            ),
            Comparison(
                "raw LMDB grouped 4 threads +cpu",
                "SqliteSaver FULL 4 threads",
                None,
                True,
                "the same with cpstore's CPU per put vs peer",
            ),
            Comparison(
                "cpstore 4 threads",
                "raw LMDB grouped 4 threads +cpu",
                None,
                True,
                "cpstore vs the leanest 4-thread group at its CPU per put",
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
