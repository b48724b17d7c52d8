"""Chunk trees: large values cut where their content says, indexed by a tree of digests.

A state part (or bytes state) whose stored bytes are longer than
:data:`TREE_THRESHOLD` is stored as a *chunk tree* (docs/format.md, "Chunk
trees", store layout 4):

- **cuts**: a part's canonical encoding of a list or map is cut after its
  header and then at top-level element ends, a cut falling at the first
  element end at least :data:`RUN_MIN` bytes after the last cut; a run longer
  than ``CHUNK_MAX`` is cut inside by the content-defined chunker
  (:func:`cpstore.native.binding.chunk_cuts`). Anything else (a bytes state,
  one long str) is cut by the chunker alone. So appending to a list, or
  appending bytes, leaves every earlier chunk as it was.
- **chunks** are stored as frames (:mod:`cpstore.store.codec`: compressed when
  that is smaller, keyed by the digest of their bytes).
- **nodes**: the canonical list ``[level, size, [digest, ...]]``: a level-1
  node lists chunk digests, a level-k node lists level-(k-1) node digests;
  ``size`` is the bytes the node spans. Entries are grouped into nodes the
  way Prolly trees do: a node ends after an entry whose digest's last byte
  has its low :data:`FANOUT_BITS` bits clear (1 in 8), or at
  :data:`MAX_FANOUT` entries, so an append rewrites one node per level and
  the index of a long history is not stored again. Levels are built until
  one node remains: the *root*, whose digest the manifest names in
  ``state.chunked``. Nodes are plain objects (digest of their bytes).

A layout-2 chunk index (``[size, [digest, ...]]`` over fixed 64 KiB raw
chunks) is still read: the root's entry count says which it is.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import msgpack

from cpstore.errors import CanonicalEncodingError, IntegrityError
from cpstore.native.binding import chunk_cuts, digest, digest_batch
from cpstore.native.canonical import decode_value, encode_value
from cpstore.native.chunking import CHUNK_MAX
from cpstore.native.records import DIGEST_SIZE
from cpstore.store.backend import Txn
from cpstore.store.codec import check_frame, decode_frame, encode_frame, frame_key

__all__ = [
    "FANOUT_BITS",
    "MAX_FANOUT",
    "MAX_LEVEL",
    "RUN_MIN",
    "TREE_THRESHOLD",
    "ChunkTree",
    "build_tree",
    "load_tree",
    "read_index",
    "stash_tree",
    "tree_objects",
    "value_cuts",
]

#: Values whose stored bytes are longer than this are chunk trees.
TREE_THRESHOLD = 4 * 1024
#: Element runs: cut at the first top-level element end this far past the last cut.
RUN_MIN = 512
#: A node ends after an entry whose digest's last byte has these bits clear.
FANOUT_BITS = 0x07
#: ...or when it has this many entries.
MAX_FANOUT = 64
#: Deepest tree read (64**12 chunks is far past any value cpstore accepts).
MAX_LEVEL = 12

_ARRAY = frozenset(range(0x90, 0xA0)) | {0xDC, 0xDD}
_MAP = frozenset(range(0x80, 0x90)) | {0xDE, 0xDF}


def _cdc(data: bytes, start: int, end: int, out: list[int]) -> None:
    out.extend(start + c for c in chunk_cuts(memoryview(data)[start:end]))


def value_cuts(data: bytes, *, canonical: bool) -> list[int]:
    """Chunk end offsets of ``data`` (see the module docstring); the last is ``len(data)``."""
    cuts: list[int] = []
    if not data:
        return cuts
    if not canonical or (data[0] not in _ARRAY and data[0] not in _MAP):
        _cdc(data, 0, len(data), cuts)
        return cuts
    unpacker = msgpack.Unpacker(max_buffer_size=max(len(data), 1))
    unpacker.feed(data)
    is_map = data[0] in _MAP
    count = unpacker.read_map_header() if is_map else unpacker.read_array_header()
    start = unpacker.tell()
    cuts.append(start)
    for _ in range(count):
        unpacker.skip()
        if is_map:
            unpacker.skip()
        end = unpacker.tell()
        if end - start >= RUN_MIN:
            if end - start > CHUNK_MAX:
                _cdc(data, start, end, cuts)
            else:
                cuts.append(end)
            start = end
    if start < len(data):
        cuts.append(len(data))  # the tail run is shorter than RUN_MIN
    return cuts


@dataclass
class ChunkTree:
    """What a chunked value stores: its root, its nodes and its chunks."""

    whole: bytes
    """Digest of the whole value (what the manifest's part digest says)."""
    root: bytes
    """Digest of the root node (``state.chunked``)."""
    nodes: dict[bytes, bytes] = field(default_factory=dict)
    """Node digest -> node bytes (plain objects), the root included."""
    chunks: list[tuple[bytes, int, int]] = field(default_factory=list)
    """(frame key, start, end) of each chunk, in order."""


def _ends_node(key: bytes, count: int) -> bool:
    return not key[DIGEST_SIZE - 1] & FANOUT_BITS or count >= MAX_FANOUT


def build_tree(data: bytes, *, canonical: bool) -> ChunkTree:
    """Cut ``data``, hash every chunk (one native call) and build the node levels."""
    cuts = value_cuts(data, canonical=canonical)
    offsets = [0, *cuts]
    digests = digest_batch(data, offsets)
    keys = [digests[i : i + DIGEST_SIZE] for i in range(0, len(digests), DIGEST_SIZE)]
    tree = ChunkTree(whole=digest(data), root=b"")
    tree.chunks = [
        (frame_key(k), offsets[i], offsets[i + 1]) for i, k in enumerate(keys)
    ]
    sizes = [b - a for a, b in zip(offsets, cuts, strict=False)]
    level = 1
    while True:
        groups: list[tuple[list[bytes], int]] = []
        run: list[bytes] = []
        span = 0
        for key, size in zip(keys, sizes, strict=True):
            run.append(key)
            span += size
            if _ends_node(key, len(run)):
                groups.append((run, span))
                run, span = [], 0
        if run:
            groups.append((run, span))
        keys, sizes = [], []
        for entries, span in groups:
            node = encode_value([level, span, entries])
            key = digest(node)
            tree.nodes[key] = node
            keys.append(key)
            sizes.append(span)
        if len(keys) == 1:
            tree.root = keys[0]
            return tree
        level += 1


def stash_tree(
    tree: ChunkTree, data: bytes, pending: dict[bytes, bytes], stored: set[bytes]
) -> list[bytes]:
    """Add the tree's objects that ``stored`` lacks to ``pending``; return every key.

    Only chunks not yet stored are sliced and compressed, so a checkpoint
    after an append frames the appended chunks, not the whole value.
    """
    keys = list(tree.nodes)
    for key, node in tree.nodes.items():
        if key not in stored:
            pending[key] = node
    for fkey, start, end in tree.chunks:
        keys.append(fkey)
        if fkey not in stored and fkey not in pending:
            pending[fkey] = encode_frame(memoryview(data)[start:end])
    return keys


def _bad(what: str, where: str, got: object = None, expected: object = None) -> IntegrityError:
    return IntegrityError(what, where=where, expected=expected, got=got)


def read_index(raw: bytes | memoryview, where: str) -> tuple[int, int, list[bytes]]:
    """(level, size, child digests) of a node; level 0 is a layout-2 chunk index."""
    try:
        value: Any = decode_value(raw)
    except CanonicalEncodingError as exc:
        raise _bad("chunk index is malformed", where, got=str(exc)) from None
    if isinstance(value, list) and len(value) == 2:
        value = [0, *value]
    ok = (
        isinstance(value, list)
        and len(value) == 3
        and type(value[0]) is int
        and 0 <= value[0] <= MAX_LEVEL
        and type(value[1]) is int
        and value[1] >= 0
        and isinstance(value[2], list)
        and all(isinstance(k, bytes) and len(k) == DIGEST_SIZE for k in value[2])
        and (value[0] == 0 or value[2])
    )
    if not ok:
        raise _bad("chunk index is malformed", where, got=bytes(raw)[:64])
    return value[0], value[1], value[2]


def _get(txn: Txn[memoryview], objects: Any, key: bytes, where: str) -> memoryview:
    view = txn.get(key, None, objects)
    if view is None:
        raise IntegrityError("object not in the store", where=where, got=bytes(key).hex())
    return view


def load_tree(
    txn: Txn[memoryview], objects: Any, root: bytes, whole: bytes, *, verify: bool, where: str
) -> bytes:
    """Reassemble a chunk tree (or a layout-2 index) and check it against ``whole``."""
    pieces: list[bytes] = []
    root_raw = _get(txn, objects, root, f"{where} (chunk index)")
    if verify and digest(root_raw) != root:
        raise _bad(
            "object bytes do not match their digest",
            f"{where} (chunk index)",
            got=digest(root_raw).hex(),
            expected=bytes(root).hex(),
        )
    level, size, keys = read_index(root_raw, f"{where} (chunk index)")
    if level == 0:
        for i, key in enumerate(keys):
            view = _get(txn, objects, key, f"{where} chunk {i}")
            if verify and digest(view) != key:
                raise _bad(
                    "object bytes do not match their digest",
                    f"{where} chunk {i}",
                    got=digest(view).hex(),
                    expected=key.hex(),
                )
            pieces.append(bytes(view))
    else:
        _walk(txn, objects, (level, size, keys), pieces, verify=verify, where=where)
    data = b"".join(pieces)
    if len(data) != size or (verify and digest(data) != whole):
        raise _bad(
            "chunked value does not match its digest",
            where,
            expected=bytes(whole).hex(),
            got=digest(data).hex(),
        )
    return data


def _walk(
    txn: Txn[memoryview],
    objects: Any,
    node: tuple[int, int, list[bytes]],
    out: list[bytes],
    *,
    verify: bool,
    where: str,
) -> int:
    """Append the chunks under a node of ``level`` to ``out``; return their byte count.

    A verified read checks each node's size against the bytes under it.
    """
    level, size, keys = node
    total = 0
    if level == 1:
        for key in keys:
            fkey = frame_key(key)
            at = f"{where} chunk {key.hex()}"
            view = _get(txn, objects, fkey, at)
            piece = check_frame(fkey, view, at) if verify else decode_frame(view, at)
            out.append(piece)
            total += len(piece)
    else:
        for key in keys:
            at = f"{where} node {key.hex()}"
            raw = _get(txn, objects, key, at)
            if verify and digest(raw) != key:
                raise _bad("object bytes do not match their digest", at, got=digest(raw).hex())
            child = read_index(raw, at)
            if child[0] != level - 1:
                raise _bad("chunk tree node is at the wrong level", at, child[0], level - 1)
            total += _walk(txn, objects, child, out, verify=verify, where=at)
    if verify and total != size:
        raise _bad("chunk tree node spans the wrong size", where, got=total, expected=size)
    return total


def tree_objects(txn: Txn[memoryview], objects: Any, root: bytes) -> Iterator[bytes]:
    """Keys of every object under a root (nodes and frames; chunks of a layout-2 index).

    Missing or malformed nodes end their branch quietly: callers (retention,
    verify) report those themselves.
    """
    raw = txn.get(root, None, objects)
    if raw is None:
        return
    try:
        level, _, keys = read_index(raw, "")
    except IntegrityError:
        return
    if level == 0:
        yield from keys
        return
    stack = [(level, keys)]
    while stack:
        level, keys = stack.pop()
        for key in keys:
            if level == 1:
                yield frame_key(key)
                continue
            yield key
            child = txn.get(key, None, objects)
            if child is None:
                continue
            try:
                child_level, _, child_keys = read_index(child, "")
            except IntegrityError:
                continue
            if child_level == level - 1:
                stack.append((child_level, child_keys))
