"""A process of tests/test_audit64_lg_async_concurrency.py: asyncio tasks putting chains.

argv: store url, writer name, a start-file path it waits for. Prints one JSON line per
acknowledged checkpoint ([thread, ns, checkpoint id, value]), then "done".
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6

from cpstore.langgraph import AsyncCpstoreSaver

STEPS = 8


def checkpoint(value: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    cp: dict[str, Any] = dict(empty_checkpoint())
    cp["id"] = str(uuid6(clock_seq=-1))
    cp["channel_values"] = {"x": value}
    cp["channel_versions"] = {"x": value}
    return cp, {"source": "loop", "step": 0, "parents": {}, "writer": value}, {"x": value}


async def chain(saver: Any, thread: str, ns: str, name: str, acked: list[Any]) -> None:
    parent: str | None = None
    for step in range(STEPS):
        conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
        if parent is not None:
            conf["checkpoint_id"] = parent
        value = f"{name}/{thread}/{ns}/{step}"
        done = await saver.aput({"configurable": conf}, *checkpoint(value))
        parent = done["configurable"]["checkpoint_id"]
        acked.append([thread, ns, parent, value])
        await saver.aput_writes(done, [("x", value)], f"task-{name}-{step}")
        acked.append(["write", thread, ns, parent, value])
        got = await saver.aget_tuple(done)
        assert got is not None and got.checkpoint["channel_values"] == {"x": value}, value


async def main(url: str, name: str, start: str) -> list[Any]:
    while not os.path.exists(start):
        time.sleep(0.01)
    acked: list[Any] = []
    async with AsyncCpstoreSaver.from_conn_string(url) as saver:
        jobs = [chain(saver, f"{name}-own{i}", "", name, acked) for i in range(3)]
        jobs += [
            chain(saver, "shared", ns, f"{name}.{k}", acked) for k in range(2) for ns in ("", "sub")
        ]
        await asyncio.gather(*jobs)
    return acked


if __name__ == "__main__":
    for row in asyncio.run(main(*sys.argv[1:4])):
        print(json.dumps(row))
    print("done", flush=True)
