"""Chunk trees of a chosen height, built on purpose for the audit40 tall-tree tests.

A tree's height follows its digests (a level whose only complete node ends a node
again adds a level), so tall trees are rare in real data. Here the writer's grouping
rule is patched: the next ``forced`` nodes end after one entry, and then (``real``
False) no node ends at all, which fixes the height exactly for seeded data. The reader,
verify, retention and transfer never re-derive where nodes end (they check digests
and sizes only), so such a tree is as valid to them as one the real rule builds.
"""

from __future__ import annotations

import random

import pytest

from cpstore.store import append_state, chunk_tree
from cpstore.store.facade import Store

__all__ = ["DATA", "FORCED_64", "FORCED_65", "force_ends", "stored_height"]

#: Seeded: 20,000 bytes cut into 4 chunks; its tree's height follows the forced count.
DATA = random.Random(0).randbytes(20_000)
#: Nodes forced to end for a tree of exactly 64 levels (MAX_LEVEL) over DATA, and 65.
FORCED_64 = 250
FORCED_65 = 254


def force_ends(mp: pytest.MonkeyPatch, forced: int, *, real: bool = False) -> None:
    """The next ``forced`` nodes end after one entry; then nodes end as always (``real``)
    or never. Patched in both writers: build_tree and append_state's continued trees."""
    before = chunk_tree._ends_node
    left = [forced]

    def ends(key: bytes, count: int) -> bool:
        if count == 1 and left[0] > 0:
            left[0] -= 1
            return True
        return before(key, count) if real else False

    mp.setattr(chunk_tree, "_ends_node", ends)
    mp.setattr(append_state, "ends_node", ends)


def stored_height(store: Store, cid: str, name: str) -> int:
    """Levels of the stored tree of part ``name`` (``"bytes"``: a bytes state), read from
    the root and upper-spine objects the checkpoint names."""
    root = store.manifest(cid).raw["state"]["chunked"][name]
    _, _, _, upper = chunk_tree.read_root(store.get_object(root), "test")
    if upper is None:
        return 1
    return 1 + len(chunk_tree.read_upper(store.get_object(upper), "test"))
