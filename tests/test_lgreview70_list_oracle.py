"""``list`` against InMemorySaver past a batch (128 checkpoints per read txn): threads,
nested namespaces, metadata filters, ``before=``, ``limit=`` and pending writes.

300 checkpoints on two threads and three namespaces (root, ``sub:1``, ``sub:1|x:2``;
thread ``a``'s root namespace alone holds more than a batch);
60 seeded queries. With a namespace named, the tuples (ids, values, writes, parent,
metadata) equal InMemorySaver's in order; without one the set is equal (the namespaces
come in another order: docs/langgraph.md, "Differences from InMemorySaver") and so is
the count under a limit. ``alist`` gives what ``list`` gives.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from pg_cluster import backend_store, pg_cluster  # noqa: F401 - fixtures

from cpstore.langgraph import CpstoreSaver
from cpstore.store import Store

NAMESPACES = ("", "sub:1", "sub:1|x:2")


def _fill(saver: Any, seed: int) -> list[str]:
    rng = random.Random(seed)
    ids: list[str] = []
    heads: dict[tuple[str, str], str] = {}
    for i in range(300):
        # weighted so that thread a's root namespace alone passes a batch (~170)
        thread = "a" if rng.random() < 0.8 else "b"
        ns = "" if rng.random() < 0.7 else rng.choice(NAMESPACES[1:])
        cp: dict[str, Any] = dict(empty_checkpoint())
        cp["id"] = f"{i:05d}-{rng.randrange(10)}"
        cp["channel_values"], cp["channel_versions"] = {"v": i}, {"v": str(i)}
        conf = {"thread_id": thread, "checkpoint_ns": ns}
        if (thread, ns) in heads:
            conf["checkpoint_id"] = heads[thread, ns]
        meta = {"step": i, "k": i % 7, "source": rng.choice(["loop", "input"])}
        meta["tag"] = rng.choice([None, "x", 1])
        saver.put({"configurable": conf}, cp, meta, {"v": str(i)})
        heads[thread, ns] = cp["id"]
        ids.append(cp["id"])
        if rng.random() < 0.2:
            done = {"configurable": {**conf, "checkpoint_id": cp["id"]}}
            saver.put_writes(done, [("v", i), ("w", -i)], f"task{i}")
    return ids


def _queries(ids: list[str], seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for _ in range(60):
        thread = rng.choice([None, "a", "b"])
        config = None
        if thread is not None:
            conf: dict[str, Any] = {"thread_id": thread}
            if rng.random() < 0.5:
                conf["checkpoint_ns"] = rng.choice(NAMESPACES)
            if rng.random() < 0.1:
                conf["checkpoint_id"] = rng.choice(ids)
            config = {"configurable": conf}
        before = rng.choice([None, None, {"configurable": {"checkpoint_id": rng.choice(ids)}}])
        out.append(
            {
                "config": config,
                "filter": rng.choice([None, {"k": 3}, {"source": "loop"}, {"tag": None}]),
                "before": before,
                "limit": rng.choice([None, None, 0, 1, 5, 127, 128, 129, 200]),
            }
        )
    return out


def _seen(tuples: Any) -> list[tuple[Any, ...]]:
    return [
        (
            t.config,
            t.checkpoint["channel_values"],
            t.pending_writes,
            t.parent_config,
            t.metadata,
        )
        for t in tuples
    ]


def test_list_equals_in_memory_saver_past_a_batch(store: Store) -> None:
    memory, saver = InMemorySaver(), CpstoreSaver(store)
    ids = _fill(memory, 5)
    assert _fill(saver, 5) == ids
    root_a = {"configurable": {"thread_id": "a", "checkpoint_ns": ""}}
    assert len(list(saver.list(root_a))) > 128  # the premise: past one batch
    for query in _queries(ids, 9):
        expected, got = _seen(memory.list(**query)), _seen(saver.list(**query))
        config = query["config"]
        if config is not None and "checkpoint_ns" in config["configurable"]:
            assert got == expected, query
        elif query["limit"] is None:
            assert sorted(map(repr, got)) == sorted(map(repr, expected)), query
        else:
            assert len(got) == len(expected), query


def test_alist_gives_what_list_gives_past_a_batch(store: Store) -> None:
    saver = CpstoreSaver(store)
    ids = _fill(saver, 6)

    async def every(query: dict[str, Any]) -> list[tuple[Any, ...]]:
        return _seen([t async for t in saver.alist(**query)])

    for query in _queries(ids, 10)[:12]:
        assert asyncio.run(every(query)) == _seen(saver.list(**query)), query
