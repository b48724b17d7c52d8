"""``prune`` (keep_latest) of a thread whose id is long but storable: the audit reason it
writes was built from the id's repr and refused over 200 bytes (ids over ~160 bytes)
*after* the kept checkpoints were re-recorded, so the old branches were never reset or
swept (found by a study after session 13's CI). It now ends as for a short id."""

from __future__ import annotations

import pytest
from lg_puts import cfg, put_value
from pg_cluster import backend_store, pg_cluster, pg_url  # noqa: F401 - fixtures

from cpstore.langgraph import CpstoreSaver
from cpstore.langgraph._codec import run_for
from cpstore.store import Store


def _prune_outcome(store: Store, thread: str) -> tuple[list[str], int, bool]:
    """Put three checkpoints, prune keep_latest: (values listed, branches of the run, verify ok)."""
    saver = CpstoreSaver(store)
    parent = None
    for value in ("a1", "a2", "a3"):
        parent = put_value(saver, thread, parent, value)
    saver.prune([thread])
    listed = [t.checkpoint["channel_values"]["x"] for t in saver.list(cfg(thread))]
    return listed, len(store.branches(run_for(thread))), store.verify().ok


@pytest.mark.parametrize("size", [150, 161, 197, 300])
def test_prune_of_a_long_thread_id_ends_as_for_a_short_one(store: Store, size: int) -> None:
    """Ids of 161 and 197 bytes (plain runs) and 300 bytes (a hashed run) were refused
    after the re-record (two branches left, both kept); 150 bytes always worked."""
    short = _prune_outcome(store, "short")
    assert short == (["a3"], 1, True)
    assert _prune_outcome(store, "t" * size) == short
