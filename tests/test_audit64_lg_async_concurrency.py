"""audit64: the async saver under many tasks and several processes on one store.

Three processes (tests/audit64_async_writer.py) each run seven asyncio tasks at once:
three chains on threads of their own, four on one shared thread (two namespaces; every
chain a fork of its own: LangGraph's same-thread semantics), with pending writes, while
this process lists and reads the shared thread in a loop. Every acknowledged checkpoint
and write reads back with its value; no read returns another thread's or namespace's
tuple; ``list`` is newest first per namespace (descending checkpoint id) and holds
exactly what was acknowledged; ``get_tuple`` without an id is the namespace's newest.
LMDB and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures
from test_audit64_lg_async_cancel import _checkpoint

import cpstore
from cpstore.errors import StoreClosedError
from cpstore.langgraph import AsyncCpstoreSaver

_WRITER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "audit64_async_writer.py")


def _conf(thread: str, ns: str | None, cid: str | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {"thread_id": thread}
    if ns is not None:
        conf["checkpoint_ns"] = ns
    if cid is not None:
        conf["checkpoint_id"] = cid
    return {"configurable": conf}


def _check_isolated(tup: Any, thread: str, ns: str | None) -> None:
    conf = tup.config["configurable"]
    assert conf["thread_id"] == thread, conf
    value = tup.checkpoint["channel_values"]["x"]
    assert value.split("/")[1] == thread, value
    if ns is not None:
        assert conf["checkpoint_ns"] == ns, conf
    assert value.split("/")[2] == conf["checkpoint_ns"], (value, conf)


def test_tasks_and_processes_put_and_read_one_store(url: str, tmp_path: Path) -> None:
    cpstore.open(url).close()
    start = tmp_path / "start"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = [
        subprocess.Popen(
            [sys.executable, _WRITER, url, f"w{i}", str(start)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in range(3)
    ]

    async def reads() -> None:
        async with AsyncCpstoreSaver.from_conn_string(url) as saver:
            start.touch()
            while any(p.poll() is None for p in procs):
                for ns in ("", "sub", None):
                    ids = []
                    async for tup in saver.alist(_conf("shared", ns)):
                        _check_isolated(tup, "shared", ns)
                        ids.append(
                            (tup.config["configurable"]["checkpoint_ns"], tup.checkpoint["id"])
                        )
                    if ns is not None:
                        assert ids == sorted(ids, reverse=True)
                    got = await saver.aget_tuple(_conf("shared", ns))
                    if got is not None:
                        _check_isolated(got, "shared", ns or "")
                await asyncio.sleep(0.01)

    asyncio.run(reads())
    acked: list[Any] = []
    for p in procs:
        out, err = p.communicate()
        lines = out.split("\n")
        assert p.returncode == 0 and lines[-2] == "done", err[-3000:]
        acked += [json.loads(line) for line in lines[:-2]]
    puts = [a for a in acked if a[0] != "write"]
    writes = {(a[1], a[2], a[3]): a[4] for a in acked if a[0] == "write"}
    assert len(puts) == 3 * 7 * 8 and len(writes) == len(puts)

    async def final() -> None:
        async with AsyncCpstoreSaver.from_conn_string(url) as saver:
            for thread, ns, cid, value in puts:
                tup = await saver.aget_tuple(_conf(thread, ns, cid))
                assert tup is not None, (thread, ns, cid)
                assert tup.checkpoint["channel_values"] == {"x": value}
                assert [(w[1], w[2]) for w in tup.pending_writes or []] == [("x", value)]
            for thread, ns in {(t, n) for t, n, _, _ in puts}:
                want = sorted((c for t, n, c, _ in puts if (t, n) == (thread, ns)), reverse=True)
                listed = [tup.checkpoint["id"] async for tup in saver.alist(_conf(thread, ns))]
                assert listed == want, (thread, ns)
                newest = await saver.aget_tuple(_conf(thread, ns))
                assert newest is not None and newest.checkpoint["id"] == want[0]
            # no namespace named: namespaces in descending name order, each newest first
            whole = [
                (tup.config["configurable"]["checkpoint_ns"], tup.checkpoint["id"])
                async for tup in saver.alist(_conf("shared", None))
            ]
            assert whole == sorted(((n, c) for t, n, c, _ in puts if t == "shared"), reverse=True)
            everything = [tup async for tup in saver.alist(None)]
            assert len(everything) == len(puts)
            assert saver.store.verify().ok

    asyncio.run(final())


def test_other_loops_threads_and_a_closed_store(url: str) -> None:
    """A saver made in one loop works in another loop on another thread (beside sync
    calls from a thread); once its store is closed every async method is
    StoreClosedError and nothing acknowledged is lost."""
    st = cpstore.open(url)

    async def make() -> tuple[AsyncCpstoreSaver, str]:
        saver = AsyncCpstoreSaver(st)
        done = await saver.aput(_conf("t", ""), *_checkpoint(1))
        return saver, done["configurable"]["checkpoint_id"]

    saver, first = asyncio.run(make())

    async def elsewhere(i: int) -> str:
        loop = asyncio.get_running_loop()
        sync = loop.run_in_executor(None, saver.put, _conf(f"s{i}", ""), *_checkpoint(10 + i))
        done = await saver.aput(_conf("t", "", first), *_checkpoint(2 + i))
        await sync
        return str(done["configurable"]["checkpoint_id"])

    got: list[str] = []
    threads = [
        threading.Thread(target=lambda i=i: got.append(asyncio.run(elsewhere(i)))) for i in range(3)
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(got) == 3
    st.close()
    calls: list[Any] = [
        lambda: saver.aget_tuple(_conf("t", "")),
        lambda: saver.aput(_conf("t", "", first), *_checkpoint(9)),
        lambda: saver.aput_writes(_conf("t", "", first), [("x", 1)], "k"),
        lambda: saver.adelete_thread("t"),
        lambda: saver.acopy_thread("t", "u"),
        lambda: saver.aprune(["t"]),
        lambda: saver.adelete_for_runs(["r"]),
        lambda: saver.aget_delta_channel_history(config=_conf("t", ""), channels=["x"]),
    ]

    async def alisted() -> Any:
        return [t async for t in saver.alist(_conf("t", ""))]

    for call in [*calls, alisted]:
        try:
            asyncio.run(call())
        except StoreClosedError:
            continue
        raise AssertionError(call)

    async def after() -> None:
        async with AsyncCpstoreSaver.from_conn_string(url) as again:
            ids = sorted([tup.checkpoint["id"] async for tup in again.alist(_conf("t", ""))])
            assert ids == sorted([first, *got])
            for i in range(3):
                tup = await again.aget_tuple(_conf(f"s{i}", ""))
                assert tup is not None and tup.checkpoint["channel_values"] == {"x": 10 + i}

    asyncio.run(after())
