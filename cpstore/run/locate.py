"""Where in a msgpack run document the strict decoder failed (the error path only).

The strict decoder reads a document (or a chunk of tokens) in one ``msgpack.unpackb``
call, so a bad value deep in it (an extension type, a repeated key, a map keyed by an
array) was reported at ``document`` (review76's leftover): a user with 10 million
tokens was not told which. On failure, :func:`locate` walks the failing map entry by
entry or array item by item, each part decoded with the same ``unpack`` the strict
decoder used, and goes into the first part that fails, a few levels deep:
``tokens[3].value[1]``. It never decides whether a document is good: the strict decoder
has already failed; a part it cannot name is left to the level above.

A place is a field name followed by steps (docs/run-document.md, "Errors"): ``[i]`` an
array item; ``.name`` a map entry whose key is a str of ASCII letters, digits and ``_``
not starting with a digit; ``["..."]`` any other str key, as a JSON string (``.``, ``[``,
quotes, blanks and the empty key are never written bare: left83); ``{...}`` a key that
is no str (msgpack), as its Python literal (``{1}``, ``{-2.5}``, ``{True}``, ``{None}``,
``{b'\\x00'}``), so the int key 1 is never the array item ``[1]``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from cpstore.native.binding import msgpack_split

__all__ = ["canonical_place", "join_place", "key_step", "locate", "locate_json"]

#: Levels :func:`locate` goes into (each re-decodes the failing part once).
MAX_DEPTH = 8

#: A key written bare after a dot (``.name``): nothing in it can be read as a step.
_BARE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def key_step(key: Any) -> str:
    """The step to the entry keyed ``key`` (a decoded key: str, None, bool, int, float
    or bytes; a writer's memoryview key is named as the bytes it is written as) of a map:
    ``.name``, ``["..."]`` or ``{...}``."""
    if isinstance(key, str):
        text = str.__str__(key)
        if _BARE.fullmatch(text):
            return "." + text
        return "[" + json.dumps(text) + "]"
    if isinstance(key, (bytearray, memoryview)):
        key = bytes(key)
    return "{" + repr(key) + "}"  # a decoded key: None, bool, int, float or bytes


def canonical_place(value: Any, path: str | None, limit: int = MAX_DEPTH) -> str:
    """The place, in steps (``[i]``, ``.name``, ``["..."]``, ``{1}``), of the part of
    ``value`` the canonical encoder refused at ``path`` (its own spelling: ``$``, then
    ``[i]`` and ``{repr(key)}``; runleft86: the ``.cprun`` writer passed it on as it was,
    ``${'call_graph'}[0]{'node'}``). Walked against ``value`` itself, so a key whose
    ``repr`` holds brackets is read right; "" when the path does not fit ``value``. At
    most ``limit`` steps, as :func:`locate` names a deeper refusal at its container."""
    if not path or not path.startswith("$"):
        return ""
    steps: list[str] = []
    node, pos = value, 1
    try:
        while pos < len(path) and len(steps) < limit:
            if path[pos] == "[" and isinstance(node, (list, tuple)):
                end = path.index("]", pos)
                index = int(path[pos + 1 : end])
                node, pos = node[index], end + 1
                steps.append(f"[{index}]")
                continue
            if path[pos] == "{" and isinstance(node, Mapping):
                for key, item in node.items():
                    spelled = "{" + repr(key) + "}"
                    if path.startswith(spelled, pos):
                        node, pos = item, pos + len(spelled)
                        steps.append(key_step(key))
                        break
                else:
                    return ""
                continue
            return ""
    except Exception:  # a caller's key whose repr raises, an index past the end
        return ""
    return "".join(steps)


def join_place(where: str, inner: str) -> str:
    """The place ``inner`` (steps, its first one written without its dot) inside
    ``where``: ``tokens[3]`` and ``value.a`` give ``tokens[3].value.a``."""
    if not inner:
        return where
    if not where or inner[0] in "[{":
        return where + inner
    return f"{where}.{inner}"


def locate(raw: bytes, unpack: Callable[[bytes], Any], *, as_deep: bool = False) -> str:
    """The place inside the msgpack item ``raw`` of the first part ``unpack`` refuses:
    ``.key`` or ``[i]`` steps (``key`` alone first), "" when no part can be named.
    ``as_deep``: each part is decoded inside as many one-item arrays as it has containers
    above it, as deep as it sits in ``raw`` (the nesting limit: runleft86)."""
    try:
        return _place(raw, unpack, MAX_DEPTH, 1 if as_deep else 0).removeprefix(".")
    except Exception:
        return ""


def _place(raw: bytes, unpack: Callable[[bytes], Any], depth: int, level: int = 0) -> str:
    if depth == 0:
        return ""
    wrap = b"\x91" * level
    unpack_part = (lambda part: unpack(wrap + part)) if level else unpack
    for key, index, part in _parts(raw):
        if key is not None:
            # The decoder reads a key before its value (review82): a key it refuses
            # (an extension type) fails first, and its place is this map, not a later
            # value of it.
            try:
                name = unpack(key)
                unpack_part(key)
            except Exception:
                return ""
            step = key_step(name)
        else:
            step = f"[{index}]"
        try:
            unpack_part(part)
        except Exception:
            try:
                return step + _place(part, unpack, depth - 1, level + 1 if level else 0)
            except Exception:
                return step
    return ""


def _parts(raw: bytes) -> Iterator[tuple[bytes | None, int, bytes]]:
    """(a map entry's key bytes or None for an array item, its index, the part's bytes)
    for each entry of a map or item of an array; nothing for a scalar. Cut by the native
    splitter, which has no stack limit (msgpack's ``skip`` refused a part nested past
    1 024 containers of its own: runleft86)."""
    head = raw[0]
    if 0x80 <= head <= 0x9F:
        count, pos = head & 0x0F, 1
    elif head in (0xDC, 0xDE):
        count, pos = int.from_bytes(raw[1:3], "big"), 3
    elif head in (0xDD, 0xDF):
        count, pos = int.from_bytes(raw[1:5], "big"), 5
    else:
        return
    is_map = head in (0xDE, 0xDF) or head <= 0x8F
    remaining = 2 * count if is_map else count
    index = 0
    key: bytes | None = None
    while remaining:
        split = msgpack_split(raw, pos, remaining, cap=min(remaining, 4096))
        for end in split.ends:
            part = raw[pos:end]
            pos = end
            remaining -= 1
            if is_map and key is None:
                key = part
                continue
            yield key, index, part
            key, index = None, index + 1


class _Refused:
    """A JSON constant or out-of-range number, kept where the strict parser refused it."""


class _Pairs(list):  # type: ignore[type-arg]
    """A JSON object's pairs in text order; ``repeated`` when a key comes twice."""

    repeated = False


def _pairs(pairs: list[tuple[str, Any]]) -> _Pairs:
    out = _Pairs(pairs)
    out.repeated = len({key for key, _ in pairs}) != len(pairs)
    return out


def _number(text: str) -> Any:
    value = float(text)
    return value if math.isfinite(value) else _Refused()


def locate_json(raw: bytes) -> str:
    """The place in the JSON text ``raw`` of the first constant (``NaN``), out-of-range
    number or repeated key, in the order the strict parser meets them (a repeated key
    after what its object holds): ``tokens[3].value``; "" when none is found."""
    try:
        tree = json.loads(
            raw, parse_constant=lambda _: _Refused(), parse_float=_number, object_pairs_hook=_pairs
        )
        return (_first_refused(tree, "") or "").removeprefix(".")
    except Exception:
        return ""


def _first_refused(node: Any, at: str) -> str | None:
    if isinstance(node, _Refused):
        return at
    if isinstance(node, _Pairs):
        for key, value in node:
            found = _first_refused(value, at + key_step(key))
            if found is not None:
                return found
        return at if node.repeated else None
    if isinstance(node, list):
        for i, value in enumerate(node):
            found = _first_refused(value, f"{at}[{i}]")
            if found is not None:
                return found
    return None
