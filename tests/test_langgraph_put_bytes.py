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


#: Recorded at LangGraph checkpoint layout 2 (issue 12: the head in the manifest's
#: metadata); the layout-1 values (head as state parts) began ba392f445a82d5fda35dac5d.
GOLDEN = [
    "ae53e47fa0385b73d3faad11",
    "c388f6768f8d19e1664efca6",
    "65f126a1f4360d1ce95960e2",
    "1faca0eba4f92143b875a256",
    "e55280455da91f51516582f2",
    "56eeddc51932a46968abaa3b",
    "92a9b62db88e26762ab5f87c",
    "68796948f0116d6e12b8c1f4",
    "38088730f298d0ba89a6733d",
    "ce91f601310f8883081b9f1b",
    "469d955df91d99457662cc4f",
    "78ff9373aea137f6f4116e90",
    "f87775db02a9d950ed71c0c7",
    "844b2ec1a90abef6beabebcc",
]


def test_the_same_puts_store_the_same_index_entries_and_checkpoint_ids(tmp_path: Path) -> None:
    """Each index entry (its key, the cpstore checkpoint id it names, its body) is pinned."""
    store = open_store(tmp_path / "s", durability="none")
    try:
        got = _record(CpstoreSaver(store))
    finally:
        store.close()
    assert got == GOLDEN
