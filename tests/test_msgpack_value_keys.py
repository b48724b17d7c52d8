"""A msgpack run document reads back the token values its writers wrote.

The canonical value model (docs/format.md, "Canonical values") encodes a map
key as any value, so token values may be maps keyed by ints, floats, None or
bools; ``.cprun`` keeps them and ``dump_document``/``write_document`` wrote
them into msgpack, but the msgpack readers refused them (``strict_map_key``).
A map whose keys are equal in Python but distinct in the file (``1`` and
``True``, ``1`` and ``1.0``) would collapse into one entry when read, so it is
refused as a repeated key, as ``decode_value`` refuses it.
"""

from __future__ import annotations

import io
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_audit31_msgpack_keys import _pack_pairs, _strict
from test_decision_support import clean_doc

from cpstore.decision.table import Verdict
from cpstore.decision.validate import validate
from cpstore.errors import CanonicalEncodingError, DocumentError
from cpstore.native.canonical import decode_value, encode_value
from cpstore.run.document import dump_document, load_document, parse_document
from cpstore.run.writer import write_document

_KEYS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=4),
    st.binary(max_size=4),
)
_LEAVES = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.floats(), st.text(max_size=4)
)
_VALUES = st.recursive(
    _LEAVES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=4),
    max_leaves=12,
)


def _run_with(values: list[Any]) -> Any:
    doc = clean_doc(len(values))
    for tok, value in zip(doc["tokens"], values, strict=True):
        tok["value"] = value
    return parse_document(doc)


def _encodings(run: Any) -> list[bytes]:
    return [encode_value(v) for v in run.tokens.values or []]


@pytest.mark.parametrize("load", [load_document, _strict], ids=["streamed", "strict"])
@pytest.mark.parametrize(
    "value",
    [
        {1: "a"},
        {-1: "a", 2**64 - 1: "b"},
        {1.5: "a"},
        {None: "a"},
        {True: "a", False: "b"},
        {"s": {0: [1, {None: 2}]}},
        {b"k": 1, 2: 3, "k": 4},
    ],
    ids=["int", "ints", "float", "none", "bools", "nested", "mixed"],
)
def test_a_non_str_map_key_round_trips(load: Any, value: Any) -> None:
    run = _run_with([value, 7])
    got = load(dump_document(run, encoding="msgpack"))
    assert _encodings(got) == _encodings(run)
    assert got.tokens.view() == run.tokens.view()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=st.lists(_VALUES, min_size=1, max_size=5))
def test_msgpack_reads_back_what_cprun_keeps(values: list[Any]) -> None:
    run = _run_with(values)
    cprun = dump_document(run, encoding="cprun")
    packed = dump_document(run, encoding="msgpack")
    out = io.BytesIO()
    write_document(run, out, encoding="msgpack")
    assert out.getvalue() == packed
    from_cprun = load_document(cprun)
    streamed, strict = load_document(packed), _strict(packed)
    assert _encodings(streamed) == _encodings(strict) == _encodings(from_cprun)
    # Same packed records, so the same value digests.
    assert bytes(streamed.tokens.view()) == bytes(from_cprun.tokens.view())
    assert bytes(strict.tokens.view()) == bytes(from_cprun.tokens.view())
    # Same verdict whichever file stands for the run.
    assert validate(cprun, packed).verdict is Verdict.ACCEPT
    recorded = clean_doc(len(values))
    assert validate(recorded, packed).verdict is validate(recorded, cprun).verdict
    assert [f.code for f in validate(recorded, packed).findings] == [
        f.code for f in validate(recorded, cprun).findings
    ]


def _doc_with_value(value: bytes) -> bytes:
    token = _pack_pairs([("seq", 0), ("kind", "rng"), ("value", value), ("provenance", "recorded")])
    doc = {**clean_doc(1), "mode": "strict"}
    body = b"\x91" + token
    return _pack_pairs([(k, body if k == "tokens" else v) for k, v in doc.items()])


@pytest.mark.parametrize("load", [load_document, _strict], ids=["streamed", "strict"])
@pytest.mark.parametrize(
    "keys",
    [(1, True), (1, 1.0), (0, False), (True, 1.0), (0.0, -0.0), (1, 1)],
    ids=["1-True", "1-1.0", "0-False", "True-1.0", "0.0--0.0", "1-1"],
)
def test_keys_equal_in_python_are_a_repeated_key(load: Any, keys: tuple[Any, Any]) -> None:
    # Distinct in the file (01 / c3 / cb3ff0...), one dict key once read: kept as
    # one entry, the value would silently lose the other, so it is refused.
    pairs = b"".join(msgpack.packb(k) + msgpack.packb(i) for i, k in enumerate(keys))
    value = bytes([0x82]) + pairs
    with pytest.raises(DocumentError) as err:
        load(_doc_with_value(value))
    assert "duplicate" in err.value.what
    with pytest.raises(CanonicalEncodingError):  # the canonical reader refuses it too
        decode_value(value)


@pytest.mark.parametrize("load", [load_document, _strict], ids=["streamed", "strict"])
@pytest.mark.parametrize(
    "key", [b"\x92\x01\x02", b"\x90", b"\x81\xa1a\x01"], ids=["array", "empty-array", "map"]
)
def test_an_array_or_map_key_is_named_as_the_cause(load: Any, key: bytes) -> None:
    # No dict can hold such a key (the canonical encoder refuses it): the refusal
    # names the key, not "neither a JSON object nor a msgpack map" with a TypeError.
    value = b"\x81" + key + b"\xa1x"
    with pytest.raises(DocumentError) as err:
        load(_doc_with_value(value))
    assert "map key is an array or a map" in err.value.what
    assert err.value.got == ("dict" if key[0] == 0x81 else "list")
    with pytest.raises(CanonicalEncodingError):  # the canonical reader refuses it too
        decode_value(value)
