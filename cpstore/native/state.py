"""The state digest: how a checkpoint's state is named (docs/store.md, "State").

A replay engine computes the digest of the state it reached with the same
function the recorder uses, so the two compare exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cpstore.errors import InvalidInputError
from cpstore.native.append_log import AppendLog
from cpstore.native.binding import digest
from cpstore.native.canonical import encode_value
from cpstore.native.records import Digest

__all__ = ["part_digest", "state_digest", "state_digest_raw"]


def part_digest(value: Any) -> Digest:
    """Digest of one state part: XXH3-128 of its canonical encoding.

    An :class:`~cpstore.native.append_log.AppendLog` is the list of its elements.
    """
    if isinstance(value, AppendLog):
        return digest(value.encoding())
    return digest(encode_value(value))


def state_digest_raw(state: bytes | bytearray | memoryview | Mapping[str, Any]) -> Digest:
    """Raw digest of a state: of the bytes, or of the canonical {name: part digest} map."""
    if isinstance(state, (bytes, bytearray, memoryview)):
        return digest(state)
    if not isinstance(state, Mapping):
        raise InvalidInputError(
            "state must be bytes or a mapping of part names to values", got=type(state).__name__
        )
    parts: dict[str, bytes] = {}
    for name, value in state.items():
        if not isinstance(name, str) or not name:
            raise InvalidInputError("state part names must be non-empty str", got=name)
        parts[name] = part_digest(value)
    return digest(encode_value(parts))


def state_digest(state: bytes | bytearray | memoryview | Mapping[str, Any]) -> str:
    """The hex state digest a checkpoint of ``state`` records (``Manifest.state_digest``)."""
    return state_digest_raw(state).hex()
