"""The saver's put path stores the same bytes for the same puts: checkpoint ids and index
entries of a fixed workload are pinned (golden values recorded on the code before the
put-path trims of the lgput branch)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from cpstore.langgraph import CpstoreSaver
from cpstore.store.facade import open as open_store
from cpstore.store.lg_index import CHECKPOINT_PREFIX, scan

THREAD = "pin-thread"


def _checkpoint(step: int, values: dict[str, Any], versions: dict[str, str]) -> dict[str, Any]:
    return {
        "v": 4,
        "id": f"1f0c0000-0000-6000-8000-{step:012d}",
        "ts": f"2026-01-01T00:00:{step:02d}+00:00",
        "channel_values": dict(values),
        "channel_versions": dict(versions),
        "versions_seen": {"node": {k: v for k, v in sorted(versions.items())[:2]}},
        "updated_channels": sorted(values)[:1],
    }


def _version(n: int) -> str:
    return f"{n:032}.{n / 7:016.14f}"


def _record(saver: CpstoreSaver) -> list[str]:
    """Linear puts (channels changing, a list growing, one emptied), a fork, a partial put."""
    config: dict[str, Any] = {"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}}
    values: dict[str, Any] = {f"c{i}": f"value {i} " * 40 for i in range(5)}
    values["msgs"] = []
    versions = {k: _version(1) for k in values}
    configs = []
    for step in range(12):
        new: dict[str, str] = {}
        changed = f"c{step % 5}"
        values[changed] = f"step {step} " * (30 + step)
        values["msgs"] = [*values["msgs"], {"role": "user", "text": "m" * (200 + step)}]
        for k in (changed, "msgs"):
            new[k] = versions[k] = _version(step + 2)
        if step == 6:  # a channel without a value at a new version: the empty marker
            values.pop("c4")
            new["c4"] = versions["c4"] = _version(step + 2)
        meta = {"source": "loop", "step": step, "parents": {}, "run_id": "r-1"}
        config = saver.put(config, _checkpoint(step, values, versions), meta, new)
        configs.append(config)
    # time travel: a put whose parent is an older checkpoint forks a branch
    fork = {"configurable": dict(configs[3]["configurable"])}
    values["c0"] = "forked " * 50
    versions["c0"] = _version(99)
    meta = {"source": "update", "step": 4, "parents": {}}
    saver.put(fork, _checkpoint(50, values, versions), meta, {"c0": versions["c0"]})
    # a put whose caller passes only the new channel's value (the rest held by the parent)
    after = _checkpoint(51, {"c1": "only " * 60}, {**versions, "c1": _version(100)})
    saver.put(
        configs[-1], after, {"source": "loop", "step": 12, "parents": {}}, {"c1": _version(100)}
    )
    store = saver.store
    with store.backend.read_txn() as txn:
        return [
            hashlib.sha256(bytes(key) + b"=" + bytes(value)).hexdigest()[:24]
            for key, value in scan(txn, store.backend.db("meta"), CHECKPOINT_PREFIX)
        ]


GOLDEN = [
    "ba392f445a82d5fda35dac5d",
    "f97fd1dccdfbaa627c88acf3",
    "b46d51b3a20498f069b83053",
    "fbb46f41df1d1a9058c19b1c",
    "f03d00867cb829c9092bbc38",
    "be4536ffdcd96609feeb9ebf",
    "aa89ae0f803ed2e2ee79316a",
    "67582e74ec47db89acd9c032",
    "3d7ba78a600f966f28fc5c09",
    "fd3c03b434a81abe3c876a68",
    "fb4d4af28fb5f8a07eccc41a",
    "82dc3e0761f554df57a71ef4",
    "576b42e04f53f0827470df82",
    "c870938b8bc5ed517663f3ee",
]


def test_the_same_puts_store_the_same_index_entries_and_checkpoint_ids(tmp_path: Path) -> None:
    """Each index entry (its key, the cpstore checkpoint id it names, its body) is pinned."""
    store = open_store(tmp_path / "s", durability="none")
    try:
        got = _record(CpstoreSaver(store))
    finally:
        store.close()
    assert got == GOLDEN
