"""A run document's nesting limit, fixed: 1 024 containers in the whole document, JSON or msgpack.

msgpack's unpacker refuses the 1 025th container nested in one document (its own stack,
whatever the interpreter's). JSON's decoder recursed until the interpreter's recursion
limit: a document passed or failed by ``sys.getrecursionlimit()`` less the frames the
caller was using, so the same file was loaded, refused as "nested too deeply" or refused
for its value as the caller's stack went (runleft86; left83's leftover). Now:

- :func:`recursion_headroom` gives the loaders and writers the frames that 1 024 levels
  (and the canonical encoder's 256) need, raising the limit for the call when it is
  lower, so a lowered limit refuses nothing that the default loads;
- :func:`nested_past` refuses a decoded JSON value past :data:`MAX_NESTING` when a raised
  limit let the decoder read it;
- :func:`json_overflow` names the first container past the limit in the text, in document
  order, at most :data:`cpstore.run.locate.MAX_DEPTH` steps from the document, as the
  msgpack locator names a deeper refusal.
"""

from __future__ import annotations

import json
import re
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from cpstore.run.locate import MAX_DEPTH, key_step

__all__ = ["MAX_NESTING", "json_overflow", "nested_past", "recursion_headroom"]

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


@contextmanager
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
