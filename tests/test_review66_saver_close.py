"""review66: a store the async saver opened is closed even when a second cancellation
arrives before an executor thread takes the close.

``AsyncCpstoreSaver.from_conn_string`` cancelled while its open runs closes the store
the open made (``_settled(..., undo=_close)``), and its ``finally`` closes the store
when the block ends. Both closes went through ``_settled``, whose "cancelled before a
thread took it: never runs" rule then applied to the close itself: cancelled again
while the close waited in the executor's queue, the store was never closed (left
open, its LMDB environment held by this process). The executor here has one worker,
kept busy by a queued blocker, so the close is deterministically still queued when
the second cancellation arrives.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import cpstore.store as store_pkg
from cpstore.langgraph.saver import AsyncCpstoreSaver


async def _queued(ex: ThreadPoolExecutor, count: int) -> None:
    while ex._work_queue.qsize() != count:
        await asyncio.sleep(0.005)


def _run_with_second_cancel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, in_body: bool
) -> list[Any]:
    real_open = store_pkg.open
    opened: list[Any] = []
    in_open, release_open, release_blocker = (threading.Event() for _ in range(3))

    def slow_open(path: Any, **options: Any) -> Any:
        in_open.set()
        release_open.wait(30)
        store = real_open(path, **options)
        opened.append(store)
        return store

    monkeypatch.setattr(store_pkg, "open", slow_open)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        ex = ThreadPoolExecutor(max_workers=1)
        loop.set_default_executor(ex)
        entered = asyncio.Event()

        async def user() -> None:
            async with AsyncCpstoreSaver.from_conn_string(str(tmp_path / "s")):
                entered.set()
                await asyncio.sleep(3600)

        task = asyncio.create_task(user())
        while not in_open.is_set():
            await asyncio.sleep(0.005)
        if in_body:
            release_open.set()
            await entered.wait()
            blocker = loop.run_in_executor(None, release_blocker.wait, 30)
            while ex._work_queue.qsize() != 0:  # the worker holds the blocker
                await asyncio.sleep(0.005)
            task.cancel()  # the body ends; its finally queues the close
        else:
            task.cancel()  # cancelled while the open runs
            await asyncio.sleep(0)
            blocker = loop.run_in_executor(None, release_blocker.wait, 30)
            await _queued(ex, 1)  # the blocker waits behind the open
            release_open.set()
            while not opened:
                await asyncio.sleep(0.005)
        await _queued(ex, 1)  # the close waits behind the blocker
        task.cancel()  # cancelled again before a thread took the close
        release_blocker.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        await blocker

    try:
        asyncio.run(main())
    finally:
        release_open.set()
        release_blocker.set()
    return opened


@pytest.mark.parametrize("in_body", [False, True], ids=["cancelled-open", "cancelled-body"])
def test_a_second_cancel_before_the_close_runs_still_closes_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_body: bool
) -> None:
    opened = _run_with_second_cancel(tmp_path, monkeypatch, in_body=in_body)
    assert len(opened) == 1
    try:
        assert opened[0]._backend.closed, "the store the saver opened was left open"
    finally:
        opened[0].close()
