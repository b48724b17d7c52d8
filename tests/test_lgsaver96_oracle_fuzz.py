"""lgsaver96: seeded random operations on a LangGraph saver against InMemorySaver.

Both savers get the same operations: puts (roots, continuations, forks from older
checkpoints, re-puts of an id under its own parent, parents never stored; four
namespaces; odd channel names; values of every serde type, lists past a segment grown
step by step as a message history, 70 kB and 300 kB bytes), ``put_writes`` (plain and
special channels, repeated task ids and paths, orphan ids), ``delete_thread``,
``delete_for_runs``, ``copy_thread`` (modelled on InMemorySaver: the target gets the
source's checkpoints and writes) and ``keep_latest`` (the newest of each namespace and
its writes). At random points every (thread, ns) is read both ways: ``get_tuple``
newest and by each id, ``list`` with limits, ``before`` and filters, the thread's and the
store's whole ``list`` (as a set: the namespaces come in another order), and
``get_delta_channel_history``. Values are picked so that InMemorySaver's
blob-per-version reads and a saver reading the parent's value agree (a version always
names one value); steps never go backwards (docs/langgraph.md, "Differences").
``python`` this module's :func:`run` with more seeds for a longer hunt.
"""

from __future__ import annotations

import datetime
import decimal
import multiprocessing
import random
import uuid
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Interrupt, Send
from pg_cluster import backend_store, backend_url, pg_cluster  # noqa: F401 - fixtures

from cpstore.langgraph import CpstoreSaver
from cpstore.store import Store

#: Processes of the multi-process run, each on threads of its own in one store.
PROCESSES = 3

THREADS = ("t", "u", "thread with space é")
NAMESPACES = ("", "sub:1", "sub:1|x:2", "n\u00e9:\U0001f600")
CHANNELS = ("a", "messages", "__start__", "branch:to:x", "ç/ünï", "x" * 80)
WRITE_CHANNELS = ("a", "messages", "__error__", "__interrupt__", "__resume__", "__scheduled__")
VALUES: tuple[Any, ...] = (
    0,
    1,
    "",
    "text",
    b"",
    b"\x00raw",
    [],
    {},
    [1, [2, {"k": None}]],
    {"nested": {"deep": [1, 2, 3]}},
    None,
    True,
    3.5,
    "y" * 5000,
)


def big(rng: random.Random) -> bytes:
    return rng.randbytes(rng.choice([70_000, 300_000]))


def odd(rng: random.Random) -> Any:
    """Values of the serde's extension types (msgpack ext codes inside arrays)."""
    return rng.choice(
        [
            (1, "two", (3,)),
            {1, 2, 3},
            frozenset({"a"}),
            datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC),
            uuid.UUID(int=rng.getrandbits(128)),
            decimal.Decimal("1.25"),
            Send("node", {"arg": rng.randrange(9)}),
            Interrupt(value={"q": "ok?"}, id="i" * 32),
            [Send("n", i) for i in range(3)],
            -(2**63),
            float("inf"),
        ]
    )


def grown(rng: random.Random, previous: Any) -> list[Any]:
    """A list past a segment (16 KiB), grown from ``previous`` when it is a list
    (a message history: appended to, now and then cut or rewritten)."""
    out = list(previous) if isinstance(previous, list) else []
    r = rng.random()
    if r < 0.1 and out:
        out = out[: rng.randrange(len(out))]
    elif r < 0.2 and out:
        out[rng.randrange(len(out))] = odd(rng)
    size = rng.choice([1, 50, 400])
    for _ in range(rng.randrange(1, 40)):
        out.append(
            rng.choice(
                [
                    {"role": "ai", "content": "m" * size, "n": rng.randrange(1000)},
                    "s" * size,
                    odd(rng),
                    [b"\x00" * size],
                    None,
                ]
            )
        )
    while len(repr(out)) < 20_000 and rng.random() < 0.9:
        out.append({"pad": "p" * 3000})
    return out


def plain(t: Any) -> Any:
    if t is None:
        return None
    return (t.config, t.checkpoint, t.metadata, t.parent_config, t.pending_writes)


def by_config(tuples: Any) -> list[Any]:
    """Tuples in an order of their own (the namespaces of a thread come in key order)."""
    return sorted((plain(t) for t in tuples), key=lambda p: repr(p[0]))


class Fuzz:
    """One run: the savers, the ids each (thread, ns) holds, per id its versions/values."""

    def __init__(
        self,
        saver: Any,
        seed: int,
        *,
        maintain: bool = True,
        prefix: str = "",
        check_rate: float = 0.07,
    ) -> None:
        self.maintain = maintain
        #: The share of steps that compare every read (the rest of 1 - 0.93: puts).
        self.check_rate = check_rate
        #: Names of this fuzz's own threads and run ids (others may share the store).
        self.prefix = prefix
        self.threads = tuple(prefix + t for t in THREADS)
        self.runs = [prefix + r for r in ("r1", "r2", "r3")]
        self.saver = saver
        self.memory = InMemorySaver()
        self.rng = random.Random(seed)
        self.n = 0
        #: (thread, ns) -> {id: (versions, values)}
        self.held: dict[tuple[str, str], dict[str, tuple[dict[str, str], dict[str, Any]]]] = {}
        self.version_of: dict[str, Any] = {}  # version string -> its value
        self.steps: dict[str, int] = {}
        self.metasteps: dict[str, int] = {}
        self.puts = 0
        self.checks = 0

    def _version(self, channel: str, value: Any) -> str:
        self.n += 1
        v = f"{self.n:032}.{self.rng.random():016}"
        self.version_of[v] = value
        return v

    def put(self) -> None:
        rng = self.rng
        thread, ns = rng.choice(self.threads), rng.choice(NAMESPACES)
        ids = self.held.setdefault((thread, ns), {})
        parent: str | None
        pick = rng.random()
        if not ids or pick < 0.1:
            parent = None
        elif pick < 0.7:
            parent = max(ids)
        elif pick < 0.9:
            parent = rng.choice(sorted(ids))
        else:
            parent = f"never-{rng.randrange(1000)}"
        base_versions: dict[str, str] = {}
        base_values: dict[str, Any] = {}
        if parent in ids:
            base_versions, base_values = dict(ids[parent][0]), dict(ids[parent][1])
        elif parent is not None and ids:
            base_versions, base_values = (dict(x) for x in ids[rng.choice(sorted(ids))])
        new_versions: dict[str, str] = {}
        for ch in rng.sample(CHANNELS, rng.randrange(0, 4)):
            r = rng.random()
            value: Any
            if r < 0.03:
                value = big(rng)
            elif r < 0.2:
                value = grown(rng, base_values.get(ch))
            elif r < 0.3:
                value = odd(rng)
            else:
                value = rng.choice(VALUES)
            v = self._version(ch, value)
            base_versions[ch] = v
            new_versions[ch] = v
            if rng.random() < 0.1:
                base_values.pop(ch, None)  # a new version, no value: the empty marker
                self.version_of[v] = _MISSING
            else:
                base_values[ch] = value
        step = self.steps[parent] + 1 if parent in ids else rng.choice([-1, 0, 3])
        if rng.random() < 0.05 and ids:
            # a re-put of a stored id, under its own parent and step (new values)
            cid = rng.choice(sorted(ids))
            parent = self.memory.storage[thread][ns][cid][2]
            step = self.metasteps[cid]
        else:
            self.n += 1
            cid = f"1ef{self.n:08d}-{rng.randrange(16):x}"
        cp: dict[str, Any] = dict(empty_checkpoint())
        cp["id"] = cid
        cp["channel_versions"] = dict(base_versions)
        cp["channel_values"] = dict(base_values)
        cp["versions_seen"] = {"n": {c: v for c, v in list(base_versions.items())[:1]}}
        if rng.random() < 0.2:
            cp["updated_channels"] = sorted(new_versions)
        conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
        if parent is not None:
            conf["checkpoint_id"] = parent
        meta: dict[str, Any] = {
            "step": step,
            "source": rng.choice(["loop", "input", "update", "fork"]),
            "run_id": rng.choice([*self.runs, None]),
            "k": rng.choice([None, 1, "1", [1]]),
            "parents": {ns: parent} if ns and parent else {},
        }
        if meta["run_id"] is None:
            del meta["run_id"]
        config = {"configurable": conf}
        got = self.saver.put(config, cp, meta, new_versions)
        want = self.memory.put(config, cp, meta, new_versions)
        assert got == want
        self.puts += 1
        ids[cid] = (base_versions, {k: v for k, v in base_values.items()})
        self.steps[cid] = max(meta["step"], 0)
        self.metasteps[cid] = meta["step"]

    def put_writes(self) -> None:
        rng = self.rng
        keys = [k for k, ids in self.held.items() if ids]
        if not keys:
            return
        thread, ns = rng.choice(keys)
        ids = self.held[thread, ns]
        cid = rng.choice(sorted(ids)) if rng.random() < 0.95 else "orphan"
        writes = [
            (rng.choice(WRITE_CHANNELS), rng.choice([*VALUES, odd(rng)]))
            for _ in range(rng.randrange(0, 4))
        ]
        task = rng.choice(["task-1", "task-2", "t\u00e9", ""])
        path = rng.choice(["", "~__pregel_pull, a", "~__pregel_push, 0"])
        config = {"configurable": {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": cid}}
        self.saver.put_writes(config, writes, task, path)
        self.memory.put_writes(config, writes, task, path)

    def delete_thread(self) -> None:
        thread = self.rng.choice(self.threads)
        self.saver.delete_thread(thread)
        self.memory.delete_thread(thread)
        for key in [k for k in self.held if k[0] == thread]:
            del self.held[key]

    def delete_for_runs(self) -> None:
        runs = self.rng.sample(self.runs, self.rng.randrange(1, 3))
        self.saver.delete_for_runs(runs)
        m = self.memory
        for thread in list(m.storage):
            for ns in list(m.storage[thread]):
                for cid, (_, meta_b, _) in list(m.storage[thread][ns].items()):
                    if m.serde.loads_typed(meta_b).get("run_id") in runs:
                        del m.storage[thread][ns][cid]
                        m.writes.pop((thread, ns, cid), None)
                        self.held[thread, ns].pop(cid, None)

    def copy_thread(self) -> None:
        src, dst = self.rng.sample(self.threads, 2)
        self.saver.copy_thread(src, dst)
        m = self.memory
        for ns, cps in list(m.storage[src].items()):
            for cid, saved in list(cps.items()):
                m.storage[dst][ns][cid] = saved
                m.writes.pop((dst, ns, cid), None)
                for inner, w in list(m.writes.get((src, ns, cid), {}).items()):
                    m.writes[(dst, ns, cid)][inner] = w
                self.held.setdefault((dst, ns), {})[cid] = self.held[src, ns][cid]
        for (t, ns, k, v), blob in list(m.blobs.items()):
            if t == src:
                m.blobs[(dst, ns, k, v)] = blob

    def keep_latest(self) -> None:
        thread = self.rng.choice(self.threads)
        self.saver.prune([thread])
        m = self.memory
        for ns, cps in list(m.storage[thread].items()):
            if not cps:
                continue
            newest = max(cps)
            for cid in [c for c in cps if c != newest]:
                del cps[cid]
                m.writes.pop((thread, ns, cid), None)
                self.held[thread, ns].pop(cid, None)

    def step(self) -> None:
        r = self.rng.random()
        if r < 0.55:
            self.put()
        elif r < 0.85:
            self.put_writes()
        elif r < 0.87:
            self.delete_thread()
        elif r < 0.89 and self.maintain:
            self.delete_for_runs()
        elif r < 0.91 and self.maintain:
            self.copy_thread()
        elif r < 0.93 and self.maintain:
            self.keep_latest()
        elif r < 0.93 + self.check_rate or not self.maintain:
            self.check()
        else:
            self.put()

    def check(self) -> None:
        self.checks += 1
        s, m = self.saver, self.memory
        for thread in self.threads:
            for ns in NAMESPACES:
                conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
                latest = {"configurable": conf}
                assert plain(s.get_tuple(latest)) == plain(m.get_tuple(latest)), conf
                for cid in sorted(self.held.get((thread, ns), {})):
                    c = {"configurable": {**conf, "checkpoint_id": cid}}
                    assert plain(s.get_tuple(c)) == plain(m.get_tuple(c)), c
                for last in [None, *sorted(self.held.get((thread, ns), {}))[-3:]]:
                    c = {"configurable": {**conf, "checkpoint_id": last}}
                    chans = [*CHANNELS[:3], "nowhere"]
                    got_h = s.get_delta_channel_history(config=c, channels=chans)
                    want_h = m.get_delta_channel_history(config=c, channels=chans)
                    assert got_h == want_h, c
                for limit in (None, 1, 3):
                    got = [plain(t) for t in s.list(latest, limit=limit)]
                    want = [plain(t) for t in m.list(latest, limit=limit)]
                    assert got == want, (conf, limit)
                ids = sorted(self.held.get((thread, ns), {}))
                if ids:
                    before = {"configurable": {"checkpoint_id": self.rng.choice(ids)}}
                    for flt in (
                        {"source": "loop"},
                        {"run_id": self.runs[0]},
                        {"k": None},
                        {"k": [1]},
                    ):
                        got = [plain(t) for t in s.list(latest, before=before, filter=flt)]
                        want = [plain(t) for t in m.list(latest, before=before, filter=flt)]
                        assert got == want, (conf, before, flt)
            whole = {"configurable": {"thread_id": thread}}
            got_all = by_config(s.list(whole))
            want_all = by_config(m.list(whole))
            assert got_all == want_all, thread
        if self.prefix:  # other processes' threads in the store: not this oracle's
            return
        got_every = by_config(s.list(None))
        want_every = by_config(m.list(None))
        assert got_every == want_every


_MISSING = object()


def run(saver: Any, seed: int, steps: int, **options: Any) -> Fuzz:
    """``steps`` random operations and a last check (``options``: :class:`Fuzz`'s)."""
    fuzz = Fuzz(saver, seed, **options)
    for _ in range(steps):
        fuzz.step()
    fuzz.check()
    return fuzz


@pytest.mark.parametrize("seed", range(2))
def test_random_operations_read_as_in_memory_saver(store: Store, seed: int) -> None:
    """200 random operations a seed (puts, writes, deletes, copies, prunes, checks),
    every check's reads equal to InMemorySaver's, and the store verifies."""
    rate = 0.02 if store.path.startswith("postgresql:") else 0.07  # a PostgreSQL read: a trip
    fuzz = run(CpstoreSaver(store), seed, 200, check_rate=rate)
    assert fuzz.puts > 30 and fuzz.checks > 2  # the premise: it did something
    assert store.verify().ok


def _worker(url: str, n: int, seed: int, steps: int) -> tuple[int, int]:
    """One process's fuzz on its own threads (``p<n>:``) and run ids: (puts, checks)."""
    with CpstoreSaver.from_conn_string(url) as saver:
        fuzz = run(saver, seed, steps, prefix=f"p{n}:", check_rate=0.02)
    return fuzz.puts, fuzz.checks


def test_processes_fuzzing_their_own_threads_on_one_store(url: str) -> None:
    """Three processes at once, each its own threads against its own InMemorySaver: the
    values are drawn from one small set, so the processes' checkpoints share stored
    objects while others delete, prune and copy threads (their sweeps) beside them."""
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(PROCESSES) as pool:
        steps = 100 if url.startswith("postgresql:") else 200  # a PostgreSQL read: a trip
        results = pool.starmap(_worker, [(url, n, 40 + n, steps) for n in range(PROCESSES)])
    assert all(puts > 20 and checks > 1 for puts, checks in results), results
    with CpstoreSaver.from_conn_string(url) as saver:
        assert saver.store.verify().ok
