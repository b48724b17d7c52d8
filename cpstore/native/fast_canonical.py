"""A fast canonical encoder: :func:`encode_value`'s bytes, without its per-element costs.

:func:`cpstore.native.canonical.encode_value` stays the specification: it
builds an error path string for every element and dispatches through a chain
of ``isinstance`` checks. :func:`encode_fast` returns the same bytes:

- exact-type dispatch (``type(x) is str`` ...) with msgspec's msgpack encoder
  for the leaves: it writes ints, str and bytes in the shortest form, which
  is the canonical one; a list or tuple whose elements are all such leaves
  (or bools and None) is one msgspec call;
- a dict whose keys are all exact ``str`` is written in the order of its
  keys' encoded bytes. For str keys that order is (UTF-8 length, text): the
  msgpack header grows with the length class and holds the length, and
  UTF-8 byte order is code point order. The sorted order (with each key's
  bytes) is remembered per key tuple (bounded, keys are immutable str), and
  a dict already in that order whose values are all leaves is one msgspec
  call;
- floats fold NaN and -0.0 as the specification says; anything else (dict
  subclasses and other Mappings, int/str subclasses, non-str keys, bytearray,
  memoryview) takes a general path that encodes and sorts like the spec
  (a str subclass by its text, never its own ``__str__``: a str-mixin Enum
  member's str() is its name; an int or float subclass by its value, as the spec;
  a list, tuple or Mapping key refused, as the spec refuses it).

No error path is computed on the way. When anything goes wrong (an
unsupported type, a lone surrogate, an int msgspec refuses, duplicate
encoded keys, a value nested deeper than :data:`MAX_DEPTH`), the whole value
is handed to :func:`encode_value`, which raises its exact error (type,
``where``, expected, got); or, had the fast path refused a value the spec
accepts, returns the spec's bytes. So errors are the spec's by construction
and the hypothesis tests (tests/test_fast_canonical.py) prove the bytes equal.
"""

from __future__ import annotations

import itertools
import math
import struct
from collections.abc import Mapping
from typing import Any

import msgspec

from cpstore.native.canonical import MAX_DEPTH, array_header, decode_value, encode_value, map_header

__all__ = ["decode_fast", "encode_element", "encode_fast"]

_mp = msgspec.msgpack.Encoder().encode
_NAN = struct.pack(">Bd", 0xCB, math.nan)
_FLOAT = struct.Struct(">Bd").pack
_INT_MIN = -(2**63)
_INT_END = 2**64
#: Leaves msgspec writes canonically (ints in range; str without lone surrogates).
_LEAF = frozenset({str, int, bytes, bool, type(None)})
#: Key tuples -> (in canonical order already, [(key, encoded key)] sorted).
_PLANS: dict[tuple[str, ...], tuple[bool, tuple[tuple[str, bytes], ...]]] = {}
_PLANS_MAX = 4096
_PLAN_KEYS_MAX = 64
_PLAN_CHARS_MAX = 2048
_ONLY_STR = frozenset({str}).issuperset
#: Keys that do not read back as keys (canonical.key_refusal).
_NOT_KEYS = (list, tuple, Mapping)


class _RefusedError(Exception):
    """The fast path cannot encode this value: the specification decides."""


def _plan(keys: tuple[str, ...]) -> tuple[bool, tuple[tuple[str, bytes], ...]] | None:
    """The canonical order of a dict's keys, or None when not all keys are exact str."""
    # Checked on a cache hit too: a str subclass may compare equal to (and
    # hash like) a cached key whose text is not its own.
    if not _ONLY_STR(map(type, keys)):
        return None
    plan = _PLANS.get(keys)
    if plan is not None:
        return plan
    entries = tuple(sorted(((k, _mp(k)) for k in keys), key=lambda e: e[1]))
    plan = (all(k is e[0] for k, e in zip(keys, entries, strict=True)), entries)
    if len(keys) <= _PLAN_KEYS_MAX and sum(map(len, keys)) <= _PLAN_CHARS_MAX:
        if len(_PLANS) >= _PLANS_MAX:
            _PLANS.clear()
        _PLANS[keys] = plan
    return plan


def _float(value: float) -> bytes:
    return _NAN if math.isnan(value) else _FLOAT(0xCB, value + 0.0)


def _mapping(value: Mapping[Any, Any], out: list[bytes], depth: int) -> None:
    """Any Mapping, as the spec does it: encode, sort by key bytes, refuse duplicates."""
    entries: list[tuple[bytes, bytes]] = []
    for key, item in value.items():
        if isinstance(key, _NOT_KEYS):
            raise _RefusedError  # reads back as a list or dict: the spec says why
        kparts: list[bytes] = []
        _encode(key, kparts, depth + 1)
        vparts: list[bytes] = []
        _encode(item, vparts, depth + 1)
        entries.append((b"".join(kparts), b"".join(vparts)))
    entries.sort(key=lambda kv: kv[0])
    for (k1, _), (k2, _) in itertools.pairwise(entries):
        if k1 == k2:
            raise _RefusedError
    out.append(map_header(len(entries)))
    for k, v in entries:
        out.append(k)
        out.append(v)


def _dict(value: dict[Any, Any], out: list[bytes], depth: int) -> None:
    n = len(value)
    if n and depth >= MAX_DEPTH:
        raise _RefusedError
    plan = _plan(tuple(value))
    if plan is None:
        _mapping(value, out, depth)
        return
    in_order, entries = plan
    if in_order:
        for item in value.values():
            if type(item) not in _LEAF:
                break
        else:
            out.append(_mp(value))
            return
    out.append(map_header(n))
    for key, kbytes in entries:
        out.append(kbytes)
        item = value[key]
        kind = type(item)
        if kind is str or kind is bytes:
            out.append(_mp(item))
        else:
            _encode(item, out, depth + 1)


def _sequence(value: list[Any] | tuple[Any, ...], out: list[bytes], depth: int) -> None:
    if value and depth >= MAX_DEPTH:
        raise _RefusedError
    leaf = _LEAF
    for item in value:
        if type(item) not in leaf:
            break
    else:
        out.append(_mp(value))  # a tuple is an array too
        return
    out.append(array_header(len(value)))
    for item in value:
        kind = type(item)
        if kind is dict:
            _dict(item, out, depth + 1)
        elif kind is str or kind is bytes:
            out.append(_mp(item))
        else:
            _encode(item, out, depth + 1)


def _encode(value: Any, out: list[bytes], depth: int) -> None:
    if depth > MAX_DEPTH:
        raise _RefusedError
    kind = type(value)
    if kind in _LEAF:
        out.append(_mp(value))
    elif kind is dict:
        _dict(value, out, depth)
    elif kind is list or kind is tuple:
        _sequence(value, out, depth)
    elif kind is float:
        out.append(_float(value))
    elif isinstance(value, int):  # an int subclass (bool is exact, above): by its value
        number = int.__index__(value)  # a TypeError (Mock(spec=int)): the spec says why
        if not _INT_MIN <= number < _INT_END:
            raise _RefusedError  # a big int: the spec's ext form
        out.append(_mp(number))
    elif isinstance(value, float):  # as the spec: by its value, never its own +
        out.append(_float(float.__float__(value)))
    elif isinstance(value, str):  # its text, never str() (a str-mixin Enum's str() is its name)
        out.append(_mp(str.__str__(value)))
    elif isinstance(value, (bytes, bytearray, memoryview)):
        out.append(_mp(bytes(value)))
    elif isinstance(value, (list, tuple)):
        out.append(array_header(len(value)))
        for item in value:
            _encode(item, out, depth + 1)
    elif isinstance(value, Mapping):
        _mapping(value, out, depth)
    else:
        raise _RefusedError


def encode_fast(value: Any) -> bytes:
    """The canonical encoding of ``value``: exactly :func:`encode_value`'s bytes or error."""
    out: list[bytes] = []
    try:
        _encode(value, out, 0)
    except Exception:  # the specification re-walks and says what is wrong
        return encode_value(value)
    return b"".join(out)


def decode_fast(data: bytes | bytearray | memoryview) -> Any:
    """:func:`~cpstore.native.canonical.decode_value` with its canonical-form check made
    by :func:`encode_fast`: the same value, or the same error, at a fifth of the cost
    (the audit log's records are decoded this way)."""
    return decode_value(data, encode=encode_fast)


def encode_element(item: Any) -> bytes:
    """The bytes ``item`` adds to a list's encoding (it sits one level deep).

    ``encode_value([item])`` is ``b"\\x91"`` followed by these bytes; an
    error is that call's, its path starting ``$[0]``.
    """
    out: list[bytes] = []
    try:
        _encode(item, out, 1)
    except Exception:  # the specification re-walks and says what is wrong
        return encode_value([item])[1:]
    return b"".join(out)
