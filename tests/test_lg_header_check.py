"""The LangGraph saver's reads check a checkpoint record's ``created_at`` header as every
verified read does (CheckpointView): found by audit19's read oracle in CI on layout 2,
where ``get_tuple`` and ``list`` take the LangGraph head from the manifest, through
``StateReads``, which skipped that check."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from pg_cluster import (  # noqa: F401 - fixtures
    backend_store,
    pg_cluster,
    pg_url,
)
from stored import raw_get, raw_put

from cpstore.errors import IntegrityError
from cpstore.langgraph import CpstoreSaver
from cpstore.store import Store
from cpstore.store.lg_states import StateReads

THREAD = "t-hdr"


def _flip_created_at(store: Store, cid: bytes) -> None:
    """Flip one byte of the record's created_at (covered by its header check, not the id)."""
    dbs = store.backend.dbs

    def apply(txn: Any) -> None:
        old = raw_get(txn, dbs, "checkpoints", cid)
        if old is None:
            raise AssertionError("the record is not stored")
        raw_put(txn, dbs, "checkpoints", cid, bytes([old[0] ^ 1]) + old[1:])

    store.backend.write_txn(apply)


def test_a_damaged_created_at_is_refused_by_get_tuple_list_and_state_reads(store: Store) -> None:
    """get_tuple, list and state_and_metadata raise IntegrityError naming created_at (the
    manifest is used, as the view's manifest); a state-only read does not, as view.state()."""
    saver = CpstoreSaver(store)
    cp: dict[str, Any] = dict(empty_checkpoint())
    cp["channel_values"] = {"a": "x"}
    cp["channel_versions"] = {"a": "1"}
    conf = {"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}}
    config = saver.put(conf, cp, {"step": 0}, {"a": "1"})
    assert saver.get_tuple(config) is not None
    cid = bytes.fromhex(store.resolve(f"lg:{THREAD}@main"))
    _flip_created_at(store, cid)
    fresh = CpstoreSaver(store)  # nothing of the put kept
    with pytest.raises(IntegrityError, match="created_at"):
        fresh.get_tuple(config)
    with pytest.raises(IntegrityError, match="created_at"):
        list(fresh.list(conf))
    with store.backend.read_txn() as txn:
        reads = StateReads(store.backend, txn)
        assert reads.state(cid) is not None  # the state alone: as CheckpointView.state()
        with pytest.raises(IntegrityError, match="created_at"):
            reads.state_and_metadata(cid)  # the manifest used: as CheckpointView.manifest
