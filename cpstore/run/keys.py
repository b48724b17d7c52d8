"""Refuse, before a byte is written, a run whose map keys its document could not read back.

A canonical map key must read back as a key equal to it (docs/format.md,
"Canonical values"): a tuple, list or Mapping key is written as an array or a
map and reads back as a list or dict, which cannot be a key. Values that went
through the canonical encoder (a parsed document, ``Token``/``TokenPacker``,
a ``.cprun`` or stored run) are already checked; token values handed over as
plain Python objects in ``PackedTokens(records, values=...)`` are not, and
msgpack's packer would write such a key without complaint.

JSON carries only str keys: ``json.dumps`` turns ``1``, ``1.5``, ``True`` and
``None`` keys into the strings ``"1"``, ``"1.5"``, ``"true"``, ``"null"``, so
the document read back held a different value (another digest). A JSON
document with such a key is refused as bytes values are: use msgpack.

Scalars are checked here too (review76): JSON holds no bytes, no NaN or infinity
and no int longer than the interpreter's int-to-str limit, msgpack no int outside
[-2**63, 2**64). The encoders refused them too, but in the middle of the stream,
after ``write_document`` had written the document's head.
"""

from __future__ import annotations

import math
import re
import struct
from bisect import bisect_right
from collections.abc import Iterable, Mapping
from typing import Any

from cpstore.errors import IntegrityError, InvalidInputError
from cpstore.native.canonical import key_refusal
from cpstore.run.model import Run
from cpstore.run.values import EncodedValues

__all__ = ["check_keys"]

_NOT_JSON = "run is not representable in JSON (a map key that is not a str); use encoding='msgpack'"
_NOT_JSON_VALUE = (
    "run is not representable in JSON ({}); use encoding='msgpack' (or 'cprun' for an int "
    "outside [-2**63, 2**64))"
)
_NOT_MSGPACK = (
    "run is not representable in msgpack (an integer outside [-2**63, 2**64)); "
    "use encoding='json' or 'cprun'"
)
_INT_MIN, _INT_END = -(2**63), 2**64
#: msgpack's float64 marker, and its big-endian payload.
_FLOAT64 = 0xCB
_DOUBLE = struct.Struct(">d")
#: Bytes a canonical encoding holds only if it may hold something an encoding refuses
#: (JSON: a container, bytes, a float, a big int ext; msgpack: a big int ext). A value
#: with none of them is skipped without being decoded; one with any is decoded and checked.
_SUSPECT = {
    True: re.compile(rb"[\x80-\x9f\xdc-\xdf\xc4-\xc9\xcb\xd4-\xd8]"),
    False: re.compile(rb"[\xc7-\xc9\xd4-\xd8]"),
}


def _scalar(item: Any, at: str, json: bool) -> None:
    """Refuse a scalar the encoding cannot hold (InvalidInputError naming where)."""
    kind = type(item)
    if kind is int:
        if _INT_MIN <= item < _INT_END:
            return
        if not json:
            raise InvalidInputError(
                _NOT_MSGPACK, where=at, got=f"an int of {item.bit_length()} bits"
            )
        try:
            str(item)
        except ValueError as exc:  # past sys.get_int_max_str_digits(): json.dumps refuses it
            raise InvalidInputError(
                _NOT_JSON_VALUE.format("an int with too many digits"), where=at, got=str(exc)
            ) from None
    elif json and kind in (bytes, bytearray):
        raise InvalidInputError(_NOT_JSON_VALUE.format("bytes"), where=at, got=f"{len(item)} bytes")
    elif json and kind is float and not math.isfinite(item):
        raise InvalidInputError(_NOT_JSON_VALUE.format("a NaN or an infinity"), where=at, got=item)


def _check_value(value: Any, where: str, json: bool) -> None:
    stack = [(value, where)]
    while stack:
        item, at = stack.pop()
        if isinstance(item, Mapping):
            for key, sub in item.items():
                refusal = key_refusal(key)
                if refusal is not None:
                    raise InvalidInputError(
                        f"map key at {at}: {refusal}",
                        where=at,
                        expected="a None, bool, int, float, str or bytes key",
                        got=key,
                    )
                if json and not isinstance(key, str):
                    raise InvalidInputError(_NOT_JSON, where=at, got=key)
                _scalar(key, at, json)
                stack.append((sub, f"{at}{{{key!r}}}"))
        elif isinstance(item, (list, tuple)):
            stack.extend((sub, f"{at}[{i}]") for i, sub in enumerate(item))
        else:
            _scalar(item, at, json)


def _values(values: Iterable[Any], json: bool) -> None:
    for i, value in enumerate(values):
        kind = type(value)
        if kind is not str and kind is not bool and value is not None:
            _check_value(value, f"tokens[{i}].value", json)


def _encoded(values: EncodedValues, json: bool) -> None:
    # Only values holding a byte that may start something refused are decoded: the
    # search runs over the whole blob in C, and resumes after each value it checked.
    blob, offs = values.blob, values.offsets
    suspect = _SUSPECT[json]
    n = len(values)
    index = 0
    found = suspect.search(blob)
    while found is not None:
        index = bisect_right(offs, found.start(), index) - 1
        if index >= n:  # pragma: no cover - the last offset is the blob's end
            break
        start, end = offs[index], offs[index + 1]
        if end - start == 9 and blob[start] == _FLOAT64 and found.start() == start:
            # A float token alone (the commonest suspect): its bits say whether it is
            # finite, without decoding the value (a float-heavy JSON write took 1.6x).
            item = _DOUBLE.unpack_from(blob, start + 1)[0]
            _scalar(item, f"tokens[{index}].value", json)
            found = suspect.search(blob, end)
            continue
        try:
            value = values[index]
        except InvalidInputError as exc:  # a damaged .cprun: offsets or bytes (faithful.py)
            raise IntegrityError(
                "token value is not one value in canonical form at its offsets",
                where=f"tokens[{index}].value",
                got=exc.what,
            ) from None
        _check_value(value, f"tokens[{index}].value", json)
        # Past the match whatever the offsets say (a damaged .cprun's need not rise).
        found = suspect.search(blob, max(offs[index + 1], found.start() + 1))


def check_keys(run: Run, *, json: bool) -> None:
    """Raise :class:`InvalidInputError` naming the first key of ``run`` its document
    (``json`` or msgpack) could not read back; nothing is written before this."""
    values = run.tokens.values
    # Canonical encodings decode to readable keys; JSON's str-only rule and the scalars
    # each encoding cannot hold are left.
    if isinstance(values, EncodedValues):
        _encoded(values, json)
    elif values is not None:
        _values(values, json)
    for i, node in enumerate(run.call_graph):
        _check_value(node, f"call_graph[{i}]", json)
    for i, access in enumerate(run.harness_accesses):
        _check_value(access, f"harness_accesses[{i}]", json)
