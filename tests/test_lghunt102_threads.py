"""lghunt102: the LangGraph saver under puts from several threads and asyncio tasks.

Threads of one process put on the same threads and namespaces, three through one
shared saver (its lock serializes them) and three through savers of their own on the
same store (their commits race as processes' do), half continuing whatever is newest;
then asyncio tasks do the same through one saver's async twins. Every acknowledged put
reads back exactly, ``list`` is consistent and ``verify()`` clean (the checks of
tests/test_lghunt102_processes.py). LMDB and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import queue
import random
import threading
from typing import Any

from lghunt102_workers import WAIT, Put, aone_put, cfg, one_put, put_loop
from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures
from test_lghunt102_processes import _list_consistent, _reads_back

import cpstore
from cpstore.langgraph import AsyncCpstoreSaver, CpstoreSaver


def _check(saver: CpstoreSaver, recs: list[Put], threads: list[str]) -> None:
    for rec in recs:
        _reads_back(saver, rec)
    for thread in threads:
        listed = _list_consistent(saver, thread)
        acked = {(r[1], r[2]) for r in recs if r[0] == thread}
        held = {(t.config["configurable"]["checkpoint_ns"], t.checkpoint["id"]) for t in listed}
        assert held == acked, (sorted(acked - held), sorted(held - acked))
    report = saver.store.verify()
    assert report.ok, report


def test_threads_putting_on_one_thread_lose_nothing(url: str) -> None:
    out: queue.Queue[Any] = queue.Queue()
    errors: list[BaseException] = []
    with cpstore.open(url) as st:
        shared = CpstoreSaver(st)
        savers = [shared] * 3 + [CpstoreSaver(st) for _ in range(3)]
        gate = threading.Barrier(len(savers), timeout=WAIT)

        def work(n: int) -> None:
            try:
                gate.wait()
                put_loop(savers[n], f"h{n}", seed=300 + n, n=30, threads=["t", "u"], out=out)
            except BaseException as e:  # reported below, with the thread's name
                errors.append(e)

        workers = [threading.Thread(target=work, args=(n,)) for n in range(len(savers))]
        for w in workers:
            w.start()
        for w in workers:
            w.join(WAIT)
            assert not w.is_alive(), "a thread never finished"
        assert not errors, errors
        recs: list[Put] = []
        while not out.empty():
            kind, body = out.get_nowait()
            assert kind == "put", kind
            recs.append(body)
        assert len(recs) == 30 * len(savers)
        _check(CpstoreSaver(st), recs, ["t", "u"])


async def _tasks(url: str, tasks: int, n: int) -> list[Put]:
    async with AsyncCpstoreSaver.from_conn_string(url) as saver:
        gate = asyncio.Event()

        async def task(k: int) -> list[Put]:
            rng = random.Random(400 + k)
            await asyncio.wait_for(gate.wait(), WAIT)
            recs: list[Put] = []
            mine: dict[tuple[str, str], str] = {}
            for i in range(n):
                where = (rng.choice(["t", "u"]), rng.choice(["", "sub"]))
                how = rng.random()
                if how < 0.1:
                    parent = None
                elif how < 0.55 and where in mine:
                    parent = await saver.aget_tuple(cfg(*where, mine[where]))
                else:
                    parent = await saver.aget_tuple(cfg(*where))
                rec = await aone_put(saver, where, f"a{k}", i, parent)
                mine[where] = rec[2]
                recs.append(rec)
            return recs

        running = [asyncio.create_task(task(k)) for k in range(tasks)]
        gate.set()
        done = await asyncio.wait_for(asyncio.gather(*running), WAIT)
        return [r for recs in done for r in recs]


def test_asyncio_tasks_putting_on_one_thread_lose_nothing(url: str) -> None:
    recs = asyncio.run(_tasks(url, 6, 25))
    assert len(recs) == 150
    with CpstoreSaver.from_conn_string(url) as saver:
        _check(saver, recs, ["t", "u"])


def test_threads_of_one_saver_put_beside_its_deletes_copies_and_prunes(url: str) -> None:
    """Three threads put on ``a`` and ``b`` through one saver while a fourth, through the
    same saver, loops ``delete_thread(a)``, ``delete_for_runs`` of ``a``'s runs,
    ``keep_latest`` of ``a`` and ``copy_thread(b, c<k>)`` (the saver's own caches beside
    its own maintenance): ``b`` loses nothing, a listed checkpoint of ``a`` is an
    acknowledged put with all its writes, each copy is acknowledged puts of ``b``
    whole, and a put continuing each writer's last on ``a`` reads back."""
    out: queue.Queue[Any] = queue.Queue()
    errors: list[BaseException] = []
    stop = threading.Event()
    with cpstore.open(url) as st:
        saver = CpstoreSaver(st)
        gate = threading.Barrier(4, timeout=WAIT)
        copies: list[str] = []

        def work(n: int) -> None:
            try:
                gate.wait()
                put_loop(saver, f"h{n}", seed=500 + n, n=30, threads=["a", "b"], out=out)
            except BaseException as e:  # reported below
                errors.append(e)

        def maintain() -> None:
            try:
                gate.wait()
                k = 0
                while not stop.is_set() and k < 400:
                    op = k % 4
                    if op == 0:
                        saver.delete_thread("a")
                    elif op == 1:
                        saver.delete_for_runs([f"run-a-{k % 3}"])
                    elif op == 2:
                        saver.prune(["a"], strategy="keep_latest")
                    else:
                        saver.copy_thread("b", f"c{k}")
                        copies.append(f"c{k}")
                    k += 1
            except BaseException as e:  # reported below
                errors.append(e)

        workers = [threading.Thread(target=work, args=(n,)) for n in range(3)]
        keeper = threading.Thread(target=maintain)
        for w in [*workers, keeper]:
            w.start()
        for w in workers:
            w.join(WAIT)
            assert not w.is_alive(), "a writer never finished"
        stop.set()
        keeper.join(WAIT)
        assert not keeper.is_alive(), "the maintenance thread never finished"
        assert not errors, errors
        recs: list[Put] = []
        while not out.empty():
            kind, body = out.get_nowait()
            assert kind == "put", kind
            recs.append(body)
        by_id = {(r[0], r[1], r[2]): r for r in recs}
        for rec in recs:
            if rec[0] == "b":
                _reads_back(saver, rec)
        _list_consistent(saver, "b")
        for t in _list_consistent(saver, "a", links=False):
            conf = t.config["configurable"]
            held = by_id.get(("a", conf["checkpoint_ns"], conf["checkpoint_id"]))
            assert held is not None, f"a lists {conf}, never acknowledged"
            _reads_back(saver, held)
        for name in copies:
            for t in _list_consistent(saver, name):
                conf = t.config["configurable"]
                src = by_id.get(("b", conf["checkpoint_ns"], conf["checkpoint_id"]))
                assert src is not None, f"{name} holds {conf}, never acknowledged on b"
                _reads_back(saver, (name, *src[1:]), writes="subset")
        for n in range(3):
            last = [r for r in recs if r[0] == "a" and r[6]["writer"] == f"h{n}"][-1]
            parent = saver.get_tuple(cfg("a", last[1], last[2]))
            _reads_back(saver, one_put(saver, ("a", last[1]), f"v{n}", 1000, parent))
        report = st.verify()
        assert report.ok, report
