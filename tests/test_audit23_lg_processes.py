"""audit23: two processes putting layout-2 checkpoints onto one layout-1 parent at once."""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint
from test_audit23_lg_layouts import _cfg, _entry, _oracle_tuple, _record_layout_1

import cpstore.store as cpstore_store
from cpstore.langgraph import CpstoreSaver
from cpstore.langgraph._codec import HEAD_KEY

PUTS = 8


def _putter(path: str, name: str, root: str) -> list[tuple[str, str]]:
    """Put PUTS checkpoints: even ones fork from the layout-1 ``root``, odd ones continue
    the last; channel ``b`` is never passed (its version is the root's: inherited)."""
    out: list[tuple[str, str]] = []
    with CpstoreSaver.from_conn_string(path) as saver:
        parent = root
        for i in range(PUTS):
            cp: dict[str, Any] = dict(empty_checkpoint())
            value = f"{name}{i}"
            cp["channel_values"] = {"a": value}
            cp["channel_versions"] = {"a": f"{10 + i:032}.0", "b": f"{2:032}.0"}
            got = saver.put(
                _cfg(root if i % 2 == 0 else parent),
                cp,
                {"source": "loop", "step": 2 + i % 2, "parents": {}},
                {"a": cp["channel_versions"]["a"]},
            )
            parent = got["configurable"]["checkpoint_id"]
            out.append((parent, value))
    return out


def test_two_processes_forking_from_a_layout_1_parent_lose_nothing(tmp_path: Path) -> None:
    """Both processes read the layout-1 parent's parts for the inherited channel while
    the other forks and continues: every acknowledged checkpoint is layout 2, reads as
    the view-only oracle reads it, with the inherited value; the store verifies."""
    path = str(tmp_path / "s")
    with cpstore_store.open(path) as st:
        ids = _record_layout_1(
            CpstoreSaver(st), [{"a": "v0", "b": [1, 2]}, {"a": "v1", "b": [1, 2]}]
        )
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        results = pool.starmap(_putter, [(path, "p", ids[-1]), (path, "q", ids[-1])])
    with cpstore_store.open(path) as st:
        saver = CpstoreSaver(st)
        acked = [pair for result in results for pair in result]
        assert len({cid for cid, _ in acked}) == 2 * PUTS
        for checkpoint_id, value in acked:
            got = saver.get_tuple(_cfg(checkpoint_id))
            assert got is not None
            assert got.checkpoint["channel_values"] == {"a": value, "b": [1, 2]}
            entry = _entry(st, checkpoint_id)
            assert got == _oracle_tuple(saver, entry)
            with st.read(entry.cid.hex()) as view:
                assert HEAD_KEY in view.manifest.metadata
                assert "checkpoint" not in view.manifest.raw["state"]["parts"]
        listed = {t.config["configurable"]["checkpoint_id"] for t in saver.list(_cfg())}
        assert listed == {cid for cid, _ in acked} | set(ids)
        assert st.verify().ok
