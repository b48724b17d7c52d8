"""A PostgreSQL store keeps 64-level chunk trees like an embedded one: written, read back
(verified and not), verified, counted by stats, kept live by gc, and one level more refused.

audit40: the PostgreSQL backend reads objects by its own queries (pg_txn); the tree walk
on top is the same, and this runs it on a real server (tests/pg_cluster.py).
"""

from __future__ import annotations

import pytest
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures
from tall_tree import DATA, FORCED_64, FORCED_65, force_ends, stored_height

import cpstore
from cpstore.cli import EXIT_OK, main
from cpstore.errors import InvalidInputError
from cpstore.store.chunk_tree import MAX_LEVEL
from cpstore.store.stats import store_stats

GROWN = DATA + bytes(range(256)) * 4


def test_a_postgresql_store_reads_verifies_and_keeps_the_tallest_trees(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with cpstore.open(pg_url) as store:
        rec = store.recorder("r")
        cids = []
        for step, value in enumerate((DATA, GROWN)):
            with monkeypatch.context() as m:
                force_ends(m, FORCED_64)
                cids.append(rec.checkpoint(step, {"big": value}))
        for cid, value in zip(cids, (DATA, GROWN), strict=True):
            assert stored_height(store, cid, "big") == MAX_LEVEL
            for verify in (True, False):
                with store.read(cid, verify=verify) as cp:
                    assert cp.state_part("big") == value
            assert store.verify_checkpoint(cid) == ()
        assert store.verify().ok
        assert store_stats(store).unreferenced_bytes == 0
        report = store.gc(keep_last=1)
        assert report.checkpoints == (cids[0],) and report.objects_removed > 0
        with store.read(cids[1]) as cp:
            assert cp.state_part("big") == GROWN
        assert store.verify_checkpoint(cids[1]) == ()
        assert store.verify().ok
    assert main(["verify", "--store", pg_url]) == EXIT_OK  # the walk in a child process


def test_a_postgresql_store_refuses_a_tree_one_level_too_tall(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with cpstore.open(pg_url) as store:
        with monkeypatch.context() as m:
            force_ends(m, FORCED_65)
            with pytest.raises(InvalidInputError, match="taller than any read accepts"):
                store.recorder("r").checkpoint(0, {"big": DATA})
        assert store.ref("r") is None
        assert store_stats(store).objects == 0
