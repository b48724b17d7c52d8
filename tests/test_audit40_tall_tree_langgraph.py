"""The LangGraph saver stores a large channel value as a chunk tree (through its recorder);
a tall one is read back by get_tuple and list, survives copy_thread and the saver's prune,
and verifies.

audit40: the saver reads checkpoints by its own paths (cpstore/langgraph/_read.py, the
cached states of lg_states.py leave chunked states to the reader); these must reach the
same tree walk as store.read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures
from tall_tree import DATA, force_ends, stored_height

from cpstore.errors import InvalidInputError
from cpstore.langgraph import CpstoreSaver
from cpstore.store.chunk_tree import MAX_LEVEL
from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store

BIG = DATA.hex()  # a 40,000-character str channel value: stored as a chunk tree


def _checkpoint(step: int, values: dict[str, Any]) -> dict[str, Any]:
    versions = {k: f"{step + 1:032}.0" for k in values}
    return {
        "v": 4,
        "id": f"1f0c0000-0000-6000-8000-{step:012d}",
        "ts": f"2026-01-01T00:00:{step:02d}+00:00",
        "channel_values": dict(values),
        "channel_versions": versions,
        "versions_seen": {},
        "updated_channels": sorted(values),
    }


def _tallest_height(store: Store) -> int:
    """The height of the tallest chunk tree any head checkpoint names."""
    heights = [0]
    for run in store.runs():
        for head in store.branches(run).values():
            for name in store.manifest(head).raw["state"]["chunked"] or {}:
                heights.append(stored_height(store, head, name))
    return max(heights)


def _config(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


@pytest.mark.parametrize("kind", ["lmdb", "pg"])
def test_a_tall_channel_value_is_read_back_by_the_saver(
    kind: str, tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(tmp_path / "s" if kind == "lmdb" else pg_url)
    try:
        saver = CpstoreSaver(store)
        config = _config("t")
        for step, big in enumerate((BIG, BIG + "more" * 300)):
            values = {"big": big, "n": step}
            meta = {"source": "loop", "step": step, "parents": {}}
            versions = {k: f"{step + 1:032}.0" for k in values}
            with monkeypatch.context() as m:
                force_ends(m, 300, real=True)
                config = saver.put(config, _checkpoint(step, values), meta, versions)
        assert 12 < _tallest_height(store) <= MAX_LEVEL
        got = saver.get_tuple(_config("t"))
        assert got is not None
        assert got.checkpoint["channel_values"] == {"big": BIG + "more" * 300, "n": 1}
        listed = [t.checkpoint["channel_values"]["big"] for t in saver.list(_config("t"))]
        assert listed == [BIG + "more" * 300, BIG]
        saver.copy_thread("t", "u")
        copied = saver.get_tuple(_config("u"))
        assert copied is not None and copied.checkpoint["channel_values"]["n"] == 1
        saver.prune(["t"], strategy="keep_latest")
        kept = saver.get_tuple(_config("t"))
        assert kept is not None
        assert kept.checkpoint["channel_values"]["big"] == BIG + "more" * 300
        report = store.verify()
        assert report.ok, report.problems
    finally:
        store.close()


def test_a_put_refused_as_too_tall_leaves_the_saver_able_to_go_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The saver keeps a recorder and the last values per branch: a refused put must
    change neither, and the next put (of the same values) is stored and read back."""
    store = open_store(tmp_path / "s")
    try:
        saver = CpstoreSaver(store)
        meta = {"source": "loop", "step": 0, "parents": {}}
        first = saver.put(_config("t"), _checkpoint(0, {"n": 0}), meta, {"n": f"{1:032}.0"})
        values = {"big": BIG, "n": 1}
        versions = {k: f"{2:032}.0" for k in values}
        meta = {"source": "loop", "step": 1, "parents": {}}
        with monkeypatch.context() as m:
            force_ends(m, 10_000)
            with pytest.raises(InvalidInputError, match="taller than any read accepts"):
                saver.put(first, _checkpoint(1, values), meta, versions)
        got = saver.get_tuple(_config("t"))
        assert got is not None and got.checkpoint["channel_values"] == {"n": 0}
        saver.put(first, _checkpoint(1, values), meta, versions)
        got = saver.get_tuple(_config("t"))
        assert got is not None and got.checkpoint["channel_values"] == values
        assert [t.checkpoint["channel_values"]["n"] for t in saver.list(_config("t"))] == [1, 0]
        assert store.verify().ok
    finally:
        store.close()
