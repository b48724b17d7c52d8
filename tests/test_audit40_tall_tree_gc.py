"""Retention keeps every object of a live 64-level chunk tree, however much of it a swept
tree shares, and sweeps exactly the swept tree's own objects (prune and delete_run).

audit40: gc marks live objects by walking chunk trees (tree_objects, with a set of nodes
already walked shared by every root): a node of a tall tree left unmarked would be
swept and the kept checkpoint made unreadable.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tall_tree import DATA, FORCED_64, force_ends, stored_height

import cpstore
from cpstore.native.canonical import encode_value
from cpstore.store.chunk_tree import MAX_LEVEL, build_tree, tree_objects
from cpstore.store.content import objects_of
from cpstore.store.facade import Store


def _tall(store: Store, run: str, step: int, value: bytes, forced: int) -> tuple[str, set[bytes]]:
    """Store ``{"big": value}`` as a tree with ``forced`` early ends; return the checkpoint
    and every object key of its tree, from build_tree (not from any walk under test)."""
    with pytest.MonkeyPatch.context() as m:
        force_ends(m, forced)
        cid = store.recorder(run).checkpoint(step, {"big": value})
    with pytest.MonkeyPatch.context() as m:
        force_ends(m, forced)
        tree = build_tree(encode_value(value), canonical=True)
    keys = set(tree.nodes) | {fkey for fkey, _, _ in tree.chunks}
    root = store.manifest(cid).raw["state"]["chunked"]["big"]
    assert root == tree.root
    with store.backend.read_txn() as txn:  # the walk gc and verify share names them all
        assert {root, *tree_objects(txn, objects_of(store.backend.dbs), root)} == keys
    return cid, keys


def _present(store: Store, keys: set[bytes]) -> set[bytes]:
    """Those of ``keys`` (plain objects and frames) the store holds."""
    objects = objects_of(store.backend.dbs)
    with store.backend.read_txn() as txn:
        return {k for k in keys if objects.get(txn, k) is not None}


def _intact(store: Store, cid: str, value: bytes) -> None:
    with store.read(cid) as cp:
        assert cp.state_part("big") == value
    assert store.verify_checkpoint(cid) == ()
    report = store.verify()
    assert report.ok, report.problems


def test_prune_keeps_the_tallest_tree_and_sweeps_only_its_ancestors_own_objects(
    tmp_path: Path,
) -> None:
    """The swept parent's tree is 64 levels too and shares its chunks and lower nodes."""
    grown = DATA + bytes(range(256)) * 4
    with cpstore.open(tmp_path / "s") as store:
        old, dead = _tall(store, "r", 0, DATA, FORCED_64)
        new, live = _tall(store, "r", 1, grown, FORCED_64)
        assert stored_height(store, new, "big") == stored_height(store, old, "big") == MAX_LEVEL
        assert len(live) > MAX_LEVEL and live & dead and dead - live
        dry = store.gc(keep_last=1, dry_run=True)
        report = store.gc(keep_last=1)
        assert report.checkpoints == dry.checkpoints == (old,)
        assert report.objects_removed == dry.objects_removed == len(dead - live)
        assert _present(store, live) == live
        assert _present(store, dead - live) == set()
        _intact(store, new, grown)


def test_deleting_a_run_keeps_a_tall_tree_another_run_shares(tmp_path: Path) -> None:
    """Two trees over the same bytes grouped differently (64 and 33 levels) share frames
    and lower nodes; deleting the run of either leaves the other whole."""
    for gone, kept_forced, gone_forced in (("b", FORCED_64, 128), ("a", 128, FORCED_64)):
        with cpstore.open(tmp_path / gone) as store:
            keep, live = _tall(store, "a" if gone == "b" else "b", 0, DATA, kept_forced)
            drop, dead = _tall(store, gone, 0, DATA, gone_forced)
            heights = {stored_height(store, keep, "big"), stored_height(store, drop, "big")}
            assert MAX_LEVEL in heights and len(heights) == 2
            assert live & dead and dead - live
            report = store.gc(delete_run=gone)
            assert report.checkpoints == (drop,)
            assert report.objects_removed == len(dead - live)
            assert _present(store, live) == live
            assert _present(store, dead - live) == set()
            _intact(store, keep, DATA)
