"""Append-only state parts: a checkpoint cuts, hashes and stores what was appended.

A state part given as an :class:`~cpstore.native.append_log.AppendLog` is
stored exactly as the plain list of its elements would be (same bytes, same
chunk tree, same digests; docs/format.md is unchanged). What differs is the
cost: the recorder keeps, per part name, a :class:`LogTree` describing the
tree its last checkpoint built from that same log object, and continues it.

Why continuing is exact (tests/test_append_state.py proves it against
:func:`~cpstore.store.chunk_tree.build_tree` of the whole bytes):

- **cuts**: :func:`~cpstore.store.chunk_tree.value_cuts` walks the elements
  keeping one thing, the offset of the last cut (``start``); every decision
  after it depends only on the element ends and bytes after it. The log's
  bytes never change, only lengthen, so the walk resumes at the last cut
  with the element after the last one walked. The chunk after the last cut
  (the tail run, shorter than ``RUN_MIN``) is provisional and recomputed.
  Offsets here count from the first element, not from the array header:
  every cut is decided relative to the last one and a chunk never includes
  the header (the root holds it), so the header growing (at 16 and 65,536
  elements) moves no cut and changes no chunk or node; only the root, which
  is rebuilt every time, holds the header and the size (and the upper spine,
  rebuilt every time too, holds the tails of levels 2 and up).
- **nodes**: a level's nodes end after entries the digest says (or at
  ``MAX_FANOUT``), counting from the previous node's end; so a node made
  only of settled entries (settled chunks, or settled nodes of the level
  below) is settled too, and each level resumes at its last settled node.
  Nodes that include the provisional tail are rebuilt every time.
- **what is stored**: the recorder may skip only objects its head reaches.
  When the root this LogTree built last is among them (that checkpoint
  committed and is, or is an ancestor reachable from, the head), every
  settled object is under that root, so only the objects made since are
  listed and stashed; otherwise (a failed commit, a checkpoint without this
  part in between) every key of the tree is checked and anything missing is
  stashed again from the bytes kept here. A checkpoint never names an
  object it did not write or prove reachable.

A LogTree keeps a strong reference to its log (identity cannot be reused)
and the log can only grow; a different log object, or fewer elements, starts
over. Plain lists never take this path: their elements can change in place.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgpack
import xxhash

from cpstore.errors import InvalidInputError
from cpstore.native.append_log import AppendLog, log_view
from cpstore.native.binding import chunk_cuts, digest, digest_batch
from cpstore.native.chunking import CHUNK_MAX
from cpstore.native.records import DIGEST_SIZE
from cpstore.store.chunk_tree import (
    RUN_MIN,
    TREE_THRESHOLD,
    build_tree,
    ends_node,
    frame_chunk,
    pack_node,
    pack_root,
    stash_tree,
)
from cpstore.store.codec import FRAME_TAG
from cpstore.store.model import MAX_OBJECT_SIZE

__all__ = ["AppendParts", "Built", "LogTree"]


@dataclass
class _Level:
    """The settled nodes of one level: keys, spans, and entries below they cover."""

    keys: list[bytes] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    consumed: int = 0


@dataclass
class Built:
    """One build's result: what the manifest names and the objects made for it."""

    whole: bytes
    """Digest of the whole encoding (the part digest)."""
    root: bytes
    fresh: dict[bytes, bytes]
    """Node key -> bytes of the nodes built this time (the root and upper spine included)."""
    frames: list[bytes]
    """Frame keys of the chunks settled this time, then the provisional tail's."""
    tail: tuple[bytes, int, int] | None
    """(frame key, start, end) of the provisional last chunk, if any (body offsets)."""


class LogTree:
    """The settled part of one AppendLog's chunk tree, continued build after build.

    Offsets count from the first element (after the array header).
    """

    def __init__(self) -> None:
        self.elements = 0
        """Elements before the last cut (the walk resumes with the next one)."""
        self.start = 0
        self.chunk_keys: list[bytes] = []
        self.chunk_sizes: list[int] = []
        self.frame_keys: list[bytes] = []
        self.where: dict[bytes, tuple[int, int]] = {}
        self.levels: list[_Level] = []
        self.nodes: dict[bytes, bytes] = {}
        self.last_root: bytes | None = None

    def build(self, header: bytes, body: memoryview, ends: Iterable[int]) -> Built:
        """Continue the tree over ``header + body``.

        ``ends``: the end offset in ``body`` of each element from the one after
        the last cut (element :attr:`elements`) to the last.
        """
        start = first = self.start
        cuts: list[int] = []
        walked = settled = self.elements
        for end in ends:
            walked += 1
            if end - start >= RUN_MIN:
                if end - start > CHUNK_MAX:
                    cuts.extend(start + c for c in chunk_cuts(body[start:end]))
                else:
                    cuts.append(end)
                start = end
                settled = walked
        size = len(body)
        offsets = [first, *cuts]
        if start < size:
            offsets.append(size)
        raw = digest_batch(body, offsets) if len(offsets) > 1 else b""
        keys = [raw[i : i + DIGEST_SIZE] for i in range(0, len(raw), DIGEST_SIZE)]
        frames = [k + FRAME_TAG for k in keys]
        for i in range(len(cuts)):
            self.chunk_keys.append(keys[i])
            self.chunk_sizes.append(offsets[i + 1] - offsets[i])
            self.frame_keys.append(frames[i])
            self.where.setdefault(frames[i], (offsets[i], offsets[i + 1]))
        self.elements, self.start = settled, start
        tail: tuple[bytes, int, int] | None = None
        extra: list[bytes] = []
        extra_sizes: list[int] = []
        if start < size:
            tail = (frames[-1], start, size)
            extra, extra_sizes = [keys[-1]], [size - start]
        fresh: dict[bytes, bytes] = {}
        spine = self._levels(extra, extra_sizes, fresh)
        root_key = pack_root(header, len(header) + size, spine, fresh)
        whole = xxhash.xxh3_128(header)
        whole.update(body)
        return Built(whole=whole.digest(), root=root_key, fresh=fresh, frames=frames, tail=tail)

    def _levels(
        self, extra: list[bytes], extra_sizes: list[int], fresh: dict[bytes, bytes]
    ) -> list[bytes]:
        """Group entries into nodes level by level; return each level's tail (the spine)."""
        below, below_sizes = self.chunk_keys, self.chunk_sizes
        spine: list[bytes] = []
        level = 1
        while True:
            if len(self.levels) < level:
                self.levels.append(_Level())
            lv = self.levels[level - 1]
            settled = len(below)
            at = lv.consumed
            run: list[bytes] = []
            span = 0
            up: list[bytes] = []
            up_sizes: list[int] = []
            pending = [*zip(below[at:], below_sizes[at:], strict=True)]
            pending.extend(zip(extra, extra_sizes, strict=True))
            for key, size in pending:
                run.append(key)
                span += size
                at += 1
                if ends_node(key, len(run)):
                    node = pack_node([level, span, b"".join(run)])
                    node_key = digest(node)
                    fresh[node_key] = node
                    if at <= settled:
                        lv.keys.append(node_key)
                        lv.sizes.append(span)
                        lv.consumed = at
                        self.nodes[node_key] = node
                    else:
                        up.append(node_key)
                        up_sizes.append(span)
                    run, span = [], 0
            spine.append(b"".join(run))
            if not lv.keys and not up:
                return spine
            below, below_sizes, extra, extra_sizes = lv.keys, lv.sizes, up, up_sizes
            level += 1

    def all_keys(self, built: Built) -> list[bytes]:
        """Every object key of the tree ``built`` describes (nodes, then frames)."""
        out = [*self.nodes, *built.fresh, *self.frame_keys]
        if built.tail is not None:
            out.append(built.tail[0])
        return out

    def stash(
        self, built: Built, body: memoryview, pending: dict[bytes, bytes], stored: set[bytes]
    ) -> list[bytes]:
        """Stash what ``stored`` may lack into ``pending``; return the keys it must learn.

        The contract of :func:`~cpstore.store.chunk_tree.stash_tree`, with the
        shortcut the module docstring proves: when the previous root is
        stored, the objects settled before this build are too.
        """
        if self.last_root is not None and self.last_root in stored:
            keys = [*built.fresh, *built.frames]
        else:
            keys = self.all_keys(built)
        self.last_root = built.root
        for key in set(keys).difference(stored):
            if key in pending:
                continue
            node = built.fresh.get(key)
            if node is None:
                node = self.nodes.get(key)
            if node is not None:
                pending[key] = node
                continue
            a, b = self.where.get(key) or _tail_span(built)  # no other frame is listed
            # A copy, not a slice (encode_frame copied it anyway): an exception raised while
            # it was framed kept the slice in its traceback's frames, and the slice kept an
            # AppendLog's buffer exported, refusing every append while the caller held the
            # exception (BufferError, audit45).
            pending[key] = frame_chunk(bytes(body[a:b]))
        return keys


def _tail_span(built: Built) -> tuple[int, int]:
    return (0, 0) if built.tail is None else (built.tail[1], built.tail[2])


class _Host(Protocol):
    """The recorder's side of a state part (see Recorder._state)."""

    _pending: dict[bytes, bytes]
    _confirmed: set[bytes]
    _chunks: list[bytes]

    def _stash(self, data: bytes) -> bytes: ...


class AppendParts:
    """A recorder's continued trees, one per state part name (module docstring).

    An AppendLog part continues while the part is the same log object; a
    plain list part continues while its new encoding starts with the bytes
    the previous tree settled (checked byte for byte: a list changed in
    place anywhere before the last cut starts the tree over).
    """

    def __init__(self) -> None:
        self._trees: dict[str, tuple[object, LogTree]] = {}

    def _tree(self, name: str, owner: object, same: bool) -> LogTree:
        held = self._trees.get(name)
        tree = held[1] if held is not None and same else LogTree()
        self._trees[name] = (owner, tree)
        return tree

    def _build(
        self,
        rec: _Host,
        name: str,
        tree: LogTree,
        parts: tuple[bytes, memoryview, Iterable[int]],
    ) -> Built:
        """``tree.build`` of ``parts`` (header, body, ends), stashed for ``rec``. One that
        raises (pack_root's height refusal, an interrupt) drops the tree, so the next build
        starts over: it may have settled chunks and nodes it never stashed, and with its
        last root stored the next build would stash only its own, a checkpoint naming
        objects never written (audit40)."""
        try:
            built = tree.build(*parts)
            rec._chunks.extend(tree.stash(built, parts[1], rec._pending, rec._confirmed))
        except BaseException:
            self._trees.pop(name, None)
            raise
        return built

    def part(self, rec: _Host, name: str, log: AppendLog, chunked: dict[str, Any]) -> bytes:
        """Stash the part ``name`` (an AppendLog) for ``rec``; return its part digest."""
        with log_view(log) as (header, body, ends):
            size = len(header) + len(body)
            if size > MAX_OBJECT_SIZE:
                raise InvalidInputError(
                    "state part is larger than the largest object",
                    where=f"state[{name!r}]",
                    expected=f"<= {MAX_OBJECT_SIZE} bytes",
                    got=f"{size} bytes",
                )
            if size <= TREE_THRESHOLD:
                self._trees.pop(name, None)
                return rec._stash(header + bytes(body))
            held = self._trees.get(name)
            same = held is not None and held[0] is log and held[1].elements <= len(ends)
            tree = self._tree(name, log, same)
            built = self._build(rec, name, tree, (header, body, ends[tree.elements :]))
        chunked[name] = built.root
        return built.whole

    def blob(self, rec: _Host, name: str, data: bytes, chunked: dict[str, Any]) -> bytes:
        """A canonical part longer than TREE_THRESHOLD: its chunk tree, continued for a list."""
        kind = data[0]
        if kind not in _ARRAY_HEADS:
            self._trees.pop(name, None)
            full = build_tree(data, canonical=True)
            rec._chunks.extend(stash_tree(full, data, rec._pending, rec._confirmed))
            chunked[name] = full.root
            return full.whole
        head = _ARRAY_HEADS[kind]
        held = self._trees.get(name)
        same = False
        if held is not None and isinstance(held[0], bytes):
            before, old = held[0], held[1]
            was = _ARRAY_HEADS[before[0]]
            same = data.startswith(before[was : was + old.start], head)
        tree = self._tree(name, data, same)
        count = int.from_bytes(data[1:head], "big") if head > 1 else kind & 0x0F
        view = memoryview(data)
        body = view[head:]
        ends = _walk(body, tree.start, count - tree.elements)
        built = self._build(rec, name, tree, (data[:head], body, ends))
        chunked[name] = built.root
        return built.whole


#: Header size of a canonical array by its first byte.
_ARRAY_HEADS = {b: 1 for b in range(0x90, 0xA0)} | {0xDC: 3, 0xDD: 5}


def _walk(body: memoryview, start: int, count: int) -> list[int]:
    """End offsets of the ``count`` elements that follow ``start`` in ``body``."""
    unpacker = msgpack.Unpacker(max_buffer_size=max(len(body) - start, 1))
    unpacker.feed(body[start:])
    ends = []
    for _ in range(count):
        unpacker.skip()
        ends.append(start + unpacker.tell())
    return ends
