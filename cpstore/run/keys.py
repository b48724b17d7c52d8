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
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from cpstore.errors import InvalidInputError
from cpstore.native.canonical import key_refusal
from cpstore.run.model import Run
from cpstore.run.values import EncodedValues

__all__ = ["check_keys"]

_SCALARS = frozenset({int, str, bytes, float, bool, type(None)})
#: First bytes of a msgpack map or array.
_CONTAINER_HEADS = frozenset([*range(0x80, 0xA0), 0xDC, 0xDD, 0xDE, 0xDF])
_NOT_JSON = "run is not representable in JSON (a map key that is not a str); use encoding='msgpack'"


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
                if type(sub) not in _SCALARS:
                    stack.append((sub, f"{at}{{{key!r}}}"))
        elif isinstance(item, (list, tuple)):
            stack.extend((sub, f"{at}[{i}]") for i, sub in enumerate(item))


def _values(values: Iterable[Any], json: bool) -> None:
    for i, value in enumerate(values):
        if type(value) not in _SCALARS:
            _check_value(value, f"tokens[{i}].value", json)


def _encoded(values: EncodedValues) -> None:
    # JSON only: decode just the values that are a map or an array (first byte).
    blob, offs = values.blob, values.offsets
    for i in range(len(values)):
        start = offs[i]
        if start < offs[i + 1] and blob[start] in _CONTAINER_HEADS:
            _check_value(values[i], f"tokens[{i}].value", True)


def check_keys(run: Run, *, json: bool) -> None:
    """Raise :class:`InvalidInputError` naming the first key of ``run`` its document
    (``json`` or msgpack) could not read back; nothing is written before this."""
    values = run.tokens.values
    # Canonical encodings decode to readable keys; only JSON's str-only rule is left.
    if isinstance(values, EncodedValues):
        if json:
            _encoded(values)
    elif values is not None:
        _values(values, json)
    for i, node in enumerate(run.call_graph):
        _check_value(node, f"call_graph[{i}]", json)
    for i, access in enumerate(run.harness_accesses):
        _check_value(access, f"harness_accesses[{i}]", json)
