"""Append-only state parts: a checkpoint cuts, hashes and stores what was appended.

A state part given as an :class:`~cpstore.store.append_log.AppendLog` is
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
  The array header before the elements holds the count, so when its size
  changes (16 and 65,536 elements) every offset moves: the tree is then
  built again from the first element.
- **nodes**: a level's nodes end after entries the digest says (or at
  ``MAX_FANOUT``), counting from the previous node's end; so a node made
  only of settled entries (settled chunks, or settled nodes of the level
  below) is settled too, and each level resumes at its last settled node.
  Nodes that include the provisional tail are rebuilt every time.
- **what is stored**: every object key of the tree is listed to the
  recorder, and any key it cannot prove stored (not in what the head
  reaches) is stashed again from the bytes kept here, so a failed or
  refused commit never leaves a checkpoint naming a missing object.

A LogTree keeps a strong reference to its log (identity cannot be reused)
and the log can only grow; a different log object, or fewer elements, starts
over. Plain lists never take this path: their elements can change in place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from cpstore.errors import InvalidInputError
from cpstore.native.binding import chunk_cuts, digest, digest_batch
from cpstore.native.chunking import CHUNK_MAX
from cpstore.native.records import DIGEST_SIZE
from cpstore.store.append_log import AppendLog, log_snapshot
from cpstore.store.chunk_tree import RUN_MIN, TREE_THRESHOLD, ends_node, pack_node
from cpstore.store.codec import FRAME_TAG, encode_frame
from cpstore.store.model import MAX_OBJECT_SIZE

if TYPE_CHECKING:
    from array import array

__all__ = ["AppendParts", "Built", "LogTree"]


@dataclass
class _Level:
    """The settled nodes of one level: keys, spans, and entries below they cover."""

    keys: list[bytes] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    consumed: int = 0


@dataclass
class Built:
    """One build's result: what the manifest names and every object key of the tree."""

    whole: bytes
    root: bytes
    fresh: dict[bytes, bytes]
    """Node key -> bytes of the nodes rebuilt this time (the root included)."""
    tail: tuple[bytes, int, int] | None
    """(frame key, start, end) of the provisional last chunk, if any."""


class LogTree:
    """The settled part of one AppendLog's chunk tree, continued build after build."""

    def __init__(self, log: AppendLog, head: int) -> None:
        self.log = log
        self.head = head
        self.elements = 0
        self.start = head
        self.chunk_keys: list[bytes] = []
        self.chunk_sizes: list[int] = []
        self.frame_keys: list[bytes] = []
        self.where: dict[bytes, tuple[int, int]] = {}
        self.levels: list[_Level] = []
        self.nodes: dict[bytes, bytes] = {}

    def build(self, data: bytes, ends: array[int] | list[int]) -> Built:
        """Continue the tree over ``data`` (header + elements; element ends after the header)."""
        head = self.head
        start = self.start
        cuts: list[int] = []
        for i in range(self.elements, len(ends)):
            end = head + ends[i]
            if end - start >= RUN_MIN:
                if end - start > CHUNK_MAX:
                    cuts.extend(start + c for c in chunk_cuts(memoryview(data)[start:end]))
                else:
                    cuts.append(end)
                start = end
        size = len(data)
        offsets = [self.start, *cuts]
        if start < size:
            offsets.append(size)
        raw = digest_batch(data, offsets) if len(offsets) > 1 else b""
        keys = [raw[i : i + DIGEST_SIZE] for i in range(0, len(raw), DIGEST_SIZE)]
        settled = len(cuts)
        for i in range(settled):
            fkey = keys[i] + FRAME_TAG
            self.chunk_keys.append(keys[i])
            self.chunk_sizes.append(offsets[i + 1] - offsets[i])
            self.frame_keys.append(fkey)
            self.where.setdefault(fkey, (offsets[i], offsets[i + 1]))
        self.elements, self.start = len(ends), start
        tail: tuple[bytes, int, int] | None = None
        extra: list[bytes] = []
        extra_sizes: list[int] = []
        if start < size:
            tail = (keys[-1] + FRAME_TAG, start, size)
            extra, extra_sizes = [keys[-1]], [size - start]
        fresh: dict[bytes, bytes] = {}
        spine = self._levels(extra, extra_sizes, fresh)
        root = pack_node({"head": data[:head], "size": size, "spine": spine})
        root_key = digest(root)
        fresh[root_key] = root
        return Built(whole=digest(data), root=root_key, fresh=fresh, tail=tail)

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
                    if at <= settled:
                        lv.keys.append(node_key)
                        lv.sizes.append(span)
                        lv.consumed = at
                        self.nodes[node_key] = node
                    else:
                        up.append(node_key)
                        up_sizes.append(span)
                        fresh[node_key] = node
                    run, span = [], 0
            spine.append(b"".join(run))
            if not lv.keys and not up:
                return spine
            below, below_sizes, extra, extra_sizes = lv.keys, lv.sizes, up, up_sizes
            level += 1

    def keys(self, built: Built) -> list[bytes]:
        """Every object key of the tree ``built`` describes (nodes, then frames)."""
        out = [*self.nodes, *built.fresh, *self.frame_keys]
        if built.tail is not None:
            out.append(built.tail[0])
        return out

    def stash(
        self, built: Built, data: bytes, pending: dict[bytes, bytes], stored: set[bytes]
    ) -> list[bytes]:
        """:func:`~cpstore.store.chunk_tree.stash_tree` for a continued tree: same contract."""
        keys = self.keys(built)
        for key in set(keys).difference(stored):
            if key in pending:
                continue
            node = built.fresh.get(key)
            if node is None:
                node = self.nodes.get(key)
            if node is not None:
                pending[key] = node
                continue
            a, b = self.where.get(key) or _tail_span(built)  # keys() lists no other frame
            pending[key] = encode_frame(memoryview(data)[a:b])
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
    """A recorder's LogTrees, one per part name whose value is an AppendLog."""

    def __init__(self) -> None:
        self._trees: dict[str, LogTree] = {}

    def part(self, rec: _Host, name: str, log: AppendLog, chunked: dict[str, Any]) -> bytes:
        """Stash the part ``name`` (an AppendLog) for ``rec``; return its part digest."""
        data, head, ends = log_snapshot(log)
        if len(data) > MAX_OBJECT_SIZE:
            raise InvalidInputError(
                "state part is larger than the largest object",
                where=f"state[{name!r}]",
                expected=f"<= {MAX_OBJECT_SIZE} bytes",
                got=f"{len(data)} bytes",
            )
        if len(data) <= TREE_THRESHOLD:
            self._trees.pop(name, None)
            return rec._stash(data)
        tree = self._trees.get(name)
        if tree is None or tree.log is not log or tree.head != head or tree.elements > len(ends):
            tree = self._trees[name] = LogTree(log, head)
        built = tree.build(data, ends)
        rec._chunks.extend(tree.stash(built, data, rec._pending, rec._confirmed))
        chunked[name] = built.root
        return built.whole
