"""The raw limit of group commit *with real writer threads* (issue 12), for bench_group_commit.

:func:`run_raw_grouped_threads`: 4 threads of one process, each building its own
step of the workload (encoding and hashing its 10 parts and its manifest: what
bench_group_commit's ``put_step`` does, split in two) and handing it to the
leanest group commit Python offers, a :class:`threading.Barrier` whose action
(run by the last writer to arrive) writes every writer's step in one
sync + metasync txn; the others are let go when that commit returned, i.e. after
its fsyncs. In the txn each step also reads each of its parts back (the
must-exist check a verified commit makes) and compare-and-sets its writer's head
key: the least a commit that checks what it acknowledges does in LMDB. No
interrupt handling, no failure isolation, no ordering: what is left is LMDB's
two syncs per txn, the CPU of the puts and checks, and the GIL hand-offs
between 4 threads, none of it cpstore's code. ``cpu``: a stand-in for cpstore's
own CPU per put (burnt by each writer before it queues, and per checkpoint in the
txn), so that cpstore's figure can be compared with the same CPU under the
leanest protocol (what remains is its group-commit protocol).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lmdb
import msgpack
import xxhash
from bench_store import MAP_SIZE, Workload

__all__ = ["run_raw_grouped_threads"]


def burn(us: float) -> None:
    """Hold the GIL for ``us`` microseconds (pure Python: no release)."""
    end = time.perf_counter() + us * 1e-6
    while time.perf_counter() < end:
        pass


def prepare_step(writer: bytes, step: int, state: dict[str, Any]) -> list[tuple[bytes, bytes]]:
    """One writer's step built outside the txn: (key, value) of its parts, then its manifest."""
    h, pack = xxhash.xxh3_128_digest, msgpack.packb
    rows = []
    parts = {}
    for name, value in state.items():
        enc = pack(value)
        parts[name] = key = h(enc)
        rows.append((key, enc))
    manifest = pack({"thread": writer, "parts": parts, "step": step})
    rows.append((h(manifest), manifest))
    return rows


def write_step(
    txn: Any, head: bytes, expected: bytes | None, rows: list[tuple[bytes, bytes]]
) -> bytes:
    """Write ``rows`` (parts write-once, then the manifest), read every part back (must exist),
    compare-and-set ``head`` from ``expected`` to the manifest's key; return that key."""
    got = txn.get(head)
    if (None if got is None else bytes(got)) != expected:
        raise RuntimeError("head moved")
    for key, value in rows[:-1]:
        txn.put(key, value, overwrite=False)
    for key, _ in rows[:-1]:
        if txn.get(key) is None:
            raise RuntimeError("part missing")
    mkey, manifest = rows[-1]
    txn.put(mkey, manifest)
    txn.put(head, mkey)
    return mkey


def run_raw_grouped_threads(
    path: Path, wls: list[Workload], *, cpu: tuple[float, float] | None = None
) -> float:
    """Seconds for ``len(wls)`` writer threads to put their steps through a barrier group
    commit (module docstring), from a common start to the last writer's end."""
    path.mkdir(parents=True, exist_ok=True)
    env = lmdb.open(str(path), map_size=MAP_SIZE, sync=True, metasync=True)
    n = len(wls)
    names = [f"writer{i}".encode() for i in range(n)]
    heads = [b"head/" + name for name in names]
    expected: list[bytes | None] = [None] * n
    queued: list[list[tuple[bytes, bytes]]] = [[] for _ in range(n)]
    build, work = cpu or (0.0, 0.0)

    def commit_group() -> None:  # the barrier's action: by the last writer to arrive
        with env.begin(write=True) as txn:
            for i in range(n):
                if work:
                    burn(work)
                expected[i] = write_step(txn, heads[i], expected[i], queued[i])

    group = threading.Barrier(n, action=commit_group, timeout=120)
    start = threading.Barrier(n + 1)

    def writer(i: int) -> None:
        start.wait()
        for step, state in enumerate(wls[i].states):
            if build:
                burn(build)
            queued[i] = prepare_step(names[i], step, state)
            group.wait()  # returns once the group's txn (and its fsyncs) returned

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(n)]
    try:
        for t in threads:
            t.start()
        start.wait()
        t0 = time.perf_counter()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - t0
        if group.broken:
            raise RuntimeError("a raw group commit failed")
        return elapsed
    finally:
        env.close()


def contenders(
    mktemp: Callable[[str], Path], wls: list[Workload], cpu: tuple[float, float]
) -> dict[str, Callable[[], float]]:
    """The bench's contenders: bare, and with ``cpu`` (cpstore's CPU per put) burnt."""
    return {
        "raw LMDB grouped 4 threads": lambda: run_raw_grouped_threads(mktemp("gcb"), wls),
        "raw LMDB grouped 4 threads +cpu": lambda: run_raw_grouped_threads(
            mktemp("gcb"), wls, cpu=cpu
        ),
    }
