"""Token records built a column at a time: the bulk paths of ingest and recording.

Parsing a document or recording a replay's tokens one ``struct.pack`` per
token costs microseconds each; these helpers build the same bytes
(docs/format.md) from whole columns: canonical encodings joined into one
values blob with its offsets, one batch digest, and the 32-byte TOKEN records
written through strided memoryviews. The bytes equal
:func:`cpstore.native.records.pack_token` record by record (the tests prove it).
"""

from __future__ import annotations

import math
import struct
import sys
from array import array
from collections.abc import Sequence
from itertools import accumulate
from typing import Any

import msgspec

from cpstore.errors import InvalidInputError
from cpstore.native.binding import digest_batch, msgpack_split
from cpstore.native.canonical import encode_value

__all__ = ["encode_values", "fast_encoding", "pack_token_columns"]

_INT_MIN = -(2**63)
_INT_END = 2**64
_FLOAT = struct.Struct(">Bd")
_NAN = _FLOAT.pack(0xCB, math.nan)
_NIL, _TRUE, _FALSE = b"\xc0", b"\xc3", b"\xc2"
_TOKEN = struct.Struct("<QIB3x16s")  # cpstore.native.records.pack_token's layout
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


def pack_token_columns(
    seqs: array[int], kinds: array[int], provenance: bytes | bytearray, digests: bytes
) -> bytearray:
    """TOKEN records from columns: seqs ('Q'), kind codes ('I'), one provenance byte each,
    and n 16-byte value digests."""
    n = len(seqs)
    if len(kinds) != n or len(provenance) != n or len(digests) != 16 * n:
        raise InvalidInputError(
            "token columns must have one entry per token",
            expected=n,
            got=(len(kinds), len(provenance), len(digests) // 16),
        )
    if seqs.itemsize != 8 or kinds.itemsize != 4:
        raise InvalidInputError("seqs must be array('Q') and kinds array('I')")
    if sys.byteorder != "little":  # the strided views below write native order
        return bytearray(
            b"".join(
                _TOKEN.pack(s, k, p, digests[16 * i : 16 * i + 16])
                for i, (s, k, p) in enumerate(zip(seqs, kinds, provenance, strict=True))
            )
        )
    out = bytearray(32 * n)
    if not n:
        return out
    words = memoryview(out).cast("Q")
    words[0::4] = memoryview(seqs).cast("B").cast("Q")
    # Bytes 8..15 of a record: kind (u32 LE), provenance (u8), 3 reserved zeros.
    middle = memoryview(out).cast("I")
    middle[2::8] = memoryview(kinds).cast("B").cast("I")
    raw = memoryview(out)
    raw[12::32] = provenance
    dig = memoryview(digests).cast("Q")
    words[2::4] = dig[0::2]
    words[3::4] = dig[1::2]
    return out


def digests_of(blob: bytes, offsets: array[int]) -> bytes:
    """Batch digests of the encodings in ``blob`` split at ``offsets``."""
    return digest_batch(blob, offsets)
