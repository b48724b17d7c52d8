"""The LangGraph saver's maintenance (prune keep_latest, delete_thread, copy_thread) in one
process while another runs LangGraph's loop (put, then put_writes) on the same thread and
a third reads it (get_tuple, list), LMDB and PostgreSQL, free-running (no placement).

What must hold, whatever the interleaving: every read is one checkpoint with its own
values and its own writes (``review88_workers.check_tuple``); a checkpoint acknowledged
after the last maintenance call reads back whole; keep_latest never loses the newest;
verify is clean.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import queue
from typing import Any

import pytest
import review88_workers as w
from langgraph.checkpoint.base import empty_checkpoint
from pg_cluster import backend_url  # noqa: F401 - fixture

from cpstore.langgraph import CpstoreSaver

_CTX = mp.get_context("spawn")


def _run(
    procs: list[Any],
    q: Any,
    stop: Any,
    timeout: float = 25.0,
    *,
    go: Any = None,
    calls: tuple[str, ...] = (),
    go_after: int = 0,
) -> list[tuple[Any, Any]]:
    """Start the processes, collect what they report until each said done; ``stop`` is
    set once all but one (the reader, last in ``procs``, most likely) are done. Reports
    whose kind is in ``calls`` (a maintenance call's) are counted, not kept: ``go`` is set
    at the ``go_after``-th (the loop's last step waits for it), and at the end."""
    for p in procs:
        p.start()
    got: list[tuple[Any, Any]] = []
    done = called = 0
    try:
        while done < len(procs):
            try:
                item = q.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"a worker went quiet; so far {got[-5:]!r}") from None
            if item[0] == "error":
                raise AssertionError(item[1])
            if item[0] == "done":
                done += 1
                if done == len(procs) - 1:
                    stop.set()
            elif item[0] in calls:
                called += 1
                if called == go_after and go is not None:
                    go.set()
            else:
                got.append(item)
    finally:
        if go is not None:
            go.set()
        stop.set()
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
                p.join()
    return got


def _acked(got: list[tuple[Any, Any]]) -> list[tuple[int, str]]:
    return [(i, cid) for i, cid in got if isinstance(i, int)]


def _check_thread(saver: CpstoreSaver, thread: str) -> list[int]:
    steps = []
    for tup in saver.list(w.cfg(thread)):
        steps.append(w.check_tuple(tup))
        again = saver.get_tuple(tup.config)
        assert again is not None and w.check_tuple(again) == steps[-1]
    return steps


def _with_writes(saver: CpstoreSaver, thread: str, i: int, cid: str) -> None:
    tup = saver.get_tuple(w.cfg(thread, cid))
    assert tup is not None, f"acknowledged step {i} gone"
    assert w.check_tuple(tup) == i
    assert list(tup.pending_writes) == [(f"task{i}", "x", f"w{i}")]


@pytest.mark.parametrize("pruners", [1, 2])
def test_keep_latest_beside_the_loop_and_a_reader(url: str, pruners: int) -> None:
    """The loop puts 30 steps while one or two maintainers prune 12 times each and a
    reader reads: no read mixes two checkpoints; the loop's last step (put after the
    maintainers are done) reads with its writes; a quiet prune afterwards leaves the
    newest alone."""
    with CpstoreSaver.from_conn_string(url) as saver:
        w.put_step(saver, "t", None, 0)
    q = _CTX.Queue()
    go, stop = _CTX.Event(), _CTX.Event()
    procs = [
        _CTX.Process(target=w.loop, args=(url, "t", 30, q, go)),
        _CTX.Process(target=w.read, args=(url, "t", stop, q)),
        *(_CTX.Process(target=w.maintain, args=(url, "prune", "t", 12, q)) for _ in range(pruners)),
    ]
    got = _run(procs, q, stop, go=go, calls=("prune",), go_after=12 * pruners)
    acked = _acked(got)
    assert [i for i, _ in acked] == list(range(1, 31))
    with CpstoreSaver.from_conn_string(url) as saver:
        steps = _check_thread(saver, "t")
        assert steps and max(steps) == 30
        _with_writes(saver, "t", *acked[-1])
        newest = saver.get_tuple(w.cfg("t"))
        assert newest is not None and w.check_tuple(newest) == 30
        assert saver.store.verify().ok
        saver.prune(["t"])
        assert _check_thread(saver, "t") == [30]
        _with_writes(saver, "t", *acked[-1])
        assert saver.store.verify().ok


def test_delete_thread_beside_the_loop_and_a_reader(url: str) -> None:
    """delete_thread 8 times while the loop puts 25 steps: every read is whole; what is
    left after is a consistent thread, its steps among the acknowledged; the last step
    (after the deletes) reads with its writes; verify clean."""
    with CpstoreSaver.from_conn_string(url) as saver:
        w.put_step(saver, "d", None, 0)
    q = _CTX.Queue()
    go, stop = _CTX.Event(), _CTX.Event()
    procs = [
        _CTX.Process(target=w.loop, args=(url, "d", 25, q, go)),
        _CTX.Process(target=w.maintain, args=(url, "delete", "d", 8, q)),
        _CTX.Process(target=w.read, args=(url, "d", stop, q)),
    ]
    got = _run(procs, q, stop, go=go, calls=("delete",), go_after=8)
    acked = _acked(got)
    assert [i for i, _ in acked] == list(range(1, 26))
    with CpstoreSaver.from_conn_string(url) as saver:
        steps = _check_thread(saver, "d")
        assert 25 in steps and set(steps) <= set(range(26))
        _with_writes(saver, "d", *acked[-1])
        assert saver.store.verify().ok
        saver.delete_thread("d")
        assert _check_thread(saver, "d") == []
        assert saver.get_tuple(w.cfg("d")) is None
        report = saver.store.verify()
        assert report.ok, report
        assert report.counts["checkpoints"] == report.counts["objects"] == 0


def test_copy_thread_beside_the_loop_on_its_source(url: str) -> None:
    """copy_thread s -> c 8 times while the loop puts 25 steps on s and a reader reads
    c: every read of the copy is whole (values and writes of one step); the source keeps
    every acknowledged step with its writes; a quiet copy afterwards holds them all."""
    with CpstoreSaver.from_conn_string(url) as saver:
        w.put_step(saver, "s", None, 0)
    q = _CTX.Queue()
    stop = _CTX.Event()
    got = _run(
        [
            _CTX.Process(target=w.loop, args=(url, "s", 25, q)),
            _CTX.Process(target=w.maintain, args=(url, "copy:c", "s", 8, q)),
            _CTX.Process(target=w.read, args=(url, "c", stop, q)),
        ],
        q,
        stop,
    )
    acked = _acked(got)
    assert [i for i, _ in acked] == list(range(1, 26))
    with CpstoreSaver.from_conn_string(url) as saver:
        assert sorted(_check_thread(saver, "s")) == list(range(26))
        for i, cid in acked:
            _with_writes(saver, "s", i, cid)
        assert set(_check_thread(saver, "c")) <= set(range(26))
        saver.copy_thread("s", "c")
        assert sorted(_check_thread(saver, "c")) == list(range(26))
        for i, cid in acked:
            _with_writes(saver, "c", i, cid)
        assert saver.store.verify().ok


async def _async_mix(saver: CpstoreSaver) -> list[tuple[int, str]]:
    """The async loop (aput, aput_writes), aprune and a reader as tasks on one saver."""
    acked: list[tuple[int, str]] = []

    async def put_loop() -> None:
        newest = await saver.aget_tuple(w.cfg("a"))
        assert newest is not None
        parent = newest.config["configurable"]["checkpoint_id"]
        for i in range(1, 21):
            cp: dict[str, Any] = dict(empty_checkpoint())
            cp["channel_values"] = {"x": f"p{i}"}
            cp["channel_versions"] = {"x": f"{i:08d}"}
            meta = {"source": "loop", "step": i, "parents": {}}
            done = await saver.aput(w.cfg("a", parent), cp, meta, {"x": f"{i:08d}"})
            parent = done["configurable"]["checkpoint_id"]
            await saver.aput_writes(w.cfg("a", parent), [("x", f"w{i}")], f"task{i}")
            acked.append((i, parent))

    async def prunes() -> None:
        for _ in range(8):
            await saver.aprune(["a"])

    async def reads() -> None:
        for _ in range(15):
            newest = await saver.aget_tuple(w.cfg("a"))
            if newest is not None:
                w.check_tuple(newest)
            async for tup in saver.alist(w.cfg("a")):
                w.check_tuple(tup)

    await asyncio.gather(put_loop(), prunes(), reads())
    return acked


def test_async_saver_keep_latest_beside_its_own_loop_and_another_process(url: str) -> None:
    """The async saver's aput/aput_writes loop, aprune and reads as tasks of one process
    while another process prunes the thread too: every read whole, the last step reads
    with its writes, verify clean, a quiet prune leaves it alone."""
    with CpstoreSaver.from_conn_string(url) as saver:
        w.put_step(saver, "a", None, 0)
    q = _CTX.Queue()
    other = _CTX.Process(target=w.maintain, args=(url, "prune", "a", 10, q))
    other.start()
    try:
        with CpstoreSaver.from_conn_string(url) as saver:
            acked = asyncio.run(_async_mix(saver))
        item = q.get(timeout=25)
        while item[0] == "prune":
            item = q.get(timeout=25)
        assert item[0] == "done", item
    finally:
        other.join(30)
        if other.is_alive():
            other.kill()
            other.join()
    assert [i for i, _ in acked] == list(range(1, 21))
    with CpstoreSaver.from_conn_string(url) as saver:
        assert max(_check_thread(saver, "a")) == 20
        _with_writes(saver, "a", *acked[-1])
        saver.prune(["a"])
        assert _check_thread(saver, "a") == [20]
        _with_writes(saver, "a", *acked[-1])
        assert saver.store.verify().ok


def test_prune_delete_and_copy_all_at_once_beside_the_loop(url: str) -> None:
    """The loop puts 25 steps on m while three processes prune m, delete m and copy m
    to c (8 times each) and a reader reads m: every read whole, the step put after all
    three are done reads with its writes, what m and c hold is whole, verify clean."""
    with CpstoreSaver.from_conn_string(url) as saver:
        w.put_step(saver, "m", None, 0)
    q = _CTX.Queue()
    go, stop = _CTX.Event(), _CTX.Event()
    procs = [
        _CTX.Process(target=w.loop, args=(url, "m", 25, q, go)),
        _CTX.Process(target=w.maintain, args=(url, "prune", "m", 8, q)),
        _CTX.Process(target=w.maintain, args=(url, "delete", "m", 8, q)),
        _CTX.Process(target=w.maintain, args=(url, "copy:c", "m", 8, q)),
        _CTX.Process(target=w.read, args=(url, "m", stop, q)),
    ]
    got = _run(procs, q, stop, go=go, calls=("prune", "delete", "copy"), go_after=24)
    acked = _acked(got)
    assert [i for i, _ in acked] == list(range(1, 26))
    with CpstoreSaver.from_conn_string(url) as saver:
        steps = _check_thread(saver, "m")
        assert 25 in steps and set(steps) <= set(range(26))
        _with_writes(saver, "m", *acked[-1])
        assert set(_check_thread(saver, "c")) <= set(range(26))
        assert saver.store.verify().ok
        saver.prune(["m"])
        assert _check_thread(saver, "m") == [25]
        _with_writes(saver, "m", *acked[-1])
        saver.delete_thread("m")
        saver.delete_thread("c")
        assert _check_thread(saver, "m") == _check_thread(saver, "c") == []
        report = saver.store.verify()
        assert report.ok, report
        # nothing of either thread is left stored: no hold, no checkpoint, no value
        assert saver.store.retained() == {}
        assert report.counts["checkpoints"] == report.counts["objects"] == 0
