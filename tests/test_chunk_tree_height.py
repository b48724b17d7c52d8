"""A chunk tree of any height the writer builds is read back; one no read accepts is
never stored.

A tree's height is not log64 of its chunks: a level whose only complete node ends a node
again (~1 in 4) adds a level. The reader's bound was 12 levels, which that chain reaches
in ~1e-6 of chunked values, while the writer had no bound: ci18 stored a 13-level tree for
a 60 KB value and acknowledged its checkpoint, and every read of it then failed "chunk
index is malformed" (tests/test_audit34_batched_growth_order.py). Here nodes are forced to
end early so the chain is built on purpose.
"""

from __future__ import annotations

import random
from pathlib import Path

import msgpack
import pytest

import cpstore
from cpstore.errors import InvalidInputError
from cpstore.store import append_state, chunk_tree

#: Seeded: the tree's shape follows the chunks' digests, so its height is fixed (17 levels
#: with 60 nodes forced to end early; random data gave 11 to 17, and 11 was too short).
_DATA = random.Random(0).randbytes(20_000)


def _force_ends(monkeypatch: pytest.MonkeyPatch, forced: int) -> None:
    """The next ``forced`` nodes end after one entry, then nodes end as always."""
    real = chunk_tree._ends_node
    left = [forced]

    def ends(key: bytes, count: int) -> bool:
        if count == 1 and left[0] > 0:
            left[0] -= 1
            return True
        return real(key, count)

    monkeypatch.setattr(chunk_tree, "_ends_node", ends)
    monkeypatch.setattr(append_state, "ends_node", ends)


def _height(data: bytes) -> int:
    tree = chunk_tree.build_tree(data, canonical=False)
    upper = msgpack.unpackb(tree.nodes[tree.root])[4]
    return 1 + (len(msgpack.unpackb(tree.nodes[upper])) if upper else 0)


def test_a_tree_taller_than_twelve_levels_is_read_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _DATA
    with monkeypatch.context() as m:
        _force_ends(m, 60)
        assert _height(data) >= 13
    with cpstore.open(tmp_path / "s") as store:
        with monkeypatch.context() as m:
            _force_ends(m, 60)
            cid = store.recorder("r").checkpoint(0, {"big": data})
        with store.read(cid) as cp:  # IntegrityError "chunk index is malformed" before
            assert cp.state() == {"big": data}
        assert store.verify().ok


def test_a_tree_taller_than_any_read_accepts_is_never_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _DATA
    with cpstore.open(tmp_path / "s") as store:
        rec = store.recorder("r")
        with monkeypatch.context() as m:
            _force_ends(m, 10_000)
            with pytest.raises(InvalidInputError, match="taller than any read accepts"):
                rec.checkpoint(0, {"big": data})
        assert store.ref("r") is None
        cid = store.recorder("r").checkpoint(0, {"big": data})
        with store.read(cid) as cp:
            assert cp.state() == {"big": data}
        assert store.verify().ok
