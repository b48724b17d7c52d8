"""Token values a column at a time: the bulk paths of ingest and recording.

Parsing a document or recording a replay's tokens one ``encode_value`` per
token costs microseconds each; :func:`encode_values` gives the same bytes
(docs/format.md) for a whole list: the canonical encodings joined into one
values blob with its n+1 offsets, ready for one batch digest and
:func:`cpstore.native.binding.pack_tokens`.
"""

from __future__ import annotations

import math
import struct
from array import array
from collections.abc import Sequence
from itertools import accumulate
from typing import Any

import msgspec

from cpstore.errors import CanonicalEncodingError
from cpstore.native.binding import msgpack_split
from cpstore.native.canonical import encode_value

__all__ = ["encode_values", "fast_encoding", "first_unencodable"]

_INT_MIN = -(2**63)
_INT_END = 2**64
_FLOAT = struct.Struct(">Bd")
_NAN = _FLOAT.pack(0xCB, math.nan)
_NIL, _TRUE, _FALSE = b"\xc0", b"\xc3", b"\xc2"
_mp_encode = msgspec.msgpack.Encoder().encode


def fast_encoding(value: Any) -> bytes:
    """:func:`encode_value` of ``value``, taking a shortcut for scalars.

    msgspec's msgpack writes ints, strings and bytes in the shortest form,
    which is the canonical one; floats are always float 64 with NaN and -0.0
    folded; anything else goes through :func:`encode_value` itself.
    """
    kind = type(value)
    if kind is int:
        if _INT_MIN <= value < _INT_END:
            return _mp_encode(value)
    elif kind is str:
        try:
            return _mp_encode(value)
        except UnicodeEncodeError:
            pass  # a lone surrogate: encode_value says where
    elif kind is float:
        return _NAN if math.isnan(value) else _FLOAT.pack(0xCB, value + 0.0)
    elif value is None:
        return _NIL
    elif value is True:
        return _TRUE
    elif value is False:
        return _FALSE
    elif kind is bytes:
        return _mp_encode(value)
    return encode_value(value)


_BATCH_TYPES = frozenset({int, str, bytes, bool, type(None)})


def _split_packed(packed: bytes, n: int) -> tuple[memoryview, array[int]]:
    # msgspec wrote one msgpack array: drop its header, find each item's end.
    head = 1 if n < 16 else 3 if n < 2**16 else 5
    body = memoryview(packed)[head:]
    offsets = array("Q", [0])
    offsets += msgpack_split(body, 0, n, cap=n).ends
    return body, offsets


def encode_values(values: Sequence[Any]) -> tuple[bytes | memoryview, array[int]]:
    """The canonical encodings of ``values`` joined, and their n+1 offsets.

    A list of ints, strings, bytes, bools and None (the usual token values)
    is encoded by msgspec in one call and split at item ends by the native
    splitter; anything else goes value by value through :func:`fast_encoding`.
    """
    if values and set(map(type, values)) <= _BATCH_TYPES:
        try:
            packed = _mp_encode(values)
        except (OverflowError, UnicodeEncodeError):
            pass  # a big int or a lone surrogate: value by value below
        else:
            return _split_packed(packed, len(values))
    encs = [fast_encoding(v) for v in values]
    offsets = array("Q", [0])
    offsets.extend(accumulate(map(len, encs)))
    return b"".join(encs), offsets


def first_unencodable(values: Sequence[Any]) -> tuple[int, CanonicalEncodingError] | None:
    """The index of the first of ``values`` with no canonical encoding and its error
    (what a caller names after :func:`encode_values` refused them), or None."""
    for i, value in enumerate(values):
        try:
            fast_encoding(value)
        except CanonicalEncodingError as exc:
            return i, exc
    return None
