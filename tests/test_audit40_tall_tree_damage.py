"""Damage at the bottom of a 64-level chunk tree is found by every walk that must find it:
verify and verify_checkpoint name it, a read refuses, checkpoints_reaching names the
checkpoint, and gc stops rather than sweep by a walk that ended early.

audit40: the walks (tree_objects, load_tree) end a branch quietly at a node they cannot
read; a bound met part-way down would look the same, so the lost object here sits under
62 nodes and an upper spine, where only a walk of all 64 levels reaches it.
"""

from __future__ import annotations

from pathlib import Path

import msgpack
import pytest
from tall_tree import DATA, FORCED_64, force_ends, stored_height

import cpstore
from cpstore.errors import IntegrityError
from cpstore.native.canonical import encode_value
from cpstore.store.affected import checkpoints_reaching
from cpstore.store.chunk_tree import MAX_LEVEL, build_tree
from cpstore.store.content import objects_of


def test_a_lost_bottom_node_of_the_tallest_tree_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as m:
        force_ends(m, FORCED_64)
        tree = build_tree(encode_value(DATA), canonical=True)
    bottom = sorted(k for k, node in tree.nodes.items() if msgpack.unpackb(node)[0] == 1)
    assert bottom and all(k != tree.root for k in bottom)
    lost = bottom[0]
    with cpstore.open(tmp_path / "s") as store:
        rec = store.recorder("r")
        rec.checkpoint(0, {"small": 1})
        with monkeypatch.context() as m:
            force_ends(m, FORCED_64)
            cid = rec.checkpoint(1, {"big": DATA})
        assert stored_height(store, cid, "big") == MAX_LEVEL
        assert store.verify().ok
        objects = objects_of(store.backend.dbs)
        store.backend.write_txn(lambda txn: objects.delete(txn, lost))

        report = store.verify()
        assert not report.ok
        assert any(lost.hex() in f"{p.where} {p.got}" for p in report.problems), report.problems
        found = store.verify_checkpoint(cid)
        assert any(lost.hex() in f"{p.where} {p.got}" for p in found), found
        with pytest.raises(IntegrityError, match="not in the store"), store.read(cid) as cp:
            cp.state_part("big")
        assert [a[0] for a in checkpoints_reaching(store.backend, [lost])[lost.hex()]] == [cid]
        with pytest.raises(IntegrityError, match="sweep stops") as err:
            store.prune(keep_last=1)
        assert err.value.where == f"objects/{lost.hex()}"
        assert len(store.history("r")) == 2  # nothing swept
