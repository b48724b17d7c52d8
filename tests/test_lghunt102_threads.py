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

from lghunt102_workers import WAIT, Put, aone_put, cfg, put_loop
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
