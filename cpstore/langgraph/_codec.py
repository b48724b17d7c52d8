"""Names and encodings the LangGraph savers share: run ids, branch names, state parts.

A LangGraph thread is the cpstore run ``lg:<thread_id>``; its root namespace
records on branch ``main``, a subgraph namespace ``ns`` on ``ns:<ns>``, and a
checkpoint whose parent is not its branch's head (time travel, a fork) starts
the branch ``<label>@<checkpoint_id>``. A checkpoint's state has the parts
``checkpoint`` (the LangGraph checkpoint without its channel values),
``metadata``, and one ``channel/<name>`` per stored channel value, each the
saver's serde output packed as ``type`` NUL ``bytes`` (docs/langgraph.md).
"""

from __future__ import annotations

from typing import Any

from cpstore.errors import IntegrityError, InvalidInputError
from cpstore.native.binding import digest

__all__ = [
    "CHANNEL",
    "branch_label",
    "fork_branch",
    "pack_typed",
    "run_for",
    "unpack_typed",
]

#: State part name prefix of a channel value.
CHANNEL = "channel/"
_NAME_LIMIT = 200


def _fits(name: str) -> bool:
    try:
        raw = name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return 0 < len(raw) <= _NAME_LIMIT and b"\x00" not in raw


def _hashed(prefix: str, text: str) -> str:
    return prefix + digest(text.encode("utf-8", "surrogatepass")).hex()


def run_for(thread_id: str) -> str:
    """The cpstore run id of a LangGraph thread (hashed when the id cannot be a run name)."""
    name = "lg:" + thread_id
    return name if _fits(name) else _hashed("lg:#", thread_id)


def branch_label(ns: str) -> str:
    """The branch a namespace records on: ``main`` for the root, ``ns:<ns>`` otherwise."""
    if not ns:
        return "main"
    name = "ns:" + ns
    return name if _fits(name) else _hashed("ns#", ns)


def fork_branch(ns: str, checkpoint_id: str, attempt: int = 0) -> str:
    """The branch a checkpoint starts when its parent is not its branch's head."""
    name = f"{branch_label(ns)}@{checkpoint_id}" + (f"~{attempt}" if attempt else "")
    return name if _fits(name) else _hashed("fork#", name)


def pack_typed(typed: tuple[str, bytes]) -> bytes:
    """One serde ``(type, bytes)`` pair as one state part value."""
    kind, data = typed
    if not isinstance(kind, str) or "\x00" in kind:
        raise InvalidInputError("a serde type tag must be a str without NUL", got=kind)
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InvalidInputError("serde data must be bytes", got=type(data).__name__)
    return kind.encode("utf-8") + b"\x00" + bytes(data)


def unpack_typed(part: Any, where: str) -> tuple[str, bytes]:
    """The serde ``(type, bytes)`` pair a state part holds."""
    if isinstance(part, (bytes, bytearray, memoryview)):
        raw = bytes(part)
        cut = raw.find(b"\x00")
        if cut >= 0:
            return raw[:cut].decode("utf-8", "replace"), raw[cut + 1 :]
    raise IntegrityError("not a LangGraph value part", where=where, got=type(part).__name__)
