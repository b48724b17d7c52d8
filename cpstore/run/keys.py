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

A value holding a type other than the builtins (a subclass of int, float, str, bytes,
list, tuple or dict, or a Mapping that is not a dict) is written as its canonical value
(review79): the canonical encoder reads such a value through its methods (``bytes(value)``,
``items()``; before review85 an int's ``__int__`` and a float's ``+`` too) while ``json``
and ``msgpack`` write the builtin value beneath, so a float subclass whose ``__add__`` said
2.0 had its record hashed as 2.0 and was written as 1.0: a REJECT replay became an ACCEPT
document.
A non-dict Mapping or a memoryview was refused only mid-stream, after the head.
"""

from __future__ import annotations

import dataclasses
import math
import re
import struct
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from typing import Any, overload

from cpstore.errors import CanonicalEncodingError, IntegrityError, InvalidInputError
from cpstore.native.canonical import decode_value, encode_value, key_refusal
from cpstore.run.locate import key_step
from cpstore.run.model import PackedTokens, Run
from cpstore.run.values import EncodedValues

__all__ = ["check_encoded", "check_keys"]

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
_isnan, _isfinite = math.isnan, math.isfinite
#: The one canonical NaN (docs/format.md); a float token with other NaN bits is damage.
_NAN = b"\xcb\x7f\xf8\x00\x00\x00\x00\x00\x00"
#: The types json and msgpack write as the canonical encoder reads them; a value holding
#: any other is written as its canonical value (review79).
_PLAIN = frozenset(
    {dict, list, tuple, int, float, str, bytes, bytearray, memoryview, bool, type(None)}
)
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
    if kind is int or (kind is not bool and isinstance(item, int)):  # a pin may subclass int
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
    elif json and kind in (bytes, bytearray, memoryview):
        raise InvalidInputError(
            _NOT_JSON_VALUE.format("bytes"), where=at, got=f"{memoryview(item).nbytes} bytes"
        )
    elif json and kind is float and not math.isfinite(item):
        raise InvalidInputError(_NOT_JSON_VALUE.format("a NaN or an infinity"), where=at, got=item)


def _check_value(value: Any, where: str, json: bool) -> bool:
    """Refuse what the encoding cannot hold; True (nothing more checked) at the first
    item of a type not in :data:`_PLAIN`: the caller checks its canonical value."""
    stack = [(value, where)]
    while stack:
        item, at = stack.pop()
        if type(item) not in _PLAIN:
            return True
        if isinstance(item, Mapping):
            for key, sub in item.items():
                if type(key) not in _PLAIN:
                    return True
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
                # The documented step (runleft86: ``{'node'}`` here, ``.node`` in the loaders).
                stack.append((sub, at + key_step(key)))
        elif isinstance(item, (list, tuple)):
            stack.extend((sub, f"{at}[{i}]") for i, sub in enumerate(item))
        else:
            _scalar(item, at, json)
    return False


def _written(value: Any, where: str, json: bool) -> Any:
    """``value`` as its document writes it: itself, or (holding a type other than the
    builtins) its canonical value, decoded; refused where the encoding cannot hold it."""
    if not _check_value(value, where, json):
        return value
    try:
        plain = decode_value(encode_value(value))
    except CanonicalEncodingError as exc:
        raise InvalidInputError(
            "value cannot be canonically encoded", where=where, got=exc.what
        ) from None
    _check_value(plain, where, json)
    return plain


class _Replaced(Sequence[Any]):
    """``values`` with the items of ``replaced`` (index -> value) put in their place."""

    def __init__(self, values: Sequence[Any], replaced: dict[int, Any]) -> None:
        self._values, self._replaced = values, replaced

    def __len__(self) -> int:
        return len(self._values)

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...
    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        return self._replaced[index] if index in self._replaced else self._values[index]


def _values(values: Sequence[Any], json: bool) -> dict[int, Any]:
    replaced = {}
    for i, value in enumerate(values):
        kind = type(value)
        # The usual scalars inline, without naming them (review79: as cheap as before).
        if kind is float:
            if json and not _isfinite(value):
                _scalar(value, f"tokens[{i}].value", json)
            continue
        if kind is int:
            if _INT_MIN <= value < _INT_END:
                continue
        elif kind is str or kind is bool or value is None:
            continue
        plain = _written(value, f"tokens[{i}].value", json)
        if plain is not value:
            replaced[i] = plain
    return replaced


def check_encoded(values: EncodedValues, json: bool) -> None:
    """Raise :class:`InvalidInputError` at the first of ``values`` (canonical encodings)
    its document (``json`` or msgpack) could not hold."""
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
            damaged = False
            if item == 0.0 or not _isfinite(item):
                # -0.0, or a NaN other than the canonical one, is damage: decoded and
                # named below as before this path (review79: such a NaN was refused as
                # JSON's NaN, "use msgpack"; a -0.0 passed and a later token was refused
                # first). The usual float costs two tests; the bytes are read only here.
                damaged = (
                    blob[start + 1] != 0
                    if item == 0.0
                    else _isnan(item) and blob[start:end] != _NAN
                )
                if not damaged:
                    _scalar(item, f"tokens[{index}].value", json)  # an inf, the NaN
            if not damaged:
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


def check_keys(run: Run, *, json: bool) -> Run:
    """Raise :class:`InvalidInputError` naming the first key or value of ``run`` its
    document (``json`` or msgpack) could not read back; nothing is written before this.
    Returns the run to write: ``run``, or (a value holding a type other than the
    builtins) ``run`` with such values replaced by their canonical values."""
    values = run.tokens.values
    replaced: dict[int, Any] = {}
    # Canonical encodings decode to readable keys; JSON's str-only rule and the scalars
    # each encoding cannot hold are left.
    if isinstance(values, EncodedValues):
        check_encoded(values, json)
    elif values is not None:
        replaced = _values(values, json)
    changed: dict[str, Any] = {}
    if replaced and values is not None:
        tokens = run.tokens
        changed["tokens"] = PackedTokens(
            tokens.records, values=_Replaced(values, replaced), kind_names=tokens.kind_names
        )
    # The writers write each node as dict(node).
    nodes = [dict(node) for node in run.call_graph]
    written = [_written(node, f"call_graph[{i}]", json) for i, node in enumerate(nodes)]
    if any(a is not b for a, b in zip(written, nodes, strict=True)):
        changed["call_graph"] = tuple(written)
    # A pin is written as given: an int one outside msgpack's range (or past the int-to-str
    # limit) was refused after the head was written (review79).
    for i, obs in enumerate(run.observations):
        if obs.pinned_at is not None:
            _scalar(obs.pinned_at, f"observations[{i}].pinned_at", json)
    accesses = run.harness_accesses
    written = [_written(a, f"harness_accesses[{i}]", json) for i, a in enumerate(accesses)]
    if any(a is not b for a, b in zip(written, accesses, strict=True)):
        changed["harness_accesses"] = tuple(written)
    return dataclasses.replace(run, **changed) if changed else run
