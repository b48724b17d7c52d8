"""The canonical value encoding (docs/format.md, "Canonical values", version 1).

A subset of MessagePack with one encoding per value: equal values give equal
bytes and values of different types never share bytes, so a digest of the
encoding compares values "by type and by value" (seed 002).

* ``None``, ``True``/``False``: msgpack nil / bool.
* ``int`` in [-2**63, 2**64): msgpack's shortest integer form; outside it,
  ext type 1 holding the minimal big-endian two's-complement bytes.
* ``float``: always float 64; every NaN is written as ``0x7ff8000000000000``
  and ``-0.0`` as ``0.0`` (they compare equal in Python, so they encode equal).
* An ``int`` or ``float`` subclass is its value (``int.__index__``,
  ``float.__float__``), never what its own ``__int__`` or ``+`` says.
* ``str``: UTF-8 msgpack str; ``bytes``/``bytearray``/``memoryview``: msgpack bin.
* ``list``/``tuple``: msgpack array (a tuple is a list here).
* ``dict``: msgpack map, entries sorted by the bytes of the encoded key. A key
  must read back as a key: a tuple (or list, or Mapping) key would be written
  as an array (map) and read back as a list (dict), which cannot be a key, so
  it is refused (:func:`key_refusal`).
"""

from __future__ import annotations

import itertools
import math
import struct
from collections.abc import Callable, Mapping
from typing import Any

import msgpack

from cpstore.errors import CanonicalEncodingError

__all__ = [
    "MAX_DEPTH",
    "array_header",
    "decode_value",
    "encode_value",
    "key_refusal",
    "map_header",
]

#: Deepest nesting accepted; deeper values are refused, never recursed into.
MAX_DEPTH = 256

_BIGINT_EXT = 1
_NAN = struct.pack(">Bd", 0xCB, math.nan)
_INT_MIN = -(2**63)
_INT_END = 2**64


_ARRAY_SMALL = [bytes((0x90 | n,)) for n in range(16)]
_MAP_SMALL = [bytes((0x80 | n,)) for n in range(16)]


def array_header(n: int) -> bytes:
    """The canonical msgpack array header for ``n`` elements."""
    if n < 16:
        return _ARRAY_SMALL[n]
    if n < 2**16:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


def map_header(n: int) -> bytes:
    """The canonical msgpack map header for ``n`` entries."""
    if n < 16:
        return _MAP_SMALL[n]
    if n < 2**16:
        return b"\xde" + n.to_bytes(2, "big")
    return b"\xdf" + n.to_bytes(4, "big")


def key_refusal(key: Any) -> str | None:
    """Why ``key`` cannot be a canonical map key, or None when it can.

    A key is accepted only when it decodes to a hashable value equal to it:
    None, bool, int, float, str and bytes do (bytes-likes read back as bytes).
    A list or tuple is written as an array and a Mapping as a map; they read
    back as a list or a dict, which cannot be a key, so a value holding one
    could be hashed and stored but never read (docs/format.md).
    """
    if isinstance(key, (list, tuple)):
        return f"a {type(key).__name__} map key cannot be read back as a key (it decodes as a list)"
    if isinstance(key, Mapping):
        return f"a {type(key).__name__} map key cannot be read back as a key (it decodes as a dict)"
    return None


def _bigint(value: int) -> bytes:
    size = (value + (value < 0)).bit_length() // 8 + 1
    body = value.to_bytes(size, "big", signed=True)
    packed: bytes = msgpack.packb(msgpack.ExtType(_BIGINT_EXT, body))
    return packed


def _encode(value: Any, out: list[bytes], depth: int, path: str) -> None:
    if depth > MAX_DEPTH:
        raise CanonicalEncodingError(
            "value nested too deeply", where=path, expected=f"depth <= {MAX_DEPTH}"
        )
    if value is None or value is True or value is False:
        out.append(msgpack.packb(value))
    elif isinstance(value, int):
        # An int subclass is read by its value (int.__index__), never by its own __int__,
        # comparisons or arithmetic, as a step, seq or pin is (records.number_value):
        # review83 made the range the read int's; review85: __int__ was that reading, and
        # one answering differently at each call made a Run's in-memory verdict differ
        # from its document's, which holds one answer.
        if type(value) is int:
            number = value
        else:
            try:  # inline, not a helper's call: this is the reference's hot path
                number = int.__index__(value)
            except TypeError:  # an object claiming int (Mock(spec=int)) that is none
                raise CanonicalEncodingError(
                    "value claims to be an int but is none",
                    where=path,
                    got=type(value).__name__,
                ) from None
        if _INT_MIN <= number < _INT_END:
            out.append(msgpack.packb(number))
        else:
            out.append(_bigint(number))
    elif isinstance(value, float):
        # By its value (float.__float__), never its own + (review85, as for an int).
        if type(value) is float:
            real = value
        else:
            try:
                real = float.__float__(value)
            except TypeError:  # an object claiming float (Mock(spec=float)) that is none
                raise CanonicalEncodingError(
                    "value claims to be a float but is none",
                    where=path,
                    got=type(value).__name__,
                ) from None
        if math.isnan(real):
            out.append(_NAN)
        else:  # -0.0 + 0.0 == 0.0
            out.append(struct.pack(">Bd", 0xCB, real + 0.0))
    elif isinstance(value, str):
        try:
            out.append(msgpack.packb(value))
        except UnicodeEncodeError as exc:
            raise CanonicalEncodingError(
                "string is not valid UTF-8 (lone surrogate)",
                where=path,
                got=value[exc.start : exc.end],
            ) from None
    elif isinstance(value, (bytes, bytearray, memoryview)):
        out.append(msgpack.packb(bytes(value), use_bin_type=True))
    elif isinstance(value, (list, tuple)):
        out.append(array_header(len(value)))
        for i, item in enumerate(value):
            _encode(item, out, depth + 1, f"{path}[{i}]")
    elif isinstance(value, Mapping):
        entries: list[tuple[bytes, bytes]] = []
        for key, item in value.items():
            kpath = f"{path}{{{key!r}}}"
            refusal = key_refusal(key)
            if refusal is not None:
                raise CanonicalEncodingError(
                    refusal,
                    where=kpath,
                    expected="a None, bool, int, float, str or bytes key",
                    got=key,
                )
            kparts: list[bytes] = []
            _encode(key, kparts, depth + 1, kpath)
            vparts: list[bytes] = []
            _encode(item, vparts, depth + 1, kpath)
            entries.append((b"".join(kparts), b"".join(vparts)))
        entries.sort(key=lambda kv: kv[0])
        for (k1, _), (k2, _) in itertools.pairwise(entries):
            if k1 == k2:
                raise CanonicalEncodingError(
                    "two map keys have the same canonical encoding", where=path, got=k1
                )
        out.append(map_header(len(entries)))
        for k, v in entries:
            out.append(k)
            out.append(v)
    else:
        raise CanonicalEncodingError(
            "value of an unsupported type",
            where=path,
            expected="None, bool, int, float, str, bytes, list, tuple or dict",
            got=type(value).__name__,
        )


def encode_value(value: Any) -> bytes:
    """Return the canonical encoding of ``value`` (docs/format.md)."""
    out: list[bytes] = []
    _encode(value, out, 0, "$")
    return b"".join(out)


def _ext_hook(code: int, data: bytes) -> Any:
    if code != _BIGINT_EXT or not data:
        raise CanonicalEncodingError(
            "unknown msgpack ext type", expected=f"ext {_BIGINT_EXT}", got=code
        )
    return int.from_bytes(data, "big", signed=True)


def decode_value(
    data: bytes | bytearray | memoryview, *, encode: Callable[[Any], bytes] = encode_value
) -> Any:
    """Decode canonical bytes; anything not in canonical form is refused.

    ``encode``: the canonical encoder the decoded value is re-encoded with for that
    check (:func:`~cpstore.native.fast_canonical.decode_fast` passes the fast one,
    whose bytes equal :func:`encode_value`'s)."""
    raw = bytes(data)
    try:
        value = msgpack.unpackb(
            raw, raw=False, strict_map_key=False, ext_hook=_ext_hook, use_list=True
        )
    except CanonicalEncodingError:
        raise
    except (ValueError, TypeError, msgpack.UnpackException, RecursionError) as exc:
        raise CanonicalEncodingError(
            "bytes are not a msgpack value", got=raw, expected=str(exc) or None
        ) from None
    again = encode(value)
    if again != raw:
        raise CanonicalEncodingError(
            "bytes are msgpack but not the canonical encoding", expected=again, got=raw
        )
    return value
