"""The store against LangGraph's checkpoint savers, side by side in one run (issue 12).

Workload (issue 12): ``STEPS`` checkpoints of one thread, state = 10 channels
of 1 KB random text, one channel changing per step. Sizes:
``CPSTORE_BENCH_SIZE=quick`` (300 steps, the default) or ``full`` (2,000);
``CPSTORE_BENCH_STEPS`` and ``CPSTORE_BENCH_REPEATS`` override.

Peers, called the way LangGraph calls them (``put(config, checkpoint,
metadata, new_versions)``, ``get_tuple``, ``list``):

- ``LMDBSaver`` (langgraph-checkpoint-lmdb) on an env opened with LMDB's
  defaults (sync + metasync: durable), and on one opened with ``sync=False``
  (its no-fsync setting; the saver itself takes an env and has no option);
- ``SqliteSaver`` (langgraph-checkpoint-sqlite): WAL (set by ``setup()``),
  ``synchronous=FULL`` (durable) and ``synchronous=OFF`` (no fsync);
  ``list()`` is given ``checkpoint_ns`` so it uses its index;
- ``InMemorySaver`` (langgraph): no disk at all.

cpstore records the same states through its public API
(``store.recorder(...).checkpoint(step, state)``). *Raw limits* run beside
them, bare py-lmdb with none of cpstore's code, to show which part of a gap is
cpstore's: the same objects (:class:`RawLmdb`, puts and gets by id), cpstore's
commit on its own tables (:class:`RawLayout5`, puts), cpstore's own files
(:class:`RawOnCpstoreFiles`, :class:`RawHintedOnCpstoreFiles`,
:class:`RawTypedOnCpstoreFiles`, reads; the
fresh-process child's ``raw``, and ``raw+checks``: the same with every system call
of cpstore's read-only open run flat) and one blob per checkpoint (:class:`RawBlobLmdb`).

Every figure is one test whose rounds are *repeats*: each repeat runs every
contender once, the order rotated between repeats (A, B, C; B, C, A; ...), so
drift of a shared machine hits all sides alike. A ratio is peer time over
cpstore time within one repeat (higher = cpstore faster); the table gives the
median of those paired ratios and their min-max, and each contender's median
time with min-max. pytest-benchmark's own timing of a round (all contenders
together) is not a figure. Every benchmark's ``extra_info`` records the
machine and the package versions (conftest.py prints them in the header).

Peers are skipped cleanly when the ``bench`` extra is not installed.
Run: ``./dev bench -k bench_store`` or
``.venv/bin/python -m pytest benchmarks/bench_store.py --benchmark-only``.
"""

from __future__ import annotations

import importlib
import os
import random
import sqlite3
import string
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any, TypeVar, cast

import lmdb
import msgpack
import msgspec
import pytest
import xxhash
import zstandard
from pytest_benchmark.fixture import BenchmarkFixture

from cpstore.errors import CpstoreError
from cpstore.store.content import KIND_COMPACT
from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store
from cpstore.store.record_codec import RECORD_DICT

PARTS = 10
PART_SIZE = 1024
GETS = 200
HISTORY = 100
THREAD = "thread-1"
_T = TypeVar("_T")
MAP_SIZE = 1 << 31

try:
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.checkpoint.sqlite import SqliteSaver

    # Imported by name so mypy does not need the optional package's types.
    LMDBSaver: Any = importlib.import_module("langgraph_checkpoint_lmdb").LMDBSaver
    HAVE_PEERS = True
except ImportError:  # optional benchmark extra
    HAVE_PEERS = False

needs_peers = pytest.mark.skipif(
    not HAVE_PEERS,
    reason="the bench extra (langgraph, langgraph-checkpoint-lmdb/-sqlite) is not installed",
)
pytestmark = needs_peers


def _probe_none_mode(tmp: Path) -> bool:
    """Whether this cpstore has ``durability="none"`` (issue 12 adds it)."""
    try:
        # Any: the check must type-check before and after the store gains the mode.
        with open_store(tmp / "probe", durability=cast(Any, "none")):
            return True
    except (CpstoreError, TypeError, ValueError):
        return False


# -- the workload ----------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    """Every step's state and which channels changed, generated once (not timed)."""

    states: list[dict[str, str]]
    changed: list[tuple[str, ...]]

    @property
    def steps(self) -> int:
        """Checkpoints in the workload."""
        return len(self.states)

    def unique_bytes(self) -> int:
        """Bytes a perfect deduplicating store must keep."""
        return (PARTS + self.steps - 1) * PART_SIZE


def make_workload(steps: int, seed: int = 12) -> Workload:
    """Channel ``step % 10`` gets new random text each step (ASCII: 1 char = 1 byte)."""
    rng = random.Random(seed)
    alphabet = string.ascii_letters + string.digits + " "

    def text() -> str:
        return "".join(rng.choices(alphabet, k=PART_SIZE))

    state = {f"channel{i}": text() for i in range(PARTS)}
    states, changed = [dict(state)], [tuple(state)]
    for step in range(1, steps):
        name = f"channel{step % PARTS}"
        state[name] = text()
        states.append(dict(state))
        changed.append((name,))
    return Workload(states, changed)


@pytest.fixture(scope="module")
def steps(size: str) -> int:
    """Checkpoints in the workload."""
    return int(os.environ.get("CPSTORE_BENCH_STEPS", "300" if size == "quick" else "2000"))


@pytest.fixture(scope="module")
def repeats(size: str) -> int:
    """Interleaved repeats per figure (at least 5)."""
    return max(5, int(os.environ.get("CPSTORE_BENCH_REPEATS", "5" if size == "quick" else "11")))


@pytest.fixture(scope="module")
def workload(steps: int) -> Workload:
    """The issue-12 workload at this run's size."""
    return make_workload(steps)


# -- contenders ------------------------------------------------------------------


class CpstoreSide:
    """cpstore through its public API: one recorder, one checkpoint per step."""

    def __init__(self, path: Path, durability: str = "sync") -> None:
        self.store: Store = open_store(path, durability=cast(Any, durability))
        self.path = path

    def record(self, wl: Workload) -> list[str]:
        """Record every step; ``flush()`` is part of it (batched mode commits the tail)."""
        rec = self.store.recorder(THREAD)
        ids = [rec.checkpoint(step, state) for step, state in enumerate(wl.states)]
        self.store.flush()
        return ids

    def disk(self) -> int:
        """Pages of the data file in use."""
        return self.store.disk_bytes()

    def close(self) -> None:
        """Close the store."""
        self.store.close()


class SaverSide:
    """A LangGraph checkpoint saver, driven as LangGraph's Pregel loop drives it."""

    def __init__(self, saver: Any, close: Callable[[], None], disk: Callable[[], int]) -> None:
        self.saver = saver
        self._close = close
        self._disk = disk

    def record(self, wl: Workload) -> list[str]:
        """``put`` per step with the channel versions and ``new_versions`` LangGraph passes."""
        saver = self.saver
        config: dict[str, Any] = {"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}}
        versions: dict[str, Any] = {}
        ids = []
        for step, (state, changed) in enumerate(zip(wl.states, wl.changed, strict=True)):
            new = {k: saver.get_next_version(versions.get(k), None) for k in changed}
            versions.update(new)
            cp = empty_checkpoint()
            cp["channel_values"] = dict(state)
            cp["channel_versions"] = dict(versions)
            meta = {"source": "loop", "step": step, "parents": {}}
            config = saver.put(config, cp, meta, new)
            ids.append(config["configurable"]["checkpoint_id"])
        return ids

    def disk(self) -> int:
        """Bytes on disk (0 for the in-memory saver)."""
        return self._disk()

    def close(self) -> None:
        """Release the engine."""
        self._close()


def lmdb_saver(path: Path, *, sync: bool) -> SaverSide:
    """LMDBSaver on an env with LMDB's defaults (durable) or ``sync=False``."""
    path.mkdir(parents=True, exist_ok=True)
    env = lmdb.open(str(path), max_dbs=4, map_size=MAP_SIZE, sync=sync)

    def disk() -> int:
        return int((env.info()["last_pgno"] + 1) * env.stat()["psize"])

    return SaverSide(LMDBSaver(env), env.close, disk)


def sqlite_saver(path: Path, *, sync: bool) -> SaverSide:
    """SqliteSaver: WAL (its ``setup()``), synchronous FULL (durable) or OFF."""
    path.mkdir(parents=True, exist_ok=True)
    db = path / "cp.sqlite"
    conn = sqlite3.connect(str(db), check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    conn.execute(f"PRAGMA synchronous={'FULL' if sync else 'OFF'}")

    def disk() -> int:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return sum(p.stat().st_size for p in path.glob("cp.sqlite*"))

    return SaverSide(saver, conn.close, disk)


def memory_saver(path: Path) -> SaverSide:
    """InMemorySaver (LangGraph's own)."""
    return SaverSide(InMemorySaver(), lambda: None, lambda: 0)


class RawLmdb:
    """The raw limit: the workload as bare LMDB, none of cpstore's checks or tables.

    Per step, in one write txn: each channel msgpack-encoded and put under its
    XXH3-128 (``overwrite=False``: an unchanged part is found, not rewritten),
    then a msgpack manifest under its digest. ``sync`` is LMDB's sync + metasync,
    the same promise as cpstore's "sync". What this loop costs is what LMDB and
    Python allow at all; cpstore's time above it is cpstore's own.
    """

    def __init__(self, path: Path, *, sync: bool) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.env = lmdb.open(str(path), map_size=MAP_SIZE, sync=sync, metasync=sync)

    def record(self, wl: Workload) -> list[bytes]:
        """One commit per step; returns manifest digests."""
        h, pack = xxhash.xxh3_128_digest, msgpack.packb
        ids: list[bytes] = []
        for step, state in enumerate(wl.states):
            with self.env.begin(write=True) as txn:
                parts = {}
                for name, value in state.items():
                    enc = pack(value)
                    parts[name] = key = h(enc)
                    txn.put(key, enc, overwrite=False)
                manifest = pack({"parts": parts, "step": step})
                ids.append(h(manifest))
                txn.put(ids[-1], manifest)
        return ids

    def get(self, cid: bytes) -> dict[str, Any]:
        """One read txn: 11 gets, 11 hash checks, 11 decodes."""
        h, unpack = xxhash.xxh3_128_digest, msgpack.unpackb
        with self.env.begin(buffers=True) as txn:
            m = txn.get(cid)
            if h(m) != cid:
                raise AssertionError("manifest")
            state = {}
            for name, key in unpack(m)["parts"].items():
                value = txn.get(key)
                if h(value) != key:
                    raise AssertionError(name)
                state[name] = unpack(value)
            return state

    def disk(self) -> int:
        """Pages of the data file in use."""
        return int((self.env.info()["last_pgno"] + 1) * self.env.stat()["psize"])

    def close(self) -> None:
        """Close the env."""
        self.env.close()


class RawLayout5:
    """The raw limit of cpstore's own layout and checks: bare LMDB doing the reads and
    writes a layout-5 checkpoint commit does (content.py, commit.py), no cpstore code.

    Per step, in one write txn: the ref read, the parent record's location read
    (index row + heap entry), each changed part appended (heap cursor, index row
    write-once, legacy-table read, heap entry), every named part's location read
    (the must-exist and hint reads: index row + heap entry), the record appended
    the same way, the tombstone delete, the ref and ``meta/refs_digest`` written.
    Parts are msgpack-encoded and hashed only when the value object changed (as
    the recorder does). What this costs is what cpstore's format and checks need
    of LMDB and Python at least; above it is cpstore's own code.
    """

    def __init__(self, path: Path, durable: bool = False) -> None:
        """``durable``: LMDB's sync and metasync on every commit (as cpstore's ``sync``
        mode and LMDBSaver's default env); otherwise no fsync until ``record``'s end."""
        path.mkdir(parents=True, exist_ok=True)
        self.env = lmdb.open(str(path), map_size=MAP_SIZE, max_dbs=12, sync=durable, metasync=True)
        names = ("heap", "oloc", "cloc", "refs", "meta", "objects", "checkpoints", "tombstones")
        self.dbs = {n: self.env.open_db(n.encode()) for n in names}

    def record(self, wl: Workload) -> list[bytes]:
        """One commit per step; ``flush()``'s fsync at the end, as cpstore's none mode."""
        h, pack, t = xxhash.xxh3_128_digest, msgpack.packb, self.dbs
        held: dict[str, tuple[bytes, bytes, str]] = {}
        ids: list[bytes] = []
        ref, seq, prev = b"thread-1\0main", 0, None
        for step, state in enumerate(wl.states):
            changed = {n: pack(v) for n, v in state.items() if n not in held or held[n][2] is not v}
            with self.env.begin(write=True, buffers=True) as txn:
                txn.get(ref, None, t["refs"])
                if prev is not None:
                    txn.get(prev[0], None, t["cloc"])
                    txn.get(prev[1], None, t["heap"])
                for name, enc in changed.items():
                    key = h(enc)
                    with txn.cursor(db=t["heap"]) as cur:
                        cur.last()
                    seq += 1
                    loc = seq.to_bytes(8, "big")
                    txn.put(key, loc, overwrite=False, db=t["oloc"])
                    txn.get(key, None, t["objects"])
                    txn.put(loc, b"o\x10" + key + enc, append=True, db=t["heap"])
                    held[name] = (key, loc, state[name])
                for key, loc, _ in held.values():
                    txn.get(key, None, t["oloc"])
                    txn.get(loc, None, t["heap"])
                manifest = pack({"parts": {n: v[0] for n, v in held.items()}, "step": step})
                cid = h(manifest)
                seq += 1
                loc = seq.to_bytes(8, "big")
                txn.put(cid, loc, overwrite=False, db=t["cloc"])
                txn.get(cid, None, t["checkpoints"])
                txn.put(loc, b"c\x10" + cid + manifest, append=True, db=t["heap"])
                txn.delete(cid, db=t["tombstones"])
                txn.put(ref, cid + bytes(9), db=t["refs"])
                txn.get(b"refs_digest", None, t["meta"])
                txn.put(b"refs_digest", bytes(24), db=t["meta"])
                prev = (cid, loc)
            ids.append(cid)
        self.env.sync(True)
        return ids

    def disk(self) -> int:
        """Pages of the data file in use."""
        return int((self.env.info()["last_pgno"] + 1) * self.env.stat()["psize"])

    def close(self) -> None:
        """Close the env."""
        self.env.close()


class RawOnCpstoreFiles:
    """The read raw limit on cpstore's own layout: bare py-lmdb calls on its env and bytes.

    What a get must do at least on the deduplicating layout cpstore stores:
    one manifest lookup (the 16-byte entry header skipped), one XXH3 check, one
    generic msgpack decode; then per part one lookup, one check, one decode. A
    lookup on layout 5 is two gets: the location index, then the heap entry (its
    kind-and-key header skipped, not compared); a layout-6 compact record (kind
    ``r``) is inflated with the record dictionary (one zstd call, no shape check).
    None of cpstore's shape checks, ref check, header check, error naming or
    reader object. Runs on the open store's own LMDB environment (py-lmdb
    refuses a second open of one env in a process), so it reads the same bytes.
    """

    def __init__(self, store: Store) -> None:
        backend: Any = store.backend
        self.env = backend.env.env
        dbs = backend.dbs
        self.cps, self.objects, self.refs = dbs["cloc"], dbs["oloc"], dbs["refs"]
        self.heap = dbs["heap"]
        self.inflate = zstandard.ZstdDecompressor(
            dict_data=zstandard.ZstdCompressionDict(
                RECORD_DICT, dict_type=zstandard.DICT_TYPE_RAWCONTENT
            )
        ).decompress

    def _state(self, txn: Any, cid: bytes) -> tuple[dict[str, Any], bytes | None]:
        h, unpack, objects, heap = xxhash.xxh3_128_digest, msgpack.unpackb, self.objects, self.heap
        e = txn.get(txn.get(cid, None, self.cps), None, heap)
        at = 18 + 4 + 4 * int.from_bytes(e[18:22], "big")  # past the location hints
        m = (self.inflate(e[at:]) if e[0] == KIND_COMPACT else e[at:])[16:]
        if h(m) != cid:
            raise AssertionError("manifest")
        manifest = unpack(m, strict_map_key=False)
        state = {}
        for name, key in manifest["state"]["parts"].items():
            value = txn.get(txn.get(key, None, objects), None, heap)[18:]
            if h(value) != key:
                raise AssertionError(name)
            state[name] = unpack(value)
        return state, manifest["parent"]

    def get(self, cid: bytes) -> dict[str, Any]:
        """One read txn: 11 gets, 11 hash checks, 11 decodes."""
        with self.env.begin(buffers=True) as txn:
            return self._state(txn, cid)[0]

    def latest(self, run: str) -> dict[str, Any]:
        """The head ref's first 16 bytes (no ref check), then :meth:`get`'s work, one txn."""
        with self.env.begin(buffers=True) as txn:
            cid = bytes(txn.get(run.encode() + b"\0main", None, self.refs)[:16])
            return self._state(txn, cid)[0]

    def history(self, run: str, limit: int) -> list[dict[str, Any]]:
        """From the head through ``parent`` links, every entry's state, one txn, no memo."""
        out: list[dict[str, Any]] = []
        with self.env.begin(buffers=True) as txn:
            cid: bytes | None = bytes(txn.get(run.encode() + b"\0main", None, self.refs)[:16])
            while cid is not None and len(out) < limit:
                state, cid = self._state(txn, cid)
                out.append(state)
        return out


class RawHintedOnCpstoreFiles(RawOnCpstoreFiles):
    """:class:`RawOnCpstoreFiles` reading each part at its location hint: the floor of
    cpstore's own read path on its own bytes.

    A checkpoint record's entry carries the heap seqs of its parts (content.py);
    cpstore's whole-state read tries each and hashes what it finds. This loop
    does the same in bare Python: the record inflated as cpstore does (layout 6), one
    get per part, the 18-byte entry header skipped (not compared), one XXH3 check,
    one msgpack decode. What cpstore
    spends above it is its own code; what this costs above LMDBSaver is the
    layout (a manifest and one object per part instead of one blob).
    """

    def _state(self, txn: Any, cid: bytes) -> tuple[dict[str, Any], bytes | None]:
        h, unpack, heap = xxhash.xxh3_128_digest, msgpack.unpackb, self.heap
        e = txn.get(txn.get(cid, None, self.cps), None, heap)
        n = int.from_bytes(e[18:22], "big")
        hints = e[22 : 22 + 4 * n]
        at = 22 + 4 * n  # past the location hints: the record, compact (layout 6) or not
        m = (self.inflate(e[at:]) if e[0] == KIND_COMPACT else e[at:])[16:]
        if h(m) != cid:
            raise AssertionError("manifest")
        manifest = unpack(m, strict_map_key=False)
        state = {}
        for i, (name, key) in enumerate(manifest["state"]["parts"].items()):
            value = txn.get(b"\0\0\0\0" + hints[4 * i : 4 * i + 4], None, heap)[18:]
            if h(value) != key:
                raise AssertionError(name)
            state[name] = unpack(value)
        return state, manifest["parent"]


class _PartsOnly(msgspec.Struct):
    """A manifest's ``state`` map, of which only ``parts`` is decoded."""

    parts: dict[str, bytes]


class _StateAndParent(msgspec.Struct):
    """A manifest, of which only ``state.parts`` and ``parent`` are decoded."""

    state: _PartsOnly
    parent: bytes | None = None


class RawTypedOnCpstoreFiles(RawHintedOnCpstoreFiles):
    """:class:`RawHintedOnCpstoreFiles` decoding of the manifest only what a state read
    uses: the lowest floor of cpstore's whole-state read on its own bytes.

    One typed msgspec decode of ``state.parts`` and ``parent`` (every other field
    skipped, its shape unchecked: no version, no canonical-form check, no
    ``state`` shape beyond parts being str -> bytes), and each part decoded by
    msgspec's generic decoder (as cpstore's fast path does) instead of
    msgpack. Everything else as the hinted loop: one get of the record's
    location, one of its entry, the inflate, one XXH3 check of the manifest,
    then per part one get at its hint, one XXH3 check, one decode.
    """

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.manifest = msgspec.msgpack.Decoder(_StateAndParent).decode
        self.part = msgspec.msgpack.Decoder().decode

    def _state(self, txn: Any, cid: bytes) -> tuple[dict[str, Any], bytes | None]:
        h, unpack, heap = xxhash.xxh3_128_digest, self.part, self.heap
        e = txn.get(txn.get(cid, None, self.cps), None, heap)
        n = int.from_bytes(e[18:22], "big")
        hints = e[22 : 22 + 4 * n]
        at = 22 + 4 * n
        m = (self.inflate(e[at:]) if e[0] == KIND_COMPACT else e[at:])[16:]
        if h(m) != cid:
            raise AssertionError("manifest")
        manifest = self.manifest(m)
        state = {}
        for i, (name, key) in enumerate(manifest.state.parts.items()):
            value = txn.get(b"\0\0\0\0" + hints[4 * i : 4 * i + 4], None, heap)[18:]
            if h(value) != key:
                raise AssertionError(name)
            state[name] = unpack(value)
        return state, manifest.parent


class RawBlobLmdb:
    """LMDBSaver's layout in bare LMDB: each checkpoint's whole state as one msgpack blob.

    No deduplication (every checkpoint stores all its channels again), one
    get, one XXH3 check and one decode per read: what the one-blob layout
    costs at least, beside :class:`RawLmdb` (the deduplicating layout).
    """

    def __init__(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.env = lmdb.open(str(path), map_size=MAP_SIZE)

    def record(self, wl: Workload) -> list[bytes]:
        """One commit per step; returns blob digests."""
        h, pack = xxhash.xxh3_128_digest, msgpack.packb
        ids: list[bytes] = []
        for state in wl.states:
            blob = pack(state)
            ids.append(h(blob))
            with self.env.begin(write=True) as txn:
                txn.put(ids[-1], blob)
        return ids

    def get(self, cid: bytes) -> dict[str, Any]:
        """One read txn: 1 get, 1 hash check, 1 decode."""
        with self.env.begin(buffers=True) as txn:
            blob = txn.get(cid)
            if xxhash.xxh3_128_digest(blob) != cid:
                raise AssertionError("blob")
            state: dict[str, Any] = msgpack.unpackb(blob)
            return state

    def close(self) -> None:
        """Close the env."""
        self.env.close()


Side = CpstoreSide | SaverSide | RawLmdb | RawLayout5
OPENERS: dict[str, Callable[[Path], Side]] = {
    "cpstore durable": lambda p: CpstoreSide(p, "sync"),
    "cpstore batched": lambda p: CpstoreSide(p, "batched"),
    "LMDBSaver durable": lambda p: lmdb_saver(p, sync=True),
    "LMDBSaver sync=False": lambda p: lmdb_saver(p, sync=False),
    "SqliteSaver FULL": lambda p: sqlite_saver(p, sync=True),
    "SqliteSaver OFF": lambda p: sqlite_saver(p, sync=False),
    "InMemorySaver": memory_saver,
    "raw LMDB durable": lambda p: RawLmdb(p, sync=True),
    "raw LMDB sync=False": lambda p: RawLmdb(p, sync=False),
}


# -- interleaved measurement ----------------------------------------------------


@dataclass
class Comparison:
    """One cpstore figure against one peer figure, paired per repeat."""

    ours: str
    peer: str
    target: float | None = None
    equal_durability: bool | None = None
    note: str = ""


@dataclass
class Figure:
    """Per-item seconds of every contender, one entry per repeat."""

    name: str
    unit_items: int
    runs: dict[str, list[float]] = field(default_factory=dict)


def interleave(
    benchmark: BenchmarkFixture,
    figure: str,
    contenders: dict[str, Callable[[], float]],
    repeats: int,
    comparisons: list[Comparison],
    *,
    items: int = 1,
) -> Figure:
    """Run every contender once per repeat, rotating the order; record figures and ratios.

    Each contender callable returns the seconds of its timed section; divided by
    ``items`` that is the per-item time. pytest-benchmark times the whole repeat.
    """
    names = list(contenders)
    fig = Figure(figure, items, {n: [] for n in names})
    turn = [0]

    def one_repeat() -> None:
        k = turn[0] % len(names)
        turn[0] += 1
        for name in names[k:] + names[:k]:
            fig.runs[name].append(contenders[name]() / items)

    benchmark.pedantic(one_repeat, rounds=repeats, iterations=1, warmup_rounds=0)
    benchmark.extra_info.update(figure_info(fig, comparisons))
    return fig


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": median(values), "min": min(values), "max": max(values)}


def figure_info(fig: Figure, comparisons: list[Comparison]) -> dict[str, Any]:
    """extra_info for report.interleaved(): times and paired ratios with spreads."""
    ratios = []
    for c in comparisons:
        if c.ours not in fig.runs or c.peer not in fig.runs:
            continue
        paired = [p / o for o, p in zip(fig.runs[c.ours], fig.runs[c.peer], strict=True)]
        ratios.append(
            {
                "ours": c.ours,
                "peer": c.peer,
                **_spread(paired),
                "target": c.target,
                "equal_durability": c.equal_durability,
                "note": c.note,
            }
        )
    return {
        "interleaved": {
            "figure": fig.name,
            "repeats": len(next(iter(fig.runs.values()))),
            "times": {n: {**_spread(v), "runs": v} for n, v in fig.runs.items()},
            "ratios": ratios,
        }
    }


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _timer(fn: Callable[[], object]) -> Callable[[], float]:
    return lambda: _timed(fn)


# -- puts ----------------------------------------------------------------------


def test_put(
    benchmark: BenchmarkFixture,
    tmp_path_factory: pytest.TempPathFactory,
    workload: Workload,
    repeats: int,
) -> None:
    """Every put flavour, interleaved: per-put time over the whole workload.

    Opening and closing are not timed; cpstore's final ``flush()`` is.
    """
    openers = dict(OPENERS)
    if _probe_none_mode(tmp_path_factory.mktemp("probe")):
        openers["cpstore none"] = lambda p: CpstoreSide(p, "none")
    openers["raw layout-5 sync=False"] = RawLayout5
    openers["raw layout-5 durable"] = lambda p: RawLayout5(p, durable=True)

    def contender(opener: Callable[[Path], Side]) -> Callable[[], float]:
        def run() -> float:
            side = opener(tmp_path_factory.mktemp("put"))
            try:
                return _timed(lambda: side.record(workload))
            finally:
                side.close()

        return run

    comparisons = [
        Comparison("cpstore durable", "LMDBSaver durable", 1.0, True),
        Comparison("cpstore durable", "SqliteSaver FULL", 1.0, True),
        Comparison(
            "cpstore batched",
            "LMDBSaver sync=False",
            1.0,
            False,
            "batched fsyncs every 64; the peer never",
        ),
        Comparison("cpstore batched", "LMDBSaver durable", None, False, "peer fsyncs every put"),
        Comparison("cpstore batched", "SqliteSaver FULL", None, False, "peer fsyncs every put"),
        Comparison("cpstore batched", "SqliteSaver OFF", None, False),
        Comparison("cpstore batched", "InMemorySaver", None, False),
        Comparison("cpstore none", "LMDBSaver sync=False", 1.0, True),
        # The raw limit: is the gap cpstore's own code, or the engine's?
        Comparison("cpstore durable", "raw LMDB durable", None, True, "raw limit"),
        Comparison("raw LMDB durable", "LMDBSaver durable", None, True, "raw limit vs peer"),
        Comparison("raw LMDB durable", "SqliteSaver FULL", None, True, "raw limit vs peer"),
        # The durable race's layout raw limit: cpstore's reads and writes, a commit
        # with LMDB's two syncs each, no cpstore code.
        Comparison("cpstore durable", "raw layout-5 durable", None, True, "layout raw limit"),
        Comparison(
            "raw layout-5 durable", "LMDBSaver durable", None, True, "layout raw limit vs peer"
        ),
        Comparison(
            "raw layout-5 durable", "SqliteSaver FULL", None, True, "layout raw limit vs peer"
        ),
        # The CPU race's raw limit: the same loop with no fsync at all.
        Comparison("cpstore none", "raw LMDB sync=False", None, True, "raw limit"),
        Comparison("raw LMDB sync=False", "LMDBSaver sync=False", None, True, "raw limit vs peer"),
        # The same, for cpstore's own layout and checks (RawLayout5): what is left
        # of the gap when no cpstore code runs at all.
        Comparison("cpstore none", "raw layout-5 sync=False", None, True, "layout raw limit"),
        Comparison(
            "raw layout-5 sync=False",
            "LMDBSaver sync=False",
            None,
            True,
            "layout raw limit vs peer; the raw side fsyncs once at the end, the peer never",
        ),
    ]
    interleave(
        benchmark,
        "put",
        {name: contender(op) for name, op in openers.items()},
        repeats,
        comparisons,
        items=workload.steps,
    )


# -- reads -----------------------------------------------------------------------


@dataclass
class Recorded:
    """The workload recorded once in each store, for the read figures."""

    ours: CpstoreSide
    ours_ids: list[str]
    raw: RawLmdb
    raw_ids: list[bytes]
    blob: RawBlobLmdb
    blob_ids: list[bytes]
    peers: dict[str, SaverSide]
    peer_ids: dict[str, list[str]]
    paths: dict[str, Path]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory, workload: Workload) -> Iterator[Recorded]:
    """cpstore (sync), LMDBSaver (durable), SqliteSaver (FULL), InMemorySaver, same states."""
    paths = {n: tmp_path_factory.mktemp("rd") for n in ("cpstore", "LMDBSaver", "SqliteSaver")}
    ours = CpstoreSide(paths["cpstore"] / "s", "sync")
    peers = {
        "LMDBSaver": lmdb_saver(paths["LMDBSaver"], sync=True),
        "SqliteSaver": sqlite_saver(paths["SqliteSaver"], sync=True),
        "InMemorySaver": memory_saver(Path()),
    }
    raw = RawLmdb(tmp_path_factory.mktemp("raw"), sync=True)
    blob = RawBlobLmdb(tmp_path_factory.mktemp("blob"))
    rec = Recorded(
        ours,
        ours.record(workload),
        raw,
        raw.record(workload),
        blob,
        blob.record(workload),
        peers,
        {},
        paths,
    )
    for name, side in peers.items():
        rec.peer_ids[name] = side.record(workload)
    try:
        yield rec
    finally:
        ours.close()
        raw.close()
        blob.close()
        for side in peers.values():
            side.close()


def _peer_comparisons(*, memory_target: float | None = None) -> list[Comparison]:
    """Issue 12's read targets: >= 1.0x each on-disk peer; InMemorySaver for scale only."""
    return [
        Comparison("cpstore", "LMDBSaver", 1.0),
        Comparison("cpstore", "SqliteSaver", 1.0),
        Comparison("cpstore", "InMemorySaver", memory_target),
    ]


#: Row names of the read raw limits (see RawOnCpstoreFiles and RawBlobLmdb).
RAW_OWN = "raw LMDB, cpstore's files"
RAW_BLOB = "raw LMDB, one blob per checkpoint"
RAW_HINTED = "raw LMDB, cpstore's files, hinted"
RAW_TYPED = "raw LMDB, cpstore's files, hinted, typed"


def _raw_comparisons() -> list[Comparison]:
    """cpstore against bare LMDB on its own bytes (its code), and that against LMDBSaver."""
    return [
        Comparison("cpstore", RAW_OWN, None, note="raw limit, same files: cpstore's code"),
        Comparison(RAW_OWN, "LMDBSaver", None, note="raw limit, same files, vs peer"),
        Comparison("cpstore", RAW_HINTED, None, note="raw limit at the hints: cpstore's code"),
        Comparison(RAW_HINTED, "LMDBSaver", None, note="raw limit at the hints vs peer"),
        Comparison("cpstore", RAW_TYPED, None, note="typed floor: cpstore's code"),
        Comparison(RAW_TYPED, "LMDBSaver", None, note="typed floor vs peer"),
    ]


def _on_cpstore_files(
    store: Store, loop: Callable[[RawOnCpstoreFiles], Callable[[], None]]
) -> dict[str, Callable[[], None]]:
    """The three read raw limits on cpstore's own files, each running ``loop``."""
    return {
        RAW_OWN: loop(RawOnCpstoreFiles(store)),
        RAW_HINTED: loop(RawHintedOnCpstoreFiles(store)),
        RAW_TYPED: loop(RawTypedOnCpstoreFiles(store)),
    }


def _check_state(values: Any) -> None:
    if len(values) != PARTS:
        raise AssertionError(f"{len(values)} channels, expected {PARTS}")


def _picks(ids: list[_T]) -> list[_T]:
    return ids[:: max(1, len(ids) // GETS)][:GETS]


def test_get_by_id(benchmark: BenchmarkFixture, recorded: Recorded, repeats: int) -> None:
    """cpstore ``read(id).state()`` (every object hash-checked) vs ``get_tuple`` by id."""
    store = recorded.ours.store
    ours = _picks(recorded.ours_ids)

    def cpstore() -> None:
        for cid in ours:
            with store.read(cid) as cp:
                _check_state(cp.state())

    def peer(name: str) -> Callable[[], None]:
        saver = recorded.peers[name].saver
        cfgs = [
            {"configurable": {"thread_id": THREAD, "checkpoint_ns": "", "checkpoint_id": c}}
            for c in _picks(recorded.peer_ids[name])
        ]

        def run() -> None:
            for cfg in cfgs:
                _check_state(saver.get_tuple(cfg).checkpoint["channel_values"])

        return run

    raw = recorded.raw
    raw_picks = _picks(recorded.raw_ids)

    def raw_limit() -> None:
        for cid in raw_picks:
            _check_state(raw.get(cid))

    own_picks = [bytes.fromhex(c) for c in ours]

    def on_files(reader: RawOnCpstoreFiles) -> Callable[[], None]:
        def run() -> None:
            for cid in own_picks:
                _check_state(reader.get(cid))

        return run

    blob = recorded.blob
    blob_picks = _picks(recorded.blob_ids)

    def raw_blob() -> None:
        for cid in blob_picks:
            _check_state(blob.get(cid))

    runs = {
        "cpstore": cpstore,
        **{n: peer(n) for n in recorded.peers},
        "raw LMDB": raw_limit,
        **_on_cpstore_files(store, on_files),
        RAW_BLOB: raw_blob,
    }
    for fn in runs.values():
        fn()  # warm every side once, untimed
    interleave(
        benchmark,
        "get by id (whole state)",
        {n: _timer(fn) for n, fn in runs.items()},
        repeats,
        [
            *_peer_comparisons(),
            Comparison("cpstore", "raw LMDB", None, note="raw limit"),
            Comparison("raw LMDB", "LMDBSaver", None, note="raw limit vs peer"),
            *_raw_comparisons(),
            Comparison(RAW_BLOB, "LMDBSaver", None, note="one-blob raw limit vs peer"),
            Comparison(RAW_OWN, RAW_BLOB, None, note="layout: dedup vs one blob, both bare"),
        ],
        items=len(ours),
    )


def test_latest(benchmark: BenchmarkFixture, recorded: Recorded, repeats: int) -> None:
    """cpstore ``latest(run).state()`` vs ``get_tuple`` without a checkpoint id."""
    store = recorded.ours.store

    def cpstore() -> None:
        for _ in range(GETS):
            with store.latest(THREAD) as cp:
                _check_state(cp.state())

    def peer(name: str) -> Callable[[], None]:
        saver = recorded.peers[name].saver
        cfg = {"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}}

        def run() -> None:
            for _ in range(GETS):
                _check_state(saver.get_tuple(cfg).checkpoint["channel_values"])

        return run

    def on_files(reader: RawOnCpstoreFiles) -> Callable[[], None]:
        def run() -> None:
            for _ in range(GETS):
                _check_state(reader.latest(THREAD))

        return run

    runs = {
        "cpstore": cpstore,
        **{n: peer(n) for n in recorded.peers},
        **_on_cpstore_files(store, on_files),
    }
    for fn in runs.values():
        fn()
    interleave(
        benchmark,
        "latest (whole state)",
        {n: _timer(fn) for n, fn in runs.items()},
        repeats,
        [*_peer_comparisons(), *_raw_comparisons()],
        items=GETS,
    )


def test_history_with_states(benchmark: BenchmarkFixture, recorded: Recorded, repeats: int) -> None:
    """History of 100 with states, equal work on both sides.

    cpstore: ``history_states(limit=100)``, one read txn, every part hashed and
    the whole state decoded per entry; beside it, for reference, the pattern
    before that API (``history()`` then one verified ``read`` per entry).
    Peers: ``list(config with checkpoint_ns, limit=100)``, which decodes every
    full checkpoint.
    """
    store = recorded.ours.store

    def cpstore() -> None:
        entries = store.history_states(THREAD, limit=HISTORY)
        if len(entries) != HISTORY:
            raise AssertionError(len(entries))
        for entry in entries:
            _check_state(entry.state)

    def per_entry_reads() -> None:
        entries = store.history(THREAD, limit=HISTORY)
        if len(entries) != HISTORY:
            raise AssertionError(len(entries))
        for m in entries:
            with store.read(m.id) as cp:
                _check_state(cp.state())

    def peer(name: str) -> Callable[[], None]:
        saver = recorded.peers[name].saver
        cfg = {"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}}

        def run() -> None:
            got = list(saver.list(cfg, limit=HISTORY))
            if len(got) != HISTORY:
                raise AssertionError(len(got))
            for t in got:
                _check_state(t.checkpoint["channel_values"])

        return run

    def with_manifests() -> None:
        entries = store.history_states(THREAD, limit=HISTORY)
        for entry in entries:
            _check_state(entry.state)
            if entry.manifest.step < 0:  # builds every entry's Manifest (first use)
                raise AssertionError(entry.id)

    def on_files(reader: RawOnCpstoreFiles) -> Callable[[], None]:
        def run() -> None:
            states = reader.history(THREAD, HISTORY)
            if len(states) != HISTORY:
                raise AssertionError(len(states))
            for state in states:
                _check_state(state)

        return run

    runs = {
        "cpstore": cpstore,
        "cpstore, manifests built": with_manifests,
        "cpstore history+reads": per_entry_reads,
        **{n: peer(n) for n in recorded.peers},
        **_on_cpstore_files(store, on_files),
    }
    for fn in runs.values():
        fn()
    interleave(
        benchmark,
        "history of 100 with states",
        {n: _timer(fn) for n, fn in runs.items()},
        repeats,
        # The target is the best peer's list(), whichever that is.
        [
            *_peer_comparisons(memory_target=1.0),
            Comparison("cpstore, manifests built", "LMDBSaver", None),
            *_raw_comparisons(),
        ],
    )


# The child imports everything first; only open + one whole-state get is timed.
# No side's close is timed (the peers' children never close their env or
# connection; cpstore's store is closed after the clock stops). The imports'
# garbage is collected before the clock starts, for every side: otherwise the
# interpreter's first full collection (10-40 ms with langgraph loaded) lands on
# whichever side's allocations happen to cross the collector's threshold.
# ``raw+checks`` is ``raw`` with every system call and LMDB call of cpstore's
# read-only open (the path check, the registry's looks, the creation lock, the
# folder pinned through /proc, the holder mark, close-on-exec for LMDB's
# descriptors, the held data file, the reader check, the format record, every
# table, the audit key) run flat, with no cpstore code: cpstore vs raw+checks is
# the cost of cpstore's own Python, and raw vs raw+checks that of the checks
# themselves (issue 12's raw limit).
_FRESH_CHILD = """
import fcntl, gc, os, stat, struct, sys, time, sqlite3
import lmdb, msgpack, xxhash, zstandard
from cpstore.store.facade import open as open_store
from cpstore.store.record_codec import RECORD_DICT
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph_checkpoint_lmdb import LMDBSaver
kind, path, cid = sys.argv[1], sys.argv[2], sys.argv[3]
cfg = {"configurable": {"thread_id": "thread-1", "checkpoint_ns": "", "checkpoint_id": cid}}
# The raw sides' record-dictionary decompressor, its tables made by one round trip,
# before the clock: cpstore's record_codec makes its own at import.
_dict = zstandard.ZstdCompressionDict(RECORD_DICT, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
inflate = zstandard.ZstdDecompressor(dict_data=_dict)
inflate.decompress(zstandard.ZstdCompressor(dict_data=_dict).compress(RECORD_DICT[:64]))
gc.collect()
t0 = time.perf_counter()
store = None
if kind == "cpstore":
    store = open_store(path, readonly=True)
    with store.read(cid) as cp:
        n = len(cp.state())
elif kind in ("raw", "raw+checks"):  # cpstore's files: open, RawHintedOnCpstoreFiles' read
    h, unpack, key = xxhash.xxh3_128_digest, msgpack.unpackb, bytes.fromhex(cid)
    if kind == "raw":  # bare
        env = lmdb.open(path, readonly=True, max_dbs=16, subdir=True)
    else:  # the system calls and LMDB calls of cpstore's read-only open, in one flat run
        if not stat.S_ISDIR(os.stat(path).st_mode):  # the facade's path check
            raise SystemExit("not a folder")
        for at in [i for i, c in enumerate(path) if c == "/"][1:] + [len(path)]:
            if stat.S_ISLNK(os.lstat(path[:at]).st_mode):  # lmdb_registry.canonical
                raise SystemExit("a link")
        os.stat(path + "/data.mdb")  # the registry's look by file
        os.stat(path)  # and by folder (lmdb_registry._in_folder)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # creation lock
        fcntl.flock(fd, fcntl.LOCK_SH)
        os.stat("data.mdb", dir_fd=fd)  # pin_folder
        pinned = f"/proc/self/fd/{fd}"
        assert stat.S_ISDIR(os.stat(pinned).st_mode)
        assert os.stat(pinned + "/data.mdb").st_size > 0  # check_data_file
        mark = os.open(pinned, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # HolderMark
        fcntl.fcntl(mark, fcntl.F_OFD_SETLK, struct.pack(
            "hhqqi", fcntl.F_RDLCK, os.SEEK_SET, 6 << 32 | os.getpid(), 1, 0))
        env = lmdb.open(pinned, map_size=1 << 30, subdir=True, readonly=True, create=False,
                        max_dbs=16, max_readers=1022, readahead=False, lock=True)
        ids = {(st.st_dev, st.st_ino) for st in  # lmdb_open.close_on_exec
               (os.stat(pinned + "/data.mdb"), os.stat(pinned + "/lock.mdb"))}
        for name in os.listdir("/proc/self/fd"):
            try:
                if os.get_inheritable(int(name)) and (
                        (st := os.fstat(int(name))).st_dev, st.st_ino) in ids:
                    os.set_inheritable(int(name), False)
            except OSError:
                pass  # listdir's own descriptor, closed by now
        held = os.open(pinned + "/data.mdb", os.O_RDONLY | os.O_CLOEXEC)  # TailCover.hold
        os.fstat(held)
        os.close(fd)
        env.reader_check()
        env.stat(), env.info()  # the page size, the size check
        meta = env.open_db(b"meta", create=False)
        with env.begin(buffers=True) as txn:
            assert txn.get(b"format", db=meta) is not None
        for name in (b"objects", b"checkpoints", b"refs", b"tombstones", b"ledgers", b"audit",
                     b"audit_index", b"audit_mac", b"heap", b"oloc", b"cloc"):
            env.open_db(name, create=False)
        os.stat(path + "/data.mdb")  # the registry's key, after the open
        os.fstat(mark)  # the registry's folder index (lmdb_registry._folder_of)
        with env.begin(buffers=True) as txn:
            txn.get(b"audit_key_id", db=meta)
    with env.begin(buffers=True) as txn:
        cloc, heap = env.open_db(b"cloc", txn=txn), env.open_db(b"heap", txn=txn)
        e = txn.get(txn.get(key, None, cloc), None, heap)
        k = int.from_bytes(e[18:22], "big")
        at = 22 + 4 * k
        if e[0] == 0x72:  # a layout-6 compact record: one zstd call, no shape check
            m = inflate.decompress(e[at:])[16:]
        else:
            m = e[at + 16:]
        assert h(m) == key
        state = {}
        for i, (name, part) in enumerate(unpack(m)["state"]["parts"].items()):
            value = txn.get(bytes(4) + e[22 + 4 * i : 26 + 4 * i], None, heap)[18:]
            assert h(value) == part, name
            state[name] = unpack(value)
        n = len(state)
elif kind == "LMDBSaver":
    env = lmdb.open(path, max_dbs=4, map_size=1 << 31)
    n = len(LMDBSaver(env).get_tuple(cfg).checkpoint["channel_values"])
else:
    conn = sqlite3.connect(path + "/cp.sqlite", check_same_thread=False)
    n = len(SqliteSaver(conn).get_tuple(cfg).checkpoint["channel_values"])
t1 = time.perf_counter()
if store is not None:
    store.close()
assert n == 10, n
print(t1 - t0)
"""


def test_get_fresh_process(benchmark: BenchmarkFixture, recorded: Recorded, repeats: int) -> None:
    """Open + one whole-state get by id in a fresh process (imports done, not timed)."""
    mid = len(recorded.ours_ids) // 2
    targets = {
        "cpstore": (str(recorded.paths["cpstore"] / "s"), recorded.ours_ids[mid]),
        "LMDBSaver": (str(recorded.paths["LMDBSaver"]), recorded.peer_ids["LMDBSaver"][mid]),
        "SqliteSaver": (str(recorded.paths["SqliteSaver"]), recorded.peer_ids["SqliteSaver"][mid]),
        "raw": (str(recorded.paths["cpstore"] / "s"), recorded.ours_ids[mid]),
        "raw+checks": (str(recorded.paths["cpstore"] / "s"), recorded.ours_ids[mid]),
    }

    def child(kind: str) -> Callable[[], float]:
        path, cid = targets[kind]

        def run() -> float:
            out = subprocess.run(
                [sys.executable, "-c", _FRESH_CHILD, kind, path, cid],
                check=True,
                capture_output=True,
                text=True,
            )
            return float(out.stdout.split()[-1])

        return run

    interleave(
        benchmark,
        "get in a fresh process",
        {k: child(k) for k in targets},
        repeats,
        [
            *(Comparison("cpstore", p, 1.0) for p in ("LMDBSaver", "SqliteSaver")),
            Comparison("cpstore", "raw", None, note="raw limit, cpstore's files, hinted"),
            Comparison("raw", "LMDBSaver", None, note="raw limit vs peer"),
            Comparison("cpstore", "raw+checks", None, note="checks run flat: cpstore's code"),
            Comparison("raw+checks", "LMDBSaver", None, note="checks run flat vs peer"),
        ],
    )


# -- disk ------------------------------------------------------------------------------


def test_disk_ratio(benchmark: BenchmarkFixture, recorded: Recorded, workload: Workload) -> None:
    """Disk bytes / unique bytes for each store (reported, not timed)."""
    unique = workload.unique_bytes()
    ratios = {"cpstore": recorded.ours.disk() / unique}
    for name in ("LMDBSaver", "SqliteSaver"):
        ratios[name] = recorded.peers[name].disk() / unique
    benchmark.extra_info.update(
        disk_ratio=round(ratios["cpstore"], 2),
        disk_ratio_target=2.0,
        unique_bytes=unique,
        lmdbsaver_disk_ratio=round(ratios["LMDBSaver"], 2),
        sqlitesaver_disk_ratio=round(ratios["SqliteSaver"], 2),
    )
    print("\ndisk / unique bytes: " + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items()))
    tables = table_fill(recorded.ours.store)
    benchmark.extra_info.update(tables=tables)
    for name, t in tables.items():
        print(
            f"  cpstore table {name}: {t['entries']} entries, {t['pages']} pages, "
            f"key+value {t['kv_bytes']} B = {t['kv_bytes'] / unique:.2f}x unique, "
            f"page fill {t['fill']:.2f}"
        )
    benchmark.pedantic(recorded.ours.disk, rounds=1, iterations=1)


def table_fill(store: Store) -> dict[str, dict[str, Any]]:
    """Per LMDB table of a cpstore store: entries, pages, key+value bytes, page fill.

    Where a disk ratio comes from: bytes that must be stored (key+value) against
    the pages holding them (random keys leave B-tree pages partly filled).
    """
    backend: Any = store.backend
    env = backend.env
    out: dict[str, dict[str, Any]] = {}
    with env.read() as txn:
        for name, db in env.dbs.items():
            st = txn.stat(db)
            pages = st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"]
            if not pages:
                continue
            with txn.cursor(db=db) as cur:
                kv = sum(len(k) + len(v) for k, v in cur)
            out[name] = {
                "entries": st["entries"],
                "pages": pages,
                "kv_bytes": kv,
                "fill": kv / (pages * st["psize"]),
            }
    return out
