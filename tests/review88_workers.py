"""Worker processes for tests/test_review88_*.py: a LangGraph loop (put, then
put_writes), a maintainer (prune keep_latest, delete_thread, copy_thread) and a reader,
each on its own saver in its own process, on one store (LMDB folder or PostgreSQL URL).

Every checkpoint the loop puts carries its number three ways: its channel ``x`` holds
``p<i>``, its metadata ``step`` is ``i`` and its one pending write (task ``task<i>``)
holds ``w<i>``. A read that returns a mix of two checkpoints, or a checkpoint with
another's writes, shows as those disagreeing (``check_tuple``).
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
import traceback
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint

from cpstore.langgraph import CpstoreSaver


def cfg(thread: str, checkpoint_id: str | None = None, ns: str = "") -> dict[str, Any]:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def put_step(saver: CpstoreSaver, thread: str, parent: str | None, i: int, ns: str = "") -> str:
    """LangGraph's loop for step ``i``: put the checkpoint, then its task's writes."""
    cp: dict[str, Any] = dict(empty_checkpoint())
    cp["channel_values"] = {"x": f"p{i}"}
    cp["channel_versions"] = {"x": f"{i:08d}"}
    meta = {"source": "loop", "step": i, "parents": {}}
    done = saver.put(cfg(thread, parent, ns), cp, meta, {"x": f"{i:08d}"})
    cid = str(done["configurable"]["checkpoint_id"])
    saver.put_writes(cfg(thread, cid, ns), [("x", f"w{i}")], f"task{i}")
    return cid


def check_tuple(tup: Any) -> int:
    """The step the tuple is, after checking its parts agree; ValueError when they do not."""
    i = tup.metadata["step"]
    if tup.checkpoint["channel_values"] != {"x": f"p{i}"}:
        raise ValueError(f"step {i} reads values {tup.checkpoint['channel_values']!r}")
    writes = list(tup.pending_writes or [])
    if writes not in ([], [(f"task{i}", "x", f"w{i}")]):
        raise ValueError(f"step {i} reads writes {writes!r}")
    return int(i)


def loop(url: str, thread: str, n: int, out: Any, go: Any = None) -> None:
    """Put steps 1 .. ``n`` on ``thread`` (step 0, its root, put before); each
    acknowledged id to ``out`` (a queue) as (step, id) after its writes are too. ``go``, an Event:
    wait for it before the last step."""
    try:
        with CpstoreSaver.from_conn_string(url) as saver:
            newest = saver.get_tuple(cfg(thread))
            parent = None if newest is None else newest.config["configurable"]["checkpoint_id"]
            for i in range(1, n + 1):
                if go is not None and i == n:
                    go.wait(120)
                parent = put_step(saver, thread, parent, i)
                out.put((i, parent))
    except BaseException:
        out.put(("error", traceback.format_exc()))
        raise
    out.put(("done", None))


def maintain(url: str, what: str, thread: str, n: int, out: Any) -> None:
    """``n`` times: prune keep_latest, delete_thread or copy_thread (``copy:<target>``)."""
    what, _, target = what.partition(":")
    try:
        with CpstoreSaver.from_conn_string(url) as saver:
            for _ in range(n):
                if what == "prune":
                    saver.prune([thread])
                elif what == "delete":
                    saver.delete_thread(thread)
                elif what == "copy":
                    try:
                        saver.copy_thread(thread, target)
                    except Exception as e:  # the named race (ConflictError) only
                        if type(e).__name__ != "ConflictError":
                            raise
                out.put((what, None))
    except BaseException:
        out.put(("error", traceback.format_exc()))
        raise
    out.put(("done", None))


def read(url: str, thread: str, stop: Any, out: Any) -> None:
    """Rounds of get_tuple (newest, then by id) and list, each tuple checked, until
    ``stop`` (an Event) is set: at least one, at most ``READS``."""
    try:
        with CpstoreSaver.from_conn_string(url) as saver:
            for n in range(READS):
                if n and stop.is_set():
                    break
                newest = saver.get_tuple(cfg(thread))
                if newest is not None:
                    check_tuple(newest)
                for tup in saver.list(cfg(thread)):
                    check_tuple(tup)
                    again = saver.get_tuple(tup.config)
                    if again is not None:
                        check_tuple(again)
    except BaseException:
        out.put(("error", traceback.format_exc()))
        raise
    out.put(("done", None))


#: The most rounds a reader reads (a bound if its stop is never set).
READS = 2000


def kill_at(url: str, what: str, thread: str, point: str, n: int) -> None:
    """Run ``what`` once, SIGKILLing this process at its ``n``-th pass of ``point``
    (``<module>.<name>``: after that call returns, or before it with a ``^`` prefix).
    Prints ``ready`` first; exits 0 when the point was never met."""
    before = point.startswith("^")
    mod_name, name = point.lstrip("^").rsplit(".", 1)
    mod = importlib.import_module(mod_name)
    real = getattr(mod, name)
    calls = [0]

    def hooked(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if before and calls[0] == n:
            os.kill(os.getpid(), signal.SIGKILL)
        result = real(*args, **kwargs)
        if not before and calls[0] == n:
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    setattr(mod, name, hooked)
    with CpstoreSaver.from_conn_string(url) as saver:
        print("ready", flush=True)
        if what == "prune":
            saver.prune([thread])
        elif what == "delete":
            saver.delete_thread(thread)
        elif what == "copy":
            saver.copy_thread(thread, f"{thread}-copy")


if __name__ == "__main__":
    kill_at(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
