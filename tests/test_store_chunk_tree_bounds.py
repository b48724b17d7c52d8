"""A chunk tree naming one chunk over and over cannot make a read allocate past its root size."""

from __future__ import annotations

import os
from typing import Any, cast

import msgpack
import pytest

from cpstore.errors import IntegrityError
from cpstore.native.binding import digest
from cpstore.store.chunk_tree import load_tree, tree_objects
from cpstore.store.codec import encode_frame, frame_key
from cpstore.store.content import objects_of

#: Objects read straight from the fake txn (no heap tables: content.py's direct form).
_DIRECT = objects_of({"objects": None})


class _Txn:
    """The one read a tree walk makes: ``get(key, default, db)`` over a dict."""

    def __init__(self, objects: dict[bytes, bytes]) -> None:
        self.objects = objects
        self.reads = 0

    def get(self, key: bytes, default: Any = None, db: Any = None) -> memoryview | None:
        self.reads += 1
        value = self.objects.get(bytes(key))
        return default if value is None else memoryview(value)


def _pack(value: Any) -> bytes:
    packed: bytes = msgpack.packb(value, use_bin_type=True)
    return packed


def _hostile() -> tuple[dict[bytes, bytes], bytes, bytes]:
    """A 3-level tree whose nodes each name one child 2000 times: (objects, root, frame)."""
    chunk = os.urandom(1024)
    cd = digest(chunk)
    objects = {frame_key(cd): encode_frame(chunk)}
    keys = cd
    for level in (1, 2, 3):
        node = _pack([level, len(chunk) * 2000**level, keys * 2000])
        keys = digest(node)
        objects[keys] = node
    root = _pack({"head": b"", "size": len(chunk), "spine": [b"", b"", b"", keys]})
    objects[digest(root)] = root
    return objects, digest(root), frame_key(cd)


def test_listing_a_tree_that_repeats_its_nodes_walks_each_node_once() -> None:
    """What retention, verify and transfer list under a root: 8e9 paths, a few reads."""
    objects, root, frame = _hostile()
    txn = _Txn(objects)
    listed = set(tree_objects(cast(Any, txn), _DIRECT, root))
    assert listed == set(objects) - {root}
    assert frame in listed
    assert txn.reads < 10


@pytest.mark.parametrize("verify", [True, False])
def test_a_tree_repeating_one_chunk_is_refused_once_it_passes_the_root_size(verify: bool) -> None:
    """Level-2 node x 2000 -> level-1 node x 2000 -> one 64 KiB frame: refused, not 256 GB read."""
    chunk = os.urandom(64 << 10)
    cd = digest(chunk)
    objects = {frame_key(cd): encode_frame(chunk)}
    node1 = _pack([1, len(chunk) * 2000, cd * 2000])
    n1 = digest(node1)
    node2 = _pack([2, len(chunk) * 2000 * 2000, n1 * 2000])
    n2 = digest(node2)
    root = _pack({"head": b"", "size": 2 * len(chunk), "spine": [b"", b"", n2]})
    objects.update({n1: node1, n2: node2, digest(root): root})
    txn = _Txn(objects)
    with pytest.raises(IntegrityError, match="more bytes than its root"):
        load_tree(cast(Any, txn), _DIRECT, digest(root), b"\0" * 16, verify=verify, where="state.x")
    assert txn.reads < 100  # stopped at the root's size, not after 4 million frames
