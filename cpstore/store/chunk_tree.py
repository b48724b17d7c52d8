"""Chunk trees: large values cut where their content says, indexed by a tree of digests.

A state part (or bytes state) whose stored bytes are longer than
:data:`TREE_THRESHOLD` is stored as a *chunk tree* (docs/format.md, "Chunk
trees", store layout 3):

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
  has its low :data:`FANOUT_BITS` bits clear (1 in 4), or at
  :data:`MAX_FANOUT` entries, so an append rewrites one node per level and
  the index of a long history is not stored again. Each level's *tail*
  (its entries after its last complete node) is the *spine*.
- **root v2** (layouts 4, 5): ``[2, head, size, tail1, upper]``: level 1's
  tail inline, and ``upper`` the digest of the *upper-spine* object, the
  canonical list ``[tail2, ..., tailL]`` (empty bytes when the tree has one
  level). The upper spine changes only when a level-1 node completes, so an
  append rewrites a small root and, now and then, one upper-spine object.
  The manifest names the root in ``state.chunked``. Nodes, roots and upper
  spines are plain objects (digest of their bytes).

Still read: a layout-3 root (root v1, the map ``{head, size, spine}`` with
every level's tail inline) and a layout-2 chunk index (``[size, [digest,
...]]`` over fixed 64 KiB raw chunks); the root's shape says which it is.
"""

from __future__ import annotations

import contextlib
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import accumulate, repeat
from typing import Any

import msgpack

from cpstore.errors import IntegrityError, InvalidInputError
from cpstore.native.binding import chunk_cuts, digest, digest_batch
from cpstore.native.chunking import CHUNK_MAX
from cpstore.native.records import DIGEST_SIZE
from cpstore.store.backend import Txn
from cpstore.store.chunk_nodes import (
    MAX_LEVEL,
    ROOT_VERSION,
    bad,
    read_node,
    read_root,
    read_upper,
    read_v2_index,
)
from cpstore.store.codec import (
    FRAME_TAG,
    Decompressor,
    decoder,
    encode_frame,
    frame_key,
    frame_sizes,
    inflate_frames,
    read_frame,
)
from cpstore.store.content import Content

__all__ = [
    "FANOUT_BITS",
    "MAX_FANOUT",
    "MAX_LEVEL",
    "ROOT_VERSION",
    "RUN_MIN",
    "TREE_THRESHOLD",
    "ChunkTree",
    "build_tree",
    "ends_node",
    "frame_chunk",
    "load_tree",
    "pack_node",
    "pack_root",
    "read_node",
    "read_root",
    "read_upper",
    "read_v2_index",
    "stash_tree",
    "tree_objects",
    "value_cuts",
]

#: Values whose stored bytes are longer than this are chunk trees.
TREE_THRESHOLD = 4 * 1024
#: Element runs: cut at the first top-level element end this far past the last cut.
RUN_MIN = 512
#: A node ends after an entry whose digest's last byte has these bits clear.
FANOUT_BITS = 0x03
#: ...or when it has this many entries.
MAX_FANOUT = 64

_ARRAY = frozenset(range(0x90, 0xA0)) | {0xDC, 0xDD}
_MAP = frozenset(range(0x80, 0x90)) | {0xDE, 0xDF}
#: Header size of a msgpack str or bin by its first byte (fixstr: 1).
_STRING_HEAD = {0xD9: 2, 0xDA: 3, 0xDB: 5, 0xC4: 2, 0xC5: 3, 0xC6: 5} | {
    b: 1 for b in range(0xA0, 0xC0)
}


def _cdc(data: bytes, start: int, end: int, out: list[int]) -> None:
    out.extend(start + c for c in chunk_cuts(memoryview(data)[start:end]))


def value_cuts(data: bytes, *, canonical: bool) -> tuple[int, list[int]]:
    """(head, chunk end offsets) of ``data`` (see the module docstring).

    ``head`` is the size of a canonical value's msgpack header (array, map,
    str or bin), which holds its length and so changes on every append: it is
    kept in the root, not in a chunk. The chunks cover ``data[head:]``; the
    last offset is ``len(data)``.
    """
    cuts: list[int] = []
    first = data[0] if data else None
    if not canonical or first is None or (first not in _ARRAY and first not in _MAP):
        head = _STRING_HEAD.get(first, 0) if canonical and first is not None else 0
        if head < len(data):
            _cdc(data, head, len(data), cuts)
        return head, cuts
    unpacker = msgpack.Unpacker(max_buffer_size=max(len(data), 1))
    unpacker.feed(data)
    is_map = first in _MAP
    count = unpacker.read_map_header() if is_map else unpacker.read_array_header()
    head = start = unpacker.tell()
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
    return head, cuts


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


def _pack(value: list[Any] | dict[str, Any]) -> bytes:
    """Canonical bytes of a node, root or upper spine: non-negative ints, bytes and
    lists, which is all msgpack's packer needs to write exactly what ``encode_value``
    would (pinned by tests/test_format_golden.py and tests/test_store_chunk_trees.py)."""
    return msgpack.packb(value, use_bin_type=True)  # type: ignore[no-any-return]


def _ends_node(key: bytes, count: int) -> bool:
    return not key[DIGEST_SIZE - 1] & FANOUT_BITS or count >= MAX_FANOUT


#: build_tree's grouping and node bytes, for trees continued in append_state.py.
ends_node, pack_node = _ends_node, _pack


def pack_root(head: bytes, size: int, spine: list[bytes], out: dict[bytes, bytes]) -> bytes:
    """Put a root v2 (and its upper spine, for a tree of 2+ levels) in ``out``; return its key.

    ``spine``: each level's tail (joined digests) from level 1 up; InvalidInputError
    for a tree taller than :data:`MAX_LEVEL`, which no read accepts.
    """
    if len(spine) > MAX_LEVEL:
        what = "the value's chunk tree is taller than any read accepts; nothing was stored"
        raise InvalidInputError(what, expected=f"<= {MAX_LEVEL} levels", got=len(spine))
    upper = b""
    if len(spine) > 1:
        obj = _pack(spine[1:])
        upper = digest(obj)
        out[upper] = obj
    root = _pack([ROOT_VERSION, head, size, spine[0], upper])
    key = digest(root)
    out[key] = root
    return key


def frame_chunk(chunk: bytes | memoryview) -> bytes:
    """The stored frame of one chunk: what :func:`stash_tree` writes (one seam to patch)."""
    return encode_frame(chunk)


def build_tree(data: bytes, *, canonical: bool) -> ChunkTree:
    """Cut ``data``, hash every chunk (one native call), build the complete nodes and the root."""
    head, cuts = value_cuts(data, canonical=canonical)
    offsets = [head, *cuts]
    digests = digest_batch(data, offsets)
    keys = [digests[i : i + DIGEST_SIZE] for i in range(0, len(digests), DIGEST_SIZE)]
    tree = ChunkTree(whole=digest(data), root=b"")
    tag = FRAME_TAG
    tree.chunks = [(k + tag, offsets[i], offsets[i + 1]) for i, k in enumerate(keys)]
    sizes = [b - a for a, b in zip(offsets, cuts, strict=False)]
    spine: list[bytes] = []
    level = 1
    while True:
        complete: list[bytes] = []
        complete_sizes: list[int] = []
        run: list[bytes] = []
        span = 0
        for key, size in zip(keys, sizes, strict=True):
            run.append(key)
            span += size
            if _ends_node(key, len(run)):
                node = _pack([level, span, b"".join(run)])
                node_key = digest(node)
                tree.nodes[node_key] = node
                complete.append(node_key)
                complete_sizes.append(span)
                run, span = [], 0
        spine.append(b"".join(run))  # this level's tail: in the root, never a node of its own
        if not complete:
            break
        keys, sizes = complete, complete_sizes
        level += 1
    tree.root = pack_root(data[:head], len(data), spine, tree.nodes)
    return tree


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


def _get(txn: Txn[memoryview], objects: Content, key: bytes, where: str) -> memoryview:
    view = objects.get(txn, key)
    if view is None:
        raise IntegrityError("object not in the store", where=where, got=bytes(key).hex())
    return view


def _checked_plain(
    txn: Txn[memoryview], objects: Content, key: bytes, *, verify: bool, where: str
) -> memoryview:
    raw = _get(txn, objects, key, where)
    if verify and digest(raw) != key:
        raise bad(
            "object bytes do not match their digest",
            where,
            got=digest(raw).hex(),
            expected=bytes(key).hex(),
        )
    return raw


#: Frames fetched and bounded at a time by a tree read (one well-formed level-1 node
#: holds at most MAX_FANOUT): a damaged tree naming one chunk thousands of times
#: is stopped by the root's budget after this many reads, not after all of them.
_FETCH = MAX_FANOUT


class _Frames:
    """The frames of one tree read: gathered by the walk, fetched and bounded
    :data:`_FETCH` at a time (sizes from the frame headers charged to the root's
    budget before anything is inflated), inflated and hash-checked together at the
    end (:func:`cpstore.store.codec.inflate_frames`); frames failing any check are
    read again one by one (:func:`read_frame`): the error names chunk and node."""

    def __init__(self, txn: Txn[memoryview], objects: Content, budget: int, verify: bool) -> None:
        self.txn, self.objects, self.left, self.verify = txn, objects, budget, verify
        self.dctx: Decompressor = decoder()
        self.keys: list[bytes] = []
        self.views: list[memoryview | None] = []
        self.sizes: list[int] = []
        self.starts: list[int] = []  # first frame of each level-1 list (node or tail)...
        self.wheres: list[str] = []  # ...and where it is, for errors
        self.spans: list[tuple[int, int, int, str]] = []  # (first, end, size, where) of nodes

    def add(self, keys: list[bytes], where: str) -> None:
        """Gather the chunk digests of one level-1 list (a node or a tail)."""
        self.starts.append(len(self.keys))
        self.wheres.append(where)
        self.keys += keys
        if len(self.keys) - len(self.views) >= _FETCH:
            self._fetch()

    def _where(self, index: int) -> str:
        return self.wheres[bisect_right(self.starts, index) - 1]  # an empty list: the next

    def _fetch(self) -> None:
        while len(self.views) < len(self.keys):
            self._fetch_some(len(self.views))

    def _fetch_some(self, start: int) -> None:
        keys = self.keys[start : start + _FETCH]
        fkeys = list(map(bytes.__add__, keys, repeat(FRAME_TAG)))
        views = list(map(self.objects.get, repeat(self.txn), fkeys))
        sizes = frame_sizes(views)  # None for a missing frame too
        if sizes is None:
            for i in range(len(keys)):  # raises, naming the frame
                self._one(start + i, keys[i], views[i])
            raise bad("framed object is malformed", self._where(start))  # not reached
        self.views += views
        self.sizes += sizes
        self.left -= sum(sizes)
        if self.left < 0:
            left = self.left + sum(sizes)
            over = next(i for i, s in enumerate(accumulate(sizes)) if s > left)
            raise bad("chunk tree spans more bytes than its root says", self._where(start + over))

    def inflate(self) -> list[bytes]:
        """Every chunk's bytes in walk order, each hash-checked unless the read is unverified;
        then (verified reads) every node's size."""
        self._fetch()
        digests = b"".join(self.keys) if self.verify else None
        out = inflate_frames(self.views, self.sizes, digests, self.dctx)
        if out is None:
            for i, (key, view) in enumerate(zip(self.keys, self.views, strict=True)):
                self._one(i, key, view)
            raise bad("framed objects failed a check that no single frame fails", "chunk tree")
        if self.verify:
            ends = [0, *accumulate(self.sizes)]
            for first, end, size, where in self.spans:
                got = ends[end] - ends[first]
                if got != size:
                    raise bad("chunk tree node spans the wrong size", where, got, size)
        return out

    def _one(self, index: int, key: bytes, view: memoryview | None) -> None:
        where = self._where(index)
        if view is None:
            raise IntegrityError("chunk not in the store", where=where, got=key.hex())
        fkey = key + FRAME_TAG
        try:
            read_frame(fkey if self.verify else None, view, where, self.dctx)
        except IntegrityError as exc:  # name the frame
            at = f"{where} (objects/{fkey.hex()})"
            raise IntegrityError(exc.what, where=at, expected=exc.expected, got=exc.got) from None


def load_tree(
    txn: Txn[memoryview], objects: Content, root: bytes, whole: bytes, *, verify: bool, where: str
) -> bytes:
    """Reassemble a chunk tree (or a layout-2 index) and check it against ``whole``."""
    pieces: list[bytes] = []
    at = f"{where} (chunk index)"
    root_raw = _checked_plain(txn, objects, root, verify=verify, where=at)
    v2 = read_v2_index(root_raw, at)
    if v2 is not None:
        size = v2[0]
        for i, key in enumerate(v2[1]):
            view = _checked_plain(txn, objects, key, verify=verify, where=f"{where} chunk {i}")
            pieces.append(bytes(view))
    else:
        head, size, spine, upper = read_root(root_raw, at)
        if upper is not None:
            up = f"{where} (upper spine {upper.hex()})"
            spine += read_upper(_checked_plain(txn, objects, upper, verify=verify, where=up), up)
        pieces.append(head)
        # Nodes may name one child many times (a repeated chunk): a read stops
        # once the root's size is passed, never expanding a damaged tree further.
        frames = _Frames(txn, objects, size - len(head), verify)
        for level in range(len(spine), 0, -1):  # oldest bytes sit in the top level's tail
            _walk(txn, objects, (level, -1, spine[level - 1]), frames, verify=verify, where=where)
        pieces += frames.inflate()
    data = b"".join(pieces)
    if len(data) != size or (verify and digest(data) != whole):
        raise bad(
            "chunked value does not match its digest",
            where,
            expected=bytes(whole).hex(),
            got=digest(data).hex(),
        )
    return data


def _walk(
    txn: Txn[memoryview],
    objects: Content,
    node: tuple[int, int, list[bytes]],
    frames: _Frames,
    *,
    verify: bool,
    where: str,
) -> None:
    """Gather the chunks under ``node`` (level, size or -1 unchecked, entries) into ``frames``.

    A verified read checks each node's size once its chunks are read and
    hash-checked (:meth:`_Frames.inflate`).
    """
    level, size, keys = node
    first = len(frames.keys)
    if level == 1:
        frames.add(keys, where)
    else:
        for key in keys:
            at = f"{where} node {key.hex()}"
            child = read_node(_checked_plain(txn, objects, key, verify=verify, where=at), at)
            if child[0] != level - 1:
                raise bad("chunk tree node is at the wrong level", at, child[0], level - 1)
            _walk(txn, objects, child, frames, verify=verify, where=at)
    if verify and size >= 0:
        frames.spans.append((first, len(frames.keys), size, where))


def tree_objects(
    txn: Txn[memoryview], objects: Content, root: bytes, walked: set[bytes] | None = None
) -> Iterator[bytes]:
    """Keys of every object under a root (nodes and frames; chunks of a layout-2 index).

    Missing or malformed nodes end their branch quietly: callers (retention,
    verify) report those themselves. With ``walked``, a complete node already
    in it is yielded but not descended into (the caller walked it before), and
    every node descended into is added to it.
    """
    raw = _quiet_get(txn, objects, root)
    if raw is None:
        return
    if walked is None:  # a node may name one child many times: descend into each once
        walked = set()
    try:
        v2 = read_v2_index(raw, "")
        if v2 is not None:
            yield from v2[1]
            return
        _, _, spine, upper = read_root(raw, "")
    except IntegrityError:
        return
    if upper is not None:
        yield upper  # the upper spine is shared by roots until a level-1 node completes
        if upper not in walked:
            walked.add(upper)
            upper_raw = _quiet_get(txn, objects, upper)
            with contextlib.suppress(IntegrityError):  # damage: verify reports it
                spine += read_upper(upper_raw, "") if upper_raw is not None else []
    stack = [(level + 1, keys) for level, keys in enumerate(spine)]
    while stack:
        level, keys = stack.pop()
        for key in keys:
            if level == 1:
                yield frame_key(key)
                continue
            yield key
            if walked is not None:
                if key in walked:
                    continue
                walked.add(key)
            child = _quiet_get(txn, objects, key)
            if child is None:
                continue
            try:
                child_level, _, child_keys = read_node(child, "")
            except IntegrityError:
                continue
            if child_level == level - 1:
                stack.append((child_level, child_keys))


def _quiet_get(txn: Txn[memoryview], objects: Content, key: bytes) -> Any:
    """The stored bytes of ``key``, or None when missing or its location is damaged."""
    try:
        return objects.get(txn, key)
    except IntegrityError:
        return None
