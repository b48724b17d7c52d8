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

The nesting limit lives here too (runleft86, at the end): 1 024 containers in a whole
document, JSON as msgpack, whatever the interpreter's recursion limit, and the place of
the first container past it.
"""

from __future__ import annotations

import json
import math
import re
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from cpstore.native.binding import msgpack_split
from cpstore.native.kept import kept_contextmanager

__all__ = [
    "MAX_NESTING",
    "canonical_place",
    "join_place",
    "json_overflow",
    "key_step",
    "locate",
    "locate_json",
    "nested_past",
    "recursion_headroom",
]

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


# -- the nesting limit (runleft86) ---------------------------------------------------------
#
# A run document nests at most 1 024 containers, JSON or msgpack. msgpack's unpacker refuses
# the 1 025th (its own stack, whatever the interpreter's); JSON's decoder recursed until the
# interpreter's recursion limit, so a document passed or failed by ``sys.getrecursionlimit()``
# less the caller's frames (left83's leftover). recursion_headroom gives the loaders the
# frames 1 024 levels (and the canonical encoder's 256) need; nested_past refuses a decoded
# JSON value past the limit when a raised limit let the decoder read it; json_overflow names
# the first container past it in the text, as the msgpack locator names a deeper refusal.

#: Containers nested in a whole run document, JSON or msgpack (msgpack's own stack).
MAX_NESTING = 1024

#: Frames a load or a write may need past its caller's: JSON's decoder one per level,
#: the canonical encoder one per level of a value (256), and a margin for the hooks.
HEADROOM = MAX_NESTING + 512


class _Held:
    """Who needs the raised limit: how many blocks, the limit set, the limit it replaced."""

    lock = threading.Lock()
    users = 0
    ours: int | None = None
    restore: int | None = None


def _frames() -> int:
    frame: Any = sys._getframe(1)
    count = 0
    while frame is not None:
        count += 1
        frame = frame.f_back
    return count


@kept_contextmanager
def recursion_headroom(frames: int = HEADROOM) -> Iterator[None]:
    """The interpreter's recursion limit at least ``frames`` above the caller's stack for
    the block; lowered back when the last such block ends, unless someone set another
    limit meanwhile (theirs is kept). Never lowers a limit."""
    want = _frames() + frames
    with _Held.lock:
        _Held.users += 1
        current = sys.getrecursionlimit()
        if current < want:
            if _Held.ours is None or current != _Held.ours:
                _Held.restore = current
            sys.setrecursionlimit(want)
            _Held.ours = want
    try:
        yield
    finally:
        with _Held.lock:
            _Held.users -= 1
            if _Held.users == 0 and _Held.ours is not None:
                if sys.getrecursionlimit() == _Held.ours and _Held.restore is not None:
                    sys.setrecursionlimit(_Held.restore)
                _Held.ours = _Held.restore = None


def nested_past(value: Any, limit: int = MAX_NESTING) -> bool:
    """Whether the decoded JSON ``value`` nests more than ``limit`` containers (lists and
    dicts, ``value`` itself counted), walked without recursion."""
    if type(value) is not dict and type(value) is not list:
        return False
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        for child in item.values() if type(item) is dict else item:
            kind = type(child)
            if kind is dict or kind is list:
                stack.append((child, depth + 1))
    return False


#: A JSON string (escapes included) or one structural character.
_STRUCT = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{},:]', re.DOTALL)


def json_overflow(raw: bytes, limit: int = MAX_NESTING) -> tuple[str, str] | None:
    """The first container nested past ``limit`` in the JSON text ``raw``, in document
    order: (its place, at most :data:`MAX_DEPTH` steps; the text before it, closed, with
    ``0`` in its stead: what the decoder reads before it). None when there is none, or
    the text cannot be scanned (the decoder's own refusal then stands)."""
    try:
        text = raw.decode(json.detect_encoding(raw))
    except (UnicodeDecodeError, LookupError):
        return None
    # Per open container: is it an object, its item index, its current key (JSON text).
    opened: list[list[Any]] = []
    last = ""
    for match in _STRUCT.finditer(text):
        token = match.group()
        char = token[0]
        if char == '"':
            last = token
        elif char in "[{":
            if len(opened) >= limit:
                return _steps(opened), _closed(text[: match.start()], opened)
            opened.append([char == "{", 0, None])
        elif char in "]}":
            if not opened:
                return None
            opened.pop()
        elif char == "," and opened:
            opened[-1][1] += 1
            opened[-1][2] = None
        elif char == ":" and opened:
            opened[-1][2] = last
    return None


def _steps(opened: list[list[Any]]) -> str:
    steps = []
    for is_object, index, key in opened[:MAX_DEPTH]:
        if not is_object:
            steps.append(f"[{index}]")
            continue
        try:
            steps.append(key_step(json.loads(key)))
        except (TypeError, ValueError):
            break
    return "".join(steps).removeprefix(".")


def _closed(before: str, opened: list[list[Any]]) -> str:
    return before + "0" + "".join("}" if is_object else "]" for is_object, _, _ in reversed(opened))
