"""Content-defined chunking, compression and chunk trees (issue 16), same-run ratios.

Figures (each prints a ``ISSUE16`` line; ``-s`` shows them):

- **chunker throughput**: ``chunk_digests`` (cut + XXH3-128 of every chunk)
  over one 64 MiB random buffer against python-xxhash's ``xxh3_128`` one-shot
  of the same buffer (target >= 0.1x), and the pure-Python reference on 1 MiB;
  repeats interleaved.
- **chunk parameters**: a growing bytes state (a transcript, ~1 KB of real
  text appended per step) cut with candidate (min, avg, max): stored chunk
  bytes per appended byte and chunks per MiB. The store defaults are the row
  with the least re-stored bytes whose chunk count stays moderate.
- **codec**: zstd bindings compressing and inflating one ~1 KB and one 64 KiB
  chunk of real text (zstandard, backports.zstd, pyzstd; absent ones skipped).
- **frame batch read**: the ~1,000 chunks of a 1,000-step chat history read
  verified one ``read_frame`` call each (the read path before) against one
  ``inflate_frames`` pass (now) and bare zstd ``decompress`` calls (the floor of
  the compressed-read ratio), compressed and stored frames, per frame.
- **chat workload** (1,000 and 2,000 steps, ``durability="none"``): one ~1 KB
  message of real text (benchmarks/chat_text.py) appended per step to a
  ``messages`` list part. Layout 3 (chunk trees, compressed frames) against
  layout 2 (fixed 64 KiB raw chunks, what cpstore wrote before) in the same
  run: bytes on disk / unique message bytes (target <= 2.0x), put time at
  steps 100/1000/2000 (median of the 21 puts around each), and whole-state
  reads of the last checkpoint, compressed vs uncompressed frames (target
  compressed within 1.5x), repeats interleaved.
- **chat put by route** (1,000 and 2,000 steps): the same history recorded
  three ways into three stores, interleaved step by step (the order rotated
  each step): a plain list through the reference encoder (``encode_value``,
  what the recorder did before), a plain list through the fast encoder (what
  a naive runtime gets now), and an :class:`cpstore.AppendLog` (one
  ``append`` per step, timed with the put). Put time at steps 100/1000/2000
  (median of the 21 puts around each, min-max) and the per-step ratios
  against the AppendLog route; all three write the same checkpoint ids.
- **chat by root version** (1,000 and 2,000 steps): the chat history recorded
  into two stores, root v1 (layout 3: every level's tail in the root) and
  root v2 (layout 4: level 1's tail and an upper-spine digest), interleaved
  step by step (order alternating): disk / unique for each, put time at steps
  100/1000/2000 (median of 21, min-max, per-step v2 / v1 ratio), whole-state
  read of the last checkpoint, repeats interleaved.
- **canonical encoder**: ``encode_fast`` against ``encode_value`` on the
  2,000-message history (same bytes; repeats interleaved).
- **str list put by route**: the same for immutable elements (a list of ~1 KB
  str): plain list vs AppendLog put, beside what encoding the list costs and
  what an identity check of the previous list's elements (plus the copy it
  would keep) would cost instead.
- **10 x 1 KB workload** (bench_store's issue-12 workload): layout 3 against
  layout 2, put and get interleaved, and disk / unique.

Run: ``.venv/bin/python -m pytest benchmarks/bench_chunk.py --benchmark-only -s``
(``CPSTORE_BENCH_SIZE=full`` adds the 2,000-step chat run).
"""

from __future__ import annotations

import contextlib
import importlib
import operator
import os
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from statistics import median
from typing import Any

import msgpack
import pytest
import xxhash
from bench_store import Comparison, interleave, make_workload
from chat_text import chat_states, messages
from pytest_benchmark.fixture import BenchmarkFixture

from cpstore.native import binding, chunking
from cpstore.native.append_log import AppendLog
from cpstore.native.binding import digest
from cpstore.native.canonical import encode_value
from cpstore.store import append_state, chunk_tree, codec
from cpstore.store import recorder as recorder_module
from cpstore.store.codec import encode_frame
from cpstore.store.facade import open as open_store
from cpstore.store.model import CHUNK_SIZE
from cpstore.store.objects import chunk_index
from cpstore.store.recorder import Recorder

MIB = 1 << 20


@pytest.fixture(scope="module")
def repeats(size: str) -> int:
    """Interleaved repeats per figure (at least 5)."""
    return max(5, int(os.environ.get("CPSTORE_BENCH_REPEATS", "5" if size == "quick" else "11")))


def _say(line: str) -> None:
    print(f"\nISSUE16 {line}", flush=True)


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


# -- chunker ------------------------------------------------------------------------


def test_chunker_throughput(benchmark: BenchmarkFixture, repeats: int) -> None:
    """chunk_digests over 64 MiB vs xxh3_128 one-shot (target >= 0.1x); reference on 1 MiB."""
    data = random.Random(16).randbytes(64 * MIB)
    small = data[:MIB]
    fig = interleave(
        benchmark,
        "chunk + digest 64 MiB",
        {
            "chunk_digests": lambda: _timed(lambda: binding.chunk_digests(data)),
            "xxh3_128 one-shot": lambda: _timed(lambda: xxhash.xxh3_128_digest(data)),
            "reference cut_points (1 MiB, x64)": lambda: (
                64 * _timed(lambda: chunking.cut_points(small))
            ),
        },
        max(3, repeats // 2),
        [
            Comparison("chunk_digests", "xxh3_128 one-shot", target=0.1),
            Comparison("chunk_digests", "reference cut_points (1 MiB, x64)"),
        ],
        items=64 * MIB,
    )
    pairs = [
        x / c for c, x in zip(fig.runs["chunk_digests"], fig.runs["xxh3_128 one-shot"], strict=True)
    ]
    ref = [
        r / c
        for c, r in zip(
            fig.runs["chunk_digests"], fig.runs["reference cut_points (1 MiB, x64)"], strict=True
        )
    ]
    gbs = [1 / t / 1e9 for t in fig.runs["chunk_digests"]]
    _say(
        f"chunker (load {os.getloadavg()[0]:.2f}): chunk_digests {median(gbs):.2f} GB/s; ratio "
        f"to xxh3_128 one-shot {median(pairs):.3f}x ({min(pairs):.3f}-{max(pairs):.3f}, "
        f"target >= 0.1); vs pure-Python reference {median(ref):.0f}x"
    )


PARAMS = [
    (256, 1024, 8192),
    (512, 2048, 16384),
    (1024, 4096, 32768),
    (2048, 8192, 65536),
    (4096, 16384, 131072),
    (8192, 32768, 262144),
]


#: Bytes a stored chunk costs beside its frame: key, LMDB node header, index entry.
PER_CHUNK = 17 + 8 + 16


def test_chunk_params_dedupe(benchmark: BenchmarkFixture) -> None:
    """Stored bytes (compressed, with per-chunk costs) per appended byte, per parameter set."""
    texts = [t.encode() for t in messages(400, seed=7)]
    results: dict[tuple[int, int, int], tuple[float, float]] = {}

    def run() -> None:
        for p in PARAMS:
            seen: set[bytes] = set()
            stored = 0
            data = b""
            chunks = 0
            for text in texts:
                data += text + b"\n"
                cuts, digests = binding.chunk_digests(data, *p)
                starts = [0, *cuts[:-1]]
                for i, (a, b) in enumerate(zip(starts, cuts, strict=True)):
                    key = digests[16 * i : 16 * i + 16]
                    if key not in seen:
                        seen.add(key)
                        # As stored: the compressed frame plus a per-chunk cost
                        # (17-byte key, LMDB node header, 16-byte index entry).
                        stored += len(encode_frame(data[a:b])) + PER_CHUNK
                chunks = len(cuts)
            results[p] = (stored / len(data), chunks / (len(data) / MIB))

    benchmark.pedantic(run, rounds=1, iterations=1)
    benchmark.extra_info["params"] = {str(k): v for k, v in results.items()}
    for p, (ratio, per_mib) in results.items():
        _say(f"params min/avg/max {p}: stored/appended {ratio:.2f}x, {per_mib:.0f} chunks/MiB")


# -- codec ------------------------------------------------------------------------------


def _codecs() -> dict[str, tuple[Callable[[bytes], bytes], Callable[[bytes, int], bytes]]]:
    out: dict[str, tuple[Callable[[bytes], bytes], Callable[[bytes, int], bytes]]] = {}
    with contextlib.suppress(ImportError):
        zstandard: Any = importlib.import_module("zstandard")
        zc, zd = zstandard.ZstdCompressor(level=3), zstandard.ZstdDecompressor()
        out[f"zstandard {zstandard.__version__}"] = (zc.compress, lambda c, n: zd.decompress(c))
    with contextlib.suppress(ImportError):
        bz: Any = importlib.import_module("backports.zstd")

        def bz_inflate(c: bytes, n: int) -> bytes:
            d = bz.ZstdDecompressor()
            return bytes(d.decompress(c, max_length=n))

        out["backports.zstd"] = (lambda b: bz.compress(b, level=3), bz_inflate)
    with contextlib.suppress(ImportError):
        pz: Any = importlib.import_module("pyzstd")
        out[f"pyzstd {pz.__version__}"] = (
            lambda b: pz.compress(b, 3),
            lambda c, n: pz.decompress(c),
        )
    return out


@pytest.mark.parametrize("chunk_bytes", [1024, 65536])
def test_codec_speed(benchmark: BenchmarkFixture, chunk_bytes: int, repeats: int) -> None:
    """Compress and inflate one real-text chunk per binding (2,000 calls each), interleaved."""
    text = " ".join(messages(chunk_bytes // 900 + 2, seed=3)).encode()[:chunk_bytes]
    contenders: dict[str, Callable[[], float]] = {}

    def compress(pack: Callable[[bytes], bytes]) -> Callable[[], float]:
        return lambda: _timed(lambda: [pack(text) for _ in range(2000)])

    def inflate(unpack: Callable[[bytes, int], bytes], packed: bytes) -> Callable[[], float]:
        return lambda: _timed(lambda: [unpack(packed, chunk_bytes) for _ in range(2000)])

    for name, (pack, unpack) in _codecs().items():
        packed = pack(text)
        assert unpack(packed, chunk_bytes) == text
        contenders[f"{name} compress"] = compress(pack)
        contenders[f"{name} inflate"] = inflate(unpack, packed)
    fig = interleave(
        benchmark, f"zstd {chunk_bytes} B", contenders, max(3, repeats // 2), [], items=2000
    )
    for name, runs in fig.runs.items():
        _say(
            f"codec {chunk_bytes} B {name}: {median(runs) * 1e6:.2f} us "
            f"({min(runs) * 1e6:.2f}-{max(runs) * 1e6:.2f})"
        )


def test_frame_batch_read(benchmark: BenchmarkFixture, repeats: int) -> None:
    """The chunks of a 1,000-step chat history: one verified read_frame call per frame
    (the read path before) vs one inflate_frames pass (now) vs bare zstd decompress calls
    (the floor), compressed and stored frames, interleaved."""
    states, _ = chat_states(1000)
    data = encode_value(states[-1]["messages"])
    tree = chunk_tree.build_tree(data, canonical=True)
    digests = b"".join(k[:16] for k, _, _ in tree.chunks)
    packed = [memoryview(encode_frame(data[a:b])) for _, a, b in tree.chunks]
    stored = [memoryview(encode_frame(data[a:b], compress=False)) for _, a, b in tree.chunks]
    keys = [k for k, _, _ in tree.chunks]
    dctx = codec.decoder()
    bodies = [v[5:] for v in packed]

    def one_by_one(frames: list[memoryview]) -> Callable[[], float]:
        return lambda: _timed(
            lambda: [codec.read_frame(k, v, "x", dctx) for k, v in zip(keys, frames, strict=True)]
        )

    def batch(frames: list[memoryview]) -> Callable[[], float]:
        def run() -> None:
            sizes = codec.frame_sizes(frames)
            assert sizes is not None
            assert codec.inflate_frames(frames, sizes, digests, dctx) is not None

        return lambda: _timed(run)

    fig = interleave(
        benchmark,
        f"{len(keys)} chat frames: verified read",
        {
            "zstd, read_frame each": one_by_one(packed),
            "zstd, inflate_frames": batch(packed),
            "zstd, bare decompress": lambda: _timed(lambda: list(map(dctx.decompress, bodies))),
            "stored, read_frame each": one_by_one(stored),
            "stored, inflate_frames": batch(stored),
        },
        repeats,
        [
            Comparison("zstd, inflate_frames", "zstd, read_frame each"),
            Comparison("stored, inflate_frames", "stored, read_frame each"),
        ],
        items=len(keys),
    )
    per = fig.runs  # per frame (items=)
    _say(
        f"frame reads, {len(keys)} chat frames (load {os.getloadavg()[0]:.2f}), us a frame: "
        + "; ".join(f"{k} {_spread(v, 1e6)}" for k, v in per.items())
    )
    gap = [
        z - s
        for z, s in zip(per["zstd, inflate_frames"], per["stored, inflate_frames"], strict=True)
    ]
    _say(
        f"frame reads: batch zstd - batch stored {_spread(gap, 1e6)} us a frame, against bare "
        f"decompress {_spread(per['zstd, bare decompress'], 1e6)} us (the floor)"
    )


# -- stores as layout 2 wrote them ----------------------------------------------------


def _layout2_blob(
    self: Recorder, data: bytes, chunked: dict[str, bytes], name: str, **_: Any
) -> bytes:
    """What cpstore wrote before layout 3: fixed 64 KiB raw chunks, a flat index."""
    if len(data) > CHUNK_SIZE:
        chunks, index = chunk_index(data)
        for chunk in chunks:
            self._chunks.append(self._stash(chunk))
        chunked[name] = self._stash(index)
        return digest(data)
    return self._stash(data)


@contextlib.contextmanager
def _layout(kind: str) -> Iterator[None]:
    """Record as layout 3 ("cdc"), layout 3 with uncompressed frames ("raw"), or layout 2."""
    saved_blob, saved_frame = Recorder._blob, getattr(chunk_tree, "encode_frame")  # noqa: B009

    def stored(data: bytes) -> bytes:
        return encode_frame(data, compress=False)

    try:
        if kind == "layout2":
            setattr(Recorder, "_blob", _layout2_blob)  # noqa: B010
        elif kind == "raw":
            setattr(chunk_tree, "encode_frame", stored)  # noqa: B010
        yield
    finally:
        setattr(Recorder, "_blob", saved_blob)  # noqa: B010
        setattr(chunk_tree, "encode_frame", saved_frame)  # noqa: B010


def _record_chat(path: Path, states: list[Any], kind: str) -> tuple[str, list[float], int]:
    with _layout(kind), open_store(path, durability="none") as st:
        rec = st.recorder("chat")
        times, cid = [], ""
        for step, state in enumerate(states):
            t0 = time.perf_counter()
            cid = rec.checkpoint(step, state)
            times.append(time.perf_counter() - t0)
        st.flush()
        return cid, times, st.disk_bytes()


def _around(times: list[float], step: int) -> float:
    return median(times[max(0, step - 11) : step + 10])


def test_chat_workload(
    benchmark: BenchmarkFixture,
    tmp_path_factory: pytest.TempPathFactory,
    chat_steps: int,
    repeats: int,
) -> None:
    """Disk / unique message bytes, put time by step, compressed vs uncompressed reads."""
    states, unique = chat_states(chat_steps)
    root = tmp_path_factory.mktemp("chat")
    recorded = {k: _record_chat(root / k, states, k) for k in ("cdc", "raw", "layout2")}
    stores = {k: open_store(root / k, readonly=True) for k in ("cdc", "raw")}
    want = states[-1]

    def reader(kind: str) -> Callable[[], float]:
        def run() -> float:
            t0 = time.perf_counter()
            with stores[kind].read(recorded[kind][0]) as cp:
                got = cp.state()
            elapsed = time.perf_counter() - t0
            assert got == want
            return elapsed

        return run

    try:
        fig = interleave(
            benchmark,
            f"chat {chat_steps}: whole-state read",
            {"compressed frames": reader("cdc"), "uncompressed frames": reader("raw")},
            repeats,
            [Comparison("compressed frames", "uncompressed frames", target=1 / 1.5)],
        )
    finally:
        for st in stores.values():
            st.close()
    slow = [
        c / r
        for c, r in zip(fig.runs["compressed frames"], fig.runs["uncompressed frames"], strict=True)
    ]
    steps = [s for s in (100, 1000, 2000) if s <= chat_steps]
    info: dict[str, Any] = {"unique_message_bytes": unique, "steps": chat_steps}
    for kind, (_, times, disk) in recorded.items():
        puts = {s: _around(times, s) for s in steps}
        info[kind] = {"disk": disk, "disk_ratio": disk / unique, "put_s": puts}
        _say(
            f"chat {chat_steps} steps, {kind}: disk {disk:,} B = {disk / unique:.2f}x unique "
            f"({unique:,} B); put " + ", ".join(f"@{s} {t * 1e3:.2f} ms" for s, t in puts.items())
        )
    _say(
        f"chat {chat_steps} steps (load {os.getloadavg()[0]:.2f}): compressed read / "
        f"uncompressed read {median(slow):.2f}x ({min(slow):.2f}-{max(slow):.2f}, target <= 1.5); "
        f"compressed read {_spread(fig.runs['compressed frames'], 1e3)} ms, uncompressed "
        f"{_spread(fig.runs['uncompressed frames'], 1e3)} ms"
    )
    benchmark.extra_info["chat"] = info


@pytest.fixture(scope="module", params=[1000, 2000])
def chat_steps(request: pytest.FixtureRequest, size: str) -> int:
    """Chat workload lengths: 1,000 always, 2,000 with CPSTORE_BENCH_SIZE=full."""
    steps = int(request.param)
    if steps > 1000 and size != "full" and not os.environ.get("CPSTORE_BENCH_CHAT2000"):
        pytest.skip("2,000-step chat run: CPSTORE_BENCH_SIZE=full or CPSTORE_BENCH_CHAT2000=1")
    return steps


def _spread(values: list[float], scale: float = 1.0) -> str:
    return f"{median(values) * scale:.2f} ({min(values) * scale:.2f}-{max(values) * scale:.2f})"


def test_chat_put_by_route(
    benchmark: BenchmarkFixture, tmp_path_factory: pytest.TempPathFactory, chat_steps: int
) -> None:
    """Put time by step: plain list (reference / fast encoder) vs AppendLog, interleaved."""
    states, _ = chat_states(chat_steps)
    texts = [state["messages"][-1] for state in states]
    root = tmp_path_factory.mktemp("routes")
    routes = ("plain list, reference encoder", "plain list, fast encoder", "AppendLog")
    times: dict[str, list[float]] = {r: [] for r in routes}
    fast = getattr(recorder_module, "encode_fast")  # noqa: B009

    def run() -> None:
        with contextlib.ExitStack() as stack:
            stores = [
                stack.enter_context(open_store(root / str(i), durability="none")) for i in range(3)
            ]
            recs = [st.recorder("chat") for st in stores]
            log = AppendLog()
            try:
                for step, state in enumerate(states):
                    ids = []
                    for k in [(step + j) % 3 for j in range(3)]:
                        route = routes[k]
                        encoder = encode_value if k == 0 else fast
                        setattr(recorder_module, "encode_fast", encoder)  # noqa: B010
                        t0 = time.perf_counter()
                        if k == 2:
                            log.append(texts[step])
                            ids.append(recs[k].checkpoint(step, {"messages": log}))
                        else:
                            ids.append(recs[k].checkpoint(step, state))
                        times[route].append(time.perf_counter() - t0)
                    assert len(set(ids)) == 1, step  # the same checkpoint every route
            finally:
                setattr(recorder_module, "encode_fast", fast)  # noqa: B010

    benchmark.pedantic(run, rounds=1, iterations=1)
    load = os.getloadavg()[0]
    steps = [s for s in (100, 1000, 2000) if s <= chat_steps]
    info: dict[str, Any] = {"load": load}
    for s in steps:
        lo, hi = max(0, s - 11), s + 10
        window = {r: times[r][lo:hi] for r in routes}
        base = window["AppendLog"]
        parts = [f"{r} {_spread(window[r], 1e3)} ms" for r in routes]
        ratios = [
            f"{r} / AppendLog {_spread([a / b for a, b in zip(window[r], base, strict=True)])}x"
            for r in routes[:2]
        ]
        info[str(s)] = {r: median(window[r]) for r in routes}
        _say(f"chat put @{s} ({chat_steps} steps, load {load:.2f}): " + "; ".join(parts))
        _say(f"chat put @{s} ratios: " + "; ".join(ratios))
    benchmark.extra_info["put_by_route"] = info


def _pack_root_v1(head: bytes, size: int, spine: list[bytes], out: dict[bytes, bytes]) -> bytes:
    """What layout 3 wrote: a root map holding every level's tail (root v1, still read)."""
    root: bytes = msgpack.packb({"head": head, "size": size, "spine": spine}, use_bin_type=True)
    out[digest(root)] = root
    return digest(root)


def test_chat_root_versions(
    benchmark: BenchmarkFixture,
    tmp_path_factory: pytest.TempPathFactory,
    chat_steps: int,
    repeats: int,
) -> None:
    """Root v1 (layout 3) vs root v2 (layout 4): disk, put time by step and read, interleaved."""
    states, unique = chat_states(chat_steps)
    root = tmp_path_factory.mktemp("roots")
    kinds = ("root v1", "root v2")
    packers = {"root v1": _pack_root_v1, "root v2": getattr(chunk_tree, "pack_root")}  # noqa: B009
    times: dict[str, list[float]] = {k: [] for k in kinds}
    cids: dict[str, str] = {}
    disk: dict[str, int] = {}
    with contextlib.ExitStack() as stack:
        stores = {
            k: stack.enter_context(open_store(root / k[-2:], durability="none")) for k in kinds
        }
        recs = {k: stores[k].recorder("chat") for k in kinds}
        try:
            for step, state in enumerate(states):
                for k in kinds if step % 2 else kinds[::-1]:
                    setattr(chunk_tree, "pack_root", packers[k])  # noqa: B010
                    setattr(append_state, "pack_root", packers[k])  # noqa: B010
                    t0 = time.perf_counter()
                    cids[k] = recs[k].checkpoint(step, state)
                    times[k].append(time.perf_counter() - t0)
        finally:
            setattr(chunk_tree, "pack_root", packers["root v2"])  # noqa: B010
            setattr(append_state, "pack_root", packers["root v2"])  # noqa: B010
        for k in kinds:
            stores[k].flush()
            disk[k] = stores[k].disk_bytes()
    readers = {k: open_store(root / k[-2:], readonly=True) for k in kinds}
    want = states[-1]

    def reader(kind: str) -> Callable[[], float]:
        def run() -> float:
            t0 = time.perf_counter()
            with readers[kind].read(cids[kind]) as cp:
                got = cp.state()
            elapsed = time.perf_counter() - t0
            assert got == want
            return elapsed

        return run

    try:
        fig = interleave(
            benchmark,
            f"chat {chat_steps}: whole-state read by root version",
            {k: reader(k) for k in kinds},
            repeats,
            [Comparison("root v2", "root v1")],
        )
    finally:
        for st in readers.values():
            st.close()
    load = os.getloadavg()[0]
    info: dict[str, Any] = {"load": load, "unique": unique}
    for k in kinds:
        info[k] = {"disk": disk[k], "disk_ratio": disk[k] / unique}
    _say(
        f"chat {chat_steps} steps by root version (load {load:.2f}): disk root v1 "
        f"{disk['root v1']:,} B = {disk['root v1'] / unique:.2f}x unique, root v2 "
        f"{disk['root v2']:,} B = {disk['root v2'] / unique:.2f}x "
        f"(saves {(disk['root v1'] - disk['root v2']) / unique:.2f}x, "
        f"{(disk['root v1'] - disk['root v2']) / chat_steps:.0f} B a step)"
    )
    reads = [a / b for a, b in zip(fig.runs["root v2"], fig.runs["root v1"], strict=True)]
    _say(
        f"chat {chat_steps} whole-state read: root v2 {_spread(fig.runs['root v2'], 1e3)} ms, "
        f"root v1 {_spread(fig.runs['root v1'], 1e3)} ms, v2 / v1 {_spread(reads)}x"
    )
    for s in [s for s in (100, 1000, 2000) if s <= chat_steps]:
        lo, hi = max(0, s - 11), s + 10
        v1, v2 = times["root v1"][lo:hi], times["root v2"][lo:hi]
        ratio = _spread([b / a for a, b in zip(v1, v2, strict=True)])
        info[str(s)] = {"v1": median(v1), "v2": median(v2)}
        _say(
            f"chat put @{s} by root version: root v1 {_spread(v1, 1e3)} ms, root v2 "
            f"{_spread(v2, 1e3)} ms, v2 / v1 {ratio}x"
        )
    benchmark.extra_info["root_versions"] = info


def test_canonical_encoder_speed(benchmark: BenchmarkFixture, repeats: int) -> None:
    """encode_fast vs encode_value on the 2,000-message chat history (same bytes), interleaved."""
    states, _ = chat_states(2000)
    value = states[-1]["messages"]
    fast = getattr(recorder_module, "encode_fast")  # noqa: B009
    assert fast(value) == encode_value(value)
    fig = interleave(
        benchmark,
        "canonical encoding, 2,000 chat messages",
        {
            "encode_fast": lambda: _timed(lambda: fast(value)),
            "encode_value": lambda: _timed(lambda: encode_value(value)),
        },
        repeats,
        [Comparison("encode_fast", "encode_value")],
    )
    r = [v / f for f, v in zip(fig.runs["encode_fast"], fig.runs["encode_value"], strict=True)]
    _say(
        f"canonical encoding of 2,000 chat messages (load {os.getloadavg()[0]:.2f}): "
        f"encode_fast {_spread(fig.runs['encode_fast'], 1e3)} ms, encode_value "
        f"{_spread(fig.runs['encode_value'], 1e3)} ms; encode_value / encode_fast "
        f"{_spread(r)}x"
    )


def test_str_list_put_by_route(
    benchmark: BenchmarkFixture, tmp_path_factory: pytest.TempPathFactory, chat_steps: int
) -> None:
    """Immutable elements (a list of str): plain list vs AppendLog put, and what an
    identity check of the previous list's elements would cost against encoding them."""
    texts = messages(chat_steps)
    root = tmp_path_factory.mktemp("strs")
    routes = ("plain list of str", "AppendLog", "encode_fast(list)", "identity check + copy")
    times: dict[str, list[float]] = {r: [] for r in routes}

    def run() -> None:
        with (
            open_store(root / "a", durability="none") as a,
            open_store(root / "b", durability="none") as b,
        ):
            ra, rb = a.recorder("s"), b.recorder("s")
            log = AppendLog()
            hist: list[str] = []
            prev: list[str] = []
            for step, text in enumerate(texts):
                hist = [*hist, text]
                for k in [(step + j) % 4 for j in range(4)]:
                    t0 = time.perf_counter()
                    if k == 0:
                        ra.checkpoint(step, {"m": hist})
                    elif k == 1:
                        log.append(text)
                        rb.checkpoint(step, {"m": log})
                    elif k == 2:
                        recorder_module.encode_fast(hist)  # type: ignore[attr-defined]
                    else:
                        same = all(map(operator.is_, prev, hist))
                        prev = list(hist) if same else []
                    times[routes[k]].append(time.perf_counter() - t0)

    benchmark.pedantic(run, rounds=1, iterations=1)
    load = os.getloadavg()[0]
    for s in [s for s in (100, 1000, 2000) if s <= chat_steps]:
        lo, hi = max(0, s - 11), s + 10
        _say(
            f"str list put @{s} ({chat_steps} steps, load {load:.2f}): "
            + "; ".join(f"{r} {_spread(times[r][lo:hi], 1e3)} ms" for r in routes)
        )


# -- the issue-12 10 x 1 KB workload: no worse than before ----------------------------


def test_ten_parts_workload_no_worse(
    benchmark: BenchmarkFixture, tmp_path_factory: pytest.TempPathFactory, repeats: int
) -> None:
    """Layout 3 vs layout 2 on 300 steps of 10 x 1 KB parts: put, get, disk / unique."""
    wl = make_workload(300)
    root = tmp_path_factory.mktemp("ten")
    turn = [0]
    disks: dict[str, int] = {}
    ids: dict[str, str] = {}

    def putter(kind: str) -> Callable[[], float]:
        def run() -> float:
            turn[0] += 1
            path = root / f"{kind}{turn[0]}"
            with _layout(kind), open_store(path, durability="none") as st:
                rec = st.recorder("t")
                t0 = time.perf_counter()
                for step, state in enumerate(wl.states):
                    ids[kind] = rec.checkpoint(step, state)
                st.flush()
                elapsed = time.perf_counter() - t0
                disks[kind] = st.disk_bytes()
                ids[kind + "path"] = str(path)
            return elapsed

        return run

    put = interleave(
        benchmark,
        "10 x 1 KB put",
        {"layout 3": putter("cdc"), "layout 2": putter("layout2")},
        repeats,
        [Comparison("layout 3", "layout 2", target=1 / 1.1)],
        items=wl.steps,
    )
    stores = {k: open_store(ids[k + "path"], readonly=True) for k in ("cdc", "layout2")}

    def getter(kind: str) -> Callable[[], float]:
        def run() -> float:
            t0 = time.perf_counter()
            for _ in range(200):
                with stores[kind].read(ids[kind]) as cp:
                    cp.state()
            return time.perf_counter() - t0

        return run

    try:
        # pytest-benchmark times one figure per test: the gets are paired by hand,
        # the order rotated each repeat as interleave() does.
        gets: dict[str, list[float]] = {"layout 3": [], "layout 2": []}
        for turn_ in range(repeats):
            order = [("layout 3", "cdc"), ("layout 2", "layout2")][:: 1 if turn_ % 2 else -1]
            for label, kind in order:
                gets[label].append(getter(kind)() / 200)
    finally:
        for st in stores.values():
            st.close()
    benchmark.extra_info["get"] = gets
    for name, runs in (("put", put.runs), ("get", gets)):
        r = [a / b for a, b in zip(runs["layout 3"], runs["layout 2"], strict=True)]
        _say(
            f"10x1KB {name}: layout 3 / layout 2 time {median(r):.3f}x "
            f"({min(r):.3f}-{max(r):.3f}, target <= 1.10)"
        )
    unique = wl.unique_bytes()
    _say(
        f"10x1KB disk / unique: layout 3 {disks['cdc'] / unique:.2f}x, "
        f"layout 2 {disks['layout2'] / unique:.2f}x (target <= 2.0)"
    )
