"""lghunt102: the LangGraph saver under puts from several processes at once.

Spawn-context workers (tests/lghunt102_workers.py) put, and put writes, on the same
thread and namespace while others continue the same checkpoints, put one checkpoint id
at once, delete, copy and prune the thread, or are SIGKILLed mid-loop. Each put a
worker was acknowledged (its record arrived) is then read back exactly: checkpoint
values and versions, metadata, parent, writes; ``list`` holds each once, newest first,
every parent link resolving; the newest is the greatest acknowledged id; ``verify()``
is clean. Event-driven: every wait has a timeout, nothing sleeps to synchronise.
LMDB and PostgreSQL, ``sync`` and ``none``.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import random
import signal
import time
import uuid
from collections import defaultdict
from typing import Any

import pytest
from lghunt102_workers import (
    WAIT,
    Put,
    cfg,
    chain_writer,
    kill_worker,
    maintainer,
    one_put,
    repeater,
    same_id_worker,
    same_thread_worker,
)
from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures

import cpstore
from cpstore.langgraph import CpstoreSaver

CTX = multiprocessing.get_context("spawn")


def _collect(out: Any, workers: int, procs: list[Any] = ()) -> list[Any]:  # type: ignore[assignment]
    """Every message of ``workers`` workers up to each one's ``done`` (failing at once
    when one of ``procs`` died without it)."""
    got, done, deadline = [], 0, time.monotonic() + WAIT
    while done < workers:
        try:
            kind, body = out.get(timeout=2)
        except queue.Empty:
            dead = [(p.name, p.exitcode) for p in procs if p.exitcode not in (None, 0)]
            assert not dead, f"workers died: {dead}"
            assert time.monotonic() < deadline, "workers never finished"
            continue
        if kind == "done":
            done += 1
        elif kind != "ready":
            got.append((kind, body))
    return got


def _ready(out: Any, workers: int) -> None:
    for _ in range(workers):
        kind, _name = out.get(timeout=WAIT)
        assert kind == "ready", kind


def _joined(procs: list[Any]) -> None:
    for p in procs:
        p.join(WAIT)
        assert p.exitcode == 0, (p.name, p.exitcode)


def _writers(
    url: str,
    seed: int,
    threads: list[str],
    start: Any,
    out: Any,
    *,
    count: int = 2,
    n: int = 50,
    opts: dict[str, Any] | None = None,
) -> list[Any]:
    """``count`` writer processes ``w0``..., ``n`` puts each on ``threads`` (seeds from
    ``seed``), each on a saver of its own opened with ``opts``."""
    return [
        CTX.Process(
            target=same_thread_worker,
            args=(url, f"w{k}"),
            kwargs={
                "seed": seed + k,
                "n": n,
                "threads": threads,
                "start": start,
                "out": out,
                "opts": opts,
            },
            name=f"w{k}",
        )
        for k in range(count)
    ]


def _race(
    writers: list[Any], side: Any, start: Any, stop: Any, *, out: Any, side_out: Any
) -> tuple[list[Any], list[Any]]:
    """Start ``writers`` (reporting on ``out``) and ``side`` (on ``side_out``), let them go
    together, stop ``side`` once every writer is done: (the writers' messages, its)."""
    for p in [*writers, side]:
        p.start()
    _ready(out, len(writers))
    _ready(side_out, 1)
    start.set()
    got = _collect(out, len(writers), writers)
    stop.set()
    side_got = _collect(side_out, 1, [side])
    _joined([*writers, side])
    return got, side_got


def _reads_back(saver: CpstoreSaver, rec: Put, *, writes: str = "all") -> None:
    """``rec`` reads back by its id exactly as given (``writes``: ``all`` or ``subset``)."""
    thread, ns, cid, pid, values, versions, metadata, wrote = rec
    tup = saver.get_tuple(cfg(thread, ns, cid))
    assert tup is not None, f"acknowledged {thread}/{ns}/{cid} reads as None"
    assert tup.checkpoint["id"] == cid
    assert tup.checkpoint["channel_values"] == values, cid
    assert tup.checkpoint["channel_versions"] == versions, cid
    assert tup.metadata == metadata, (cid, tup.metadata, metadata)
    got_parent = None if tup.parent_config is None else tup.parent_config["configurable"]
    assert (got_parent and got_parent["checkpoint_id"]) == pid, (cid, got_parent, pid)
    got_writes = sorted(map(repr, tup.pending_writes or []))
    want = sorted(map(repr, wrote))
    if writes == "all":
        assert got_writes == want, (cid, got_writes, want)
    else:
        assert set(got_writes) <= set(want), (cid, got_writes, want)


def _list_consistent(saver: CpstoreSaver, thread: str, *, links: bool = True) -> list[Any]:
    """``thread``'s whole list: each id once, newest first per namespace, every parent
    link naming a listed checkpoint (``links``); returned."""
    listed = list(saver.list({"configurable": {"thread_id": thread}}))
    ids = [(t.config["configurable"]["checkpoint_ns"], t.checkpoint["id"]) for t in listed]
    assert len(ids) == len(set(ids)), f"duplicates in {thread}'s list"
    by_ns: dict[str, list[str]] = defaultdict(list)
    for ns, cid in ids:
        by_ns[ns].append(cid)
    for ns, cids in by_ns.items():
        assert cids == sorted(cids, reverse=True), f"{thread}/{ns}: not newest first"
        newest = saver.get_tuple(cfg(thread, ns))
        assert newest is not None and newest.checkpoint["id"] == cids[0], (thread, ns)
    if links:
        dangling = [
            (cid, t.parent_config["configurable"]["checkpoint_id"])
            for t, (ns, cid) in zip(listed, ids, strict=True)
            if t.parent_config is not None
            and (ns, t.parent_config["configurable"]["checkpoint_id"]) not in set(ids)
        ]
        assert not dangling, f"{thread}: parents not stored: {dangling}"
    return listed


@pytest.mark.parametrize("durability", ["sync", "none"])
def test_processes_putting_on_one_thread_lose_nothing(url: str, durability: str) -> None:
    """Three processes, 60 puts each (with writes) on two threads x two namespaces,
    half of them continuing whatever is newest (two processes forking one parent)."""
    opts: dict[str, Any] = {"durability": durability}
    cpstore.open(url, **opts).close()
    start, out = CTX.Event(), CTX.Queue()
    procs = _writers(url, 100, ["t", "u"], start, out, count=3, n=60, opts=opts)
    for p in procs:
        p.start()
    _ready(out, len(procs))
    start.set()
    got = _collect(out, len(procs), procs)
    _joined(procs)
    recs: list[Put] = [body for kind, body in got if kind == "put"]
    assert len(recs) == 180
    with CpstoreSaver.from_conn_string(url) as saver:
        for rec in recs:
            _reads_back(saver, rec)
        for thread in ("t", "u"):
            listed = _list_consistent(saver, thread)
            acked = {(r[1], r[2]) for r in recs if r[0] == thread}
            held = {(t.config["configurable"]["checkpoint_ns"], t.checkpoint["id"]) for t in listed}
            assert held == acked, (sorted(acked - held), sorted(held - acked))
            for ns in ("", "sub"):
                mine = [r[2] for r in recs if r[0] == thread and r[1] == ns]
                newest = saver.get_tuple(cfg(thread, ns))
                assert newest is not None and newest.checkpoint["id"] == max(mine)
        report = saver.store.verify()
        assert report.ok, report


def test_processes_putting_one_checkpoint_id_at_once_keep_one_whole(url: str) -> None:
    """Two processes put the same checkpoint id (a root, different content) at the same
    moment, 12 times: the id reads back as one of the two puts wholly (values, metadata),
    listed once, with the writes of both (put_writes of one id and task keep both)."""
    cpstore.open(url).close()
    ids = [str(uuid.UUID(int=(1 << 120) + i)) for i in range(12)]
    go = [CTX.Event() for _ in ids]
    out = CTX.Queue()
    procs = [
        CTX.Process(target=same_id_worker, args=(url, name, ids, go, out), name=name)
        for name in ("x", "y")
    ]
    for p in procs:
        p.start()
    _ready(out, 2)
    recs: list[Put] = []
    dones = 0
    for i in range(len(ids)):
        go[i].set()  # the next id once both puts of this one were acknowledged
        while len(recs) < 2 * (i + 1):
            kind, body = out.get(timeout=WAIT)
            if kind == "done":  # a worker's last put came before the other's
                dones += 1
            else:
                assert kind == "put", kind
                recs.append(body)
    assert _collect(out, 2 - dones) == []
    _joined(procs)
    with CpstoreSaver.from_conn_string(url) as saver:
        listed = _list_consistent(saver, "same")
        assert sorted(t.checkpoint["id"] for t in listed) == sorted(ids)
        for cid in ids:
            tup = saver.get_tuple(cfg("same", "", cid))
            assert tup is not None
            ours = [r for r in recs if r[2] == cid]
            whole = [
                r for r in ours if tup.checkpoint["channel_values"] == r[4] and tup.metadata == r[6]
            ]
            assert whole, f"{cid} reads as neither put: {tup.metadata}"
            both = sorted(repr(w) for r in ours for w in r[7])
            assert sorted(map(repr, tup.pending_writes or [])) == both
        report = saver.store.verify()
        assert report.ok, report


def test_puts_beside_delete_copy_and_prune_of_another_process(url: str) -> None:
    """Two processes put on thread ``a`` (deleted, pruned and copied meanwhile by a third)
    and ``b`` (only copied): every acknowledged put of ``b`` reads back exactly; a listed
    checkpoint of ``a`` is an acknowledged put with all its writes; each copy holds
    acknowledged checkpoints of its source whole; then a put of each writer on ``a``
    continuing its last acknowledged one reads back, and ``verify()`` is clean."""
    cpstore.open(url).close()
    start, stop, out, mout = CTX.Event(), CTX.Event(), CTX.Queue(), CTX.Queue()
    writers = _writers(url, 200, ["a", "b"], start, out)
    maint = CTX.Process(target=maintainer, args=(url, stop, start, mout), name="m")
    got, done = _race(writers, maint, start, stop, out=out, side_out=mout)
    recs: list[Put] = [body for kind, body in got if kind == "put"]
    by_id = {(r[0], r[1], r[2]): r for r in recs}
    assert any(kind == "delete" for kind, _ in done), done  # the premise: it raced
    with CpstoreSaver.from_conn_string(url) as saver:
        for rec in recs:
            if rec[0] == "b":
                _reads_back(saver, rec)
        _list_consistent(saver, "b")
        for t in _list_consistent(saver, "a", links=False):
            conf = t.config["configurable"]
            held = by_id.get(("a", conf["checkpoint_ns"], conf["checkpoint_id"]))
            assert held is not None, f"a lists {conf}, never acknowledged"
            _reads_back(saver, held)
        for kind, target in done:
            if kind not in ("copy", "copy_a", "copy_a_refused"):
                continue
            name = target if kind != "copy_a_refused" else target[0]
            source = "b" if kind == "copy" else "a"
            # b's copies: one scan of b, links whole; a's may hold a put whose parent a
            # delete took before it (recorded with that parent id, as InMemorySaver does)
            _list_consistent(saver, name, links=source == "b")
            for t in saver.list({"configurable": {"thread_id": name}}):
                conf = t.config["configurable"]
                src = by_id.get((source, conf["checkpoint_ns"], conf["checkpoint_id"]))
                assert src is not None, f"{name} holds {conf}, never acknowledged on {source}"
                _reads_back(saver, (name, *src[1:]), writes="subset")
        for n in range(2):  # each writer's last on a, continued by a new saver
            last = [r for r in recs if r[0] == "a" and r[6]["writer"] == f"w{n}"][-1]
            parent = saver.get_tuple(cfg("a", last[1], last[2]))
            rec = one_put(saver, ("a", last[1]), f"v{n}", 1000, parent)
            _reads_back(saver, rec)
        report = saver.store.verify()
        assert report.ok, report


@pytest.mark.parametrize(("seed", "durability"), [(0, "sync"), (1, "sync"), (2, "none")])
def test_a_writer_killed_mid_puts_loses_no_acknowledged_put(
    url: str, seed: int, durability: str
) -> None:
    """A process putting a chain (with writes) on thread ``kill`` is SIGKILLed once N
    (5-40) records arrived, while another process puts on ``t``: the N read back exactly,
    the other process finishes, ``verify()`` is clean and a new saver continues the chain
    (``durability="none"``: a process crash loses nothing either)."""
    opts: dict[str, Any] = {"durability": durability}
    cpstore.open(url).close()
    rng = random.Random(seed)
    n = rng.randint(5, 40)
    start, out, bout = CTX.Event(), CTX.Queue(), CTX.Queue()
    victim = CTX.Process(target=kill_worker, args=(url, "k", start, out, opts), name="k")
    other = CTX.Process(
        target=same_thread_worker,
        args=(url, "o"),
        kwargs={"seed": 7, "n": 40, "threads": ["t"], "start": start, "out": bout, "opts": opts},
        name="o",
    )
    victim.start()
    other.start()
    _ready(out, 1)
    _ready(bout, 1)
    start.set()
    recs: list[Put] = []
    while len(recs) < n:
        kind, body = out.get(timeout=WAIT)
        assert kind == "put", kind
        recs.append(body)
    assert victim.pid is not None
    os.kill(victim.pid, signal.SIGKILL)
    victim.join(WAIT)
    assert victim.exitcode == -signal.SIGKILL
    out.cancel_join_thread()  # what the killed child left in the pipe is never read
    others = [body for kind, body in _collect(bout, 1) if kind == "put"]
    _joined([other])
    with CpstoreSaver.from_conn_string(url) as saver:
        for rec in recs + others:
            _reads_back(saver, rec)
        _list_consistent(saver, "kill")
        _list_consistent(saver, "t")
        report = saver.store.verify()
        assert report.ok, report
        parent = saver.get_tuple(cfg("kill", "", recs[-1][2]))
        rec = one_put(saver, ("kill", ""), "after", n, parent)
        _reads_back(saver, rec)
        newest = saver.get_tuple(cfg("kill"))
        assert newest is not None and newest.checkpoint["id"] == rec[2]
    with pytest.raises(queue.Empty):
        bout.get_nowait()


def test_keep_latest_of_another_process_keeps_each_namespaces_newest_put(url: str) -> None:
    """Two processes put 50 each on thread ``a`` (two namespaces; roots, forks and
    continuations) while a third loops ``keep_latest`` of ``a``: each namespace's newest
    acknowledged put (the greatest id) is kept and reads back exactly, with its writes;
    every listed checkpoint is an acknowledged put, whole; ``verify()`` is clean."""
    cpstore.open(url).close()
    start, stop, out, pout = CTX.Event(), CTX.Event(), CTX.Queue(), CTX.Queue()
    writers = _writers(url, 600, ["a"], start, out)
    keeper = CTX.Process(target=repeater, args=(url, "prune", stop, start, pout), name="p")
    got, pruned = _race(writers, keeper, start, stop, out=out, side_out=pout)
    assert pruned and pruned[0][1] > 0, pruned  # the premise: it pruned
    recs: list[Put] = [body for kind, body in got if kind == "put"]
    by_id = {(r[1], r[2]): r for r in recs}
    with CpstoreSaver.from_conn_string(url) as saver:
        for ns in ("", "sub"):
            mine = [r for r in recs if r[1] == ns]
            if mine:
                _reads_back(saver, max(mine, key=lambda r: r[2]))
        for t in _list_consistent(saver, "a", links=False):
            conf = t.config["configurable"]
            held = by_id.get((conf["checkpoint_ns"], conf["checkpoint_id"]))
            assert held is not None, f"a lists {conf}, never acknowledged"
            _reads_back(saver, held)
        report = saver.store.verify()
        assert report.ok, report


def test_copies_onto_a_thread_another_process_puts_on_lose_nothing(url: str) -> None:
    """``S`` is a copy of ``T``'s first 10; one process puts 60 more on ``T`` (a chain)
    while another copies ``S`` onto ``T`` again and again (the same ids, the same
    content): every acknowledged put of ``T`` reads back exactly, ``T`` lists exactly
    them, ``verify()`` is clean."""
    recs: list[Put] = []
    with CpstoreSaver.from_conn_string(url) as saver:
        parent = None
        for i in range(10):
            recs.append(one_put(saver, ("T", ""), "w", i, parent))
            parent = saver.get_tuple(cfg("T", "", recs[-1][2]))
        saver.copy_thread("T", "S")
    start, stop, out, cout = CTX.Event(), CTX.Event(), CTX.Queue(), CTX.Queue()
    writer = CTX.Process(target=chain_writer, args=(url, start, out), name="w")
    copying = CTX.Process(target=repeater, args=(url, "copy", stop, start, cout), name="c")
    got, copies = _race([writer], copying, start, stop, out=out, side_out=cout)
    recs += [body for kind, body in got if kind == "put"]
    assert copies and copies[0][1] > 0, copies  # the premise: it copied
    assert len(recs) == 70
    with CpstoreSaver.from_conn_string(url) as saver:
        for rec in recs:
            _reads_back(saver, rec)
        listed = _list_consistent(saver, "T")
        assert sorted(t.checkpoint["id"] for t in listed) == sorted(r[2] for r in recs)
        report = saver.store.verify()
        assert report.ok, report
