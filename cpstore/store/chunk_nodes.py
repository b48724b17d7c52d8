"""The chunk tree's node formats read back (chunk_tree.py's docstring describes them):
roots v1 and v2, upper spines, complete nodes and layout-2 chunk indexes, each shape-checked
(IntegrityError naming where it was read) before chunk_tree.py walks it.
"""

from __future__ import annotations

from typing import Any

import msgpack

from cpstore.errors import IntegrityError
from cpstore.native.records import DIGEST_SIZE

__all__ = [
    "MAX_LEVEL",
    "ROOT_VERSION",
    "bad",
    "read_node",
    "read_root",
    "read_upper",
    "read_v2_index",
]

#: Deepest tree written (pack_root) or read. Heights have a geometric tail (a level whose
#: only node ends a node again, ~1 in 4, adds one): 12 was reached (ci18; docs/format.md).
MAX_LEVEL = 64
#: First entry of the roots written now (root v2, store layout 4).
ROOT_VERSION = 2


def bad(what: str, where: str, got: object = None, expected: object = None) -> IntegrityError:
    return IntegrityError(what, where=where, expected=expected, got=got)


def _malformed(raw: bytes | memoryview, where: str) -> IntegrityError:
    return bad("chunk index is malformed", where, got=bytes(raw)[:64])


def _digests(value: object) -> bool:
    return isinstance(value, bytes) and len(value) % DIGEST_SIZE == 0


def _split(joined: bytes) -> list[bytes]:
    return [joined[i : i + DIGEST_SIZE] for i in range(0, len(joined), DIGEST_SIZE)]


def _decode(raw: bytes | memoryview, where: str) -> Any:
    # Plain msgpack, not decode_value's canonical re-encoding: a node's bytes
    # are checked against its digest, and its shape by the callers.
    try:
        return msgpack.unpackb(raw, raw=False, strict_map_key=False, use_list=True)
    except (ValueError, TypeError, msgpack.UnpackException, RecursionError) as exc:
        raise bad("chunk index is malformed", where, got=str(exc) or type(exc).__name__) from None


def read_root(
    raw: bytes | memoryview, where: str
) -> tuple[bytes, int, list[list[bytes]], bytes | None]:
    """(head, size, spine, upper) of a chunk tree root (v2, or v1 from layout 3).

    The spine lists each level's tail from level 1 (chunk digests) up: all of
    it for a v1 root; for a v2 root only level 1's, the rest being in the
    upper-spine object ``upper`` names (None: there is none).
    """
    value = _decode(raw, where)
    if isinstance(value, list):
        ok = (
            len(value) == 5
            and type(value[0]) is int
            and value[0] == ROOT_VERSION
            and isinstance(value[1], bytes)
            and type(value[2]) is int
            and value[2] >= 0
            and _digests(value[3])
            and isinstance(value[4], bytes)
            and len(value[4]) in (0, DIGEST_SIZE)
        )
        if not ok:
            raise _malformed(raw, where)
        return value[1], value[2], [_split(value[3])], value[4] or None
    ok = (
        isinstance(value, dict)
        and sorted(value) == ["head", "size", "spine"]
        and isinstance(value["head"], bytes)
        and type(value["size"]) is int
        and value["size"] >= 0
        and isinstance(value["spine"], list)
        and 1 <= len(value["spine"]) <= MAX_LEVEL
        and all(_digests(tail) for tail in value["spine"])
    )
    if not ok:
        raise _malformed(raw, where)
    return value["head"], value["size"], [_split(tail) for tail in value["spine"]], None


def read_upper(raw: bytes | memoryview, where: str) -> list[list[bytes]]:
    """The tails of levels 2 and up that an upper-spine object lists."""
    value = _decode(raw, where)
    ok = (
        isinstance(value, list)
        and 1 <= len(value) < MAX_LEVEL
        and all(_digests(tail) for tail in value)
    )
    if not ok:
        raise _malformed(raw, where)
    return [_split(tail) for tail in value]


def read_v2_index(raw: bytes | memoryview, where: str) -> tuple[int, list[bytes]] | None:
    """(size, chunk digests) of a layout-2 chunk index, None when ``raw`` is not one."""
    value = _decode(raw, where)
    if isinstance(value, list) and len(value) == 2:
        keys = value[1]
        if (
            type(value[0]) is int
            and value[0] >= 0
            and isinstance(keys, list)
            and all(isinstance(k, bytes) and len(k) == DIGEST_SIZE for k in keys)
        ):
            return value[0], keys
        raise _malformed(raw, where)
    return None


def read_node(raw: bytes | memoryview, where: str) -> tuple[int, int, list[bytes]]:
    """(level, size, entries) of a complete node."""
    value = _decode(raw, where)
    ok = (
        isinstance(value, list)
        and len(value) == 3
        and type(value[0]) is int
        and 1 <= value[0] <= MAX_LEVEL
        and type(value[1]) is int
        and value[1] >= 0
        and _digests(value[2])
        and value[2]
    )
    if not ok:
        raise _malformed(raw, where)
    return value[0], value[1], _split(value[2])
