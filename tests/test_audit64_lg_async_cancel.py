"""audit64: a cancelled async saver call is settled when its CancelledError is raised.

The async twins ran the sync method in the default executor, and a cancellation
returned at once while the store work went on in its thread: an ``aput`` waiting for
the writer lock another process held was cancelled, a read right after the
CancelledError found no checkpoint, and once the lock was let go the "cancelled" put
committed and the checkpoint appeared. Now a cancelled call returns only when its work
has ended (or never started): what a read sees after the CancelledError is what stays.
An ``async with AsyncCpstoreSaver.from_conn_string`` cancelled while the store opened
left that store open in the background, never closed: it is closed now.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import subprocess
import sys
import threading
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from lg_puts import cfg
from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures

import cpstore
from cpstore.errors import OutcomeUnknownError
from cpstore.langgraph import AsyncCpstoreSaver
from cpstore.langgraph.saver import _settled
from cpstore.store import lmdb_registry

_HOLD = r"""
import sys
import cpstore
st = cpstore.open(sys.argv[1])
def hold(txn):
    if hasattr(txn, "begin_now"):
        txn.begin_now()  # PostgreSQL: BEGIN and the advisory writer lock
    print("held", flush=True)
    sys.stdin.readline()
st.backend.write_txn(hold)
st.close()
"""


def _holder(url: str) -> subprocess.Popen[str]:
    """Another process holding the store's writer lock until it reads a line."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLD, url], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "held"
    return proc


def _release_later(proc: subprocess.Popen[str], seconds: float) -> threading.Thread:
    def go() -> None:
        threading.Event().wait(seconds)
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()

    th = threading.Thread(target=go)
    th.start()
    return th


def _checkpoint(value: int) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    cp: dict[str, Any] = dict(empty_checkpoint())
    cp["channel_values"] = {"x": value}
    cp["channel_versions"] = {"x": str(value)}
    return cp, {"source": "loop", "step": value, "parents": {}}, {"x": str(value)}


def _ids(tup: Any) -> Any:
    return (
        None
        if tup is None
        else (tup.config["configurable"]["checkpoint_id"], tup.checkpoint["channel_values"])
    )


def test_a_put_cancelled_behind_another_process_lock_is_settled(url: str) -> None:
    """Cancelled while another process holds the writer lock (released 2 s later): the
    read right after the CancelledError sees what every later read sees."""
    cpstore.open(url).close()

    async def main() -> tuple[Any, Any]:
        async with AsyncCpstoreSaver.from_conn_string(url) as saver:
            holder = _holder(url)
            task = asyncio.create_task(saver.aput(cfg("t"), *_checkpoint(1)))
            await asyncio.sleep(0.3)  # the put is waiting for the lock (or about to)
            task.cancel()
            releaser = _release_later(holder, 2.0)
            with pytest.raises(asyncio.CancelledError):
                await task
            seen = _ids(await saver.aget_tuple(cfg("t")))
            await asyncio.get_running_loop().run_in_executor(None, releaser.join)
            await asyncio.get_running_loop().run_in_executor(None, holder.wait)
            later = _ids(await saver.aget_tuple(cfg("t")))
            # the store is usable: a put after it commits and reads back
            done = await saver.aput(cfg("u"), *_checkpoint(2))
            got = await saver.aget_tuple(done)
            assert got is not None and got.checkpoint["channel_values"] == {"x": 2}
            return seen, later

    seen, later = asyncio.run(main())
    assert seen == later
    with cpstore.open(url) as st:
        assert st.verify().ok


def test_cancelling_at_random_points_leaves_what_a_read_then_sees(url: str) -> None:
    """aput, aput_writes and adelete_thread cancelled right after scheduling or a little
    later: the reads right after each CancelledError equal the reads after the executor
    has drained, and no checkpoint is ever half there."""
    rnd = random.Random(64)

    async def main() -> None:
        async with AsyncCpstoreSaver.from_conn_string(url) as saver:
            loop = asyncio.get_running_loop()
            for trial in range(40):
                thread = f"t{trial % 5}"
                last = await saver.aget_tuple(cfg(thread))
                parent = None if last is None else last.config["configurable"]["checkpoint_id"]
                kind = rnd.choice(["put", "writes", "delete"])
                if kind == "put":
                    coro: Any = saver.aput(cfg(thread, parent), *_checkpoint(trial))
                elif kind == "writes" and parent is not None:
                    coro = saver.aput_writes(cfg(thread, parent), [("x", trial)], f"task{trial}")
                else:
                    coro = saver.adelete_thread(thread)
                task = asyncio.create_task(coro)
                for _ in range(rnd.randrange(4)):
                    await asyncio.sleep(0)
                if rnd.random() < 0.5:
                    await asyncio.sleep(rnd.uniform(0, 0.01))
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                seen = await saver.aget_tuple(cfg(thread))
                seen_ids = (
                    _ids(seen),
                    None if seen is None else sorted(map(repr, seen.pending_writes or [])),
                )
                # anything still running in the executor ends before this returns
                await loop.run_in_executor(None, lambda: None)
                await asyncio.sleep(0.05)
                again = await saver.aget_tuple(cfg(thread))
                again_ids = (
                    _ids(again),
                    None if again is None else sorted(map(repr, again.pending_writes or [])),
                )
                assert seen_ids == again_ids, (trial, kind)

    asyncio.run(main())


def test_an_open_cancelled_behind_the_lock_leaves_no_store_open(tmp_path: Any) -> None:
    """LMDB: a writable open takes the writer lock; cancelled while waiting for it, the
    store it opens once the lock is let go is closed, not left open in this process."""
    url = str(tmp_path / "s")
    cpstore.open(url).close()

    async def main() -> None:
        holder = _holder(url)

        async def use() -> None:
            async with AsyncCpstoreSaver.from_conn_string(url):
                pass

        task = asyncio.create_task(use())
        await asyncio.sleep(0.3)
        task.cancel()
        releaser = _release_later(holder, 1.0)
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.get_running_loop().run_in_executor(None, releaser.join)
        await asyncio.get_running_loop().run_in_executor(None, holder.wait)
        await asyncio.sleep(0.5)

    asyncio.run(main())
    assert not lmdb_registry.is_open_here(url)


def test_a_timed_out_and_twice_cancelled_put_is_settled(url: str) -> None:
    """``asyncio.timeout`` around a put behind another process's lock is TimeoutError, and a
    second cancel while it settles is absorbed: either way the read after it is final."""
    cpstore.open(url).close()

    async def main() -> list[tuple[Any, Any]]:
        out = []
        async with AsyncCpstoreSaver.from_conn_string(url) as saver:
            for twice in (False, True):
                thread = f"t{twice}"
                holder = _holder(url)
                releaser = _release_later(holder, 2.0)
                if twice:
                    task = asyncio.create_task(saver.aput(cfg(thread), *_checkpoint(1)))
                    await asyncio.sleep(0.3)
                    task.cancel()
                    await asyncio.sleep(0.1)
                    task.cancel()
                    with pytest.raises(asyncio.CancelledError):
                        await task
                else:
                    with pytest.raises(TimeoutError):
                        async with asyncio.timeout(0.3):
                            await saver.aput(cfg(thread), *_checkpoint(1))
                seen = _ids(await saver.aget_tuple(cfg(thread)))
                await asyncio.get_running_loop().run_in_executor(None, releaser.join)
                await asyncio.get_running_loop().run_in_executor(None, holder.wait)
                out.append((seen, _ids(await saver.aget_tuple(cfg(thread)))))
        return out

    for seen, later in asyncio.run(main()):
        assert seen == later


def test_a_cancelled_call_that_fails_meanwhile_names_its_error() -> None:
    """A call cancelled while it runs and then failing (an OutcomeUnknownError: "may or may
    not be stored") ends in the CancelledError the caller asked for, with the call's own
    error in its notes: before, the error was dropped unseen."""
    started, release = threading.Event(), threading.Event()

    def fails() -> None:
        started.set()
        release.wait(10)
        raise OutcomeUnknownError("the commit's outcome is unknown", where="test")

    async def main() -> list[str]:
        task = asyncio.ensure_future(_settled(fails))
        while not started.is_set():
            await asyncio.sleep(0.001)
        task.cancel()
        await asyncio.sleep(0.01)
        release.set()
        try:
            await task
        except asyncio.CancelledError as exc:
            return list(getattr(exc, "__notes__", []))
        raise AssertionError("not cancelled")

    notes = asyncio.run(main())
    assert len(notes) == 1
    assert "OutcomeUnknownError" in notes[0] and "outcome is unknown" in notes[0]


def test_an_undo_that_fails_keeps_the_cancellation() -> None:
    """The undo of a cancelled call (the close of a cancelled open) that raises leaves the
    caller's CancelledError in place, the undo's error in its notes: before, the undo's
    error replaced the cancellation (review66's report)."""
    started, release = threading.Event(), threading.Event()

    def opens() -> str:
        started.set()
        release.wait(10)
        return "opened"

    def undo(value: str) -> None:
        raise RuntimeError(f"close of {value} failed")

    async def main() -> list[str]:
        task = asyncio.ensure_future(_settled(opens, undo=undo))
        while not started.is_set():
            await asyncio.sleep(0.001)
        task.cancel()
        await asyncio.sleep(0.01)
        release.set()
        try:
            await task
        except asyncio.CancelledError as exc:
            return list(getattr(exc, "__notes__", []))
        raise AssertionError("not cancelled")

    notes = asyncio.run(main())
    assert notes == ["undoing the cancelled call failed: RuntimeError: close of opened failed"]
