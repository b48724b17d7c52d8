"""encode_fast is encode_value, faster: the same bytes and the same errors on any value."""

from __future__ import annotations

import math
from collections import OrderedDict
from enum import Enum, IntEnum
from types import MappingProxyType
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_unreadable_map_keys import _Frozen

from cpstore.errors import CanonicalEncodingError
from cpstore.native.canonical import MAX_DEPTH, decode_value, encode_value
from cpstore.native.fast_canonical import decode_fast, encode_element, encode_fast
from cpstore.store.model import checked_metadata


class _Small(IntEnum):
    ONE = 1


class _Text(str):
    """A str subclass."""


class _Sub(dict[Any, Any]):
    """A dict subclass."""


def struct_pack_nan() -> bytes:
    """A NaN whose payload is not the canonical one."""
    return (0x7FF8000000000001).to_bytes(8, "big")


def _view(data: bytes) -> memoryview:
    return memoryview(data)


keys = (
    st.text(max_size=40)
    | st.text(alphabet=st.characters(codec="utf-8"), min_size=28, max_size=70)
    | st.integers(-(2**66), 2**66)
    | st.binary(max_size=6)
    | st.none()
    | st.booleans()
    | st.floats(allow_nan=True)
    | st.text(max_size=3).map(_Text)
    | st.just(_Small.ONE)
    # Refused alike (they read back as a list): tuples, nested or empty.
    | st.tuples(st.integers(0, 3))
    | st.tuples(st.tuples(st.text(max_size=2)), st.none())
    | st.just(())
)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.sampled_from([2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 0, -1])
    | st.floats(allow_nan=True)
    | st.sampled_from([math.nan, -math.nan, -0.0, 0.0, math.inf, -math.inf])
    | st.text()
    | st.text(alphabet=st.characters(min_codepoint=0xD7F0, max_codepoint=0xE010), max_size=3)
    | st.binary()
    | st.binary().map(bytearray)
    | st.binary().map(_view)
    | st.just(_Small.ONE)
    | st.text(max_size=3).map(_Text)
    | st.just(object())
)


def _containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    plain = st.dictionaries(st.text(max_size=6), inner, max_size=6)
    return (
        st.lists(inner, max_size=6)
        | st.lists(inner, max_size=4).map(tuple)
        | plain
        | st.dictionaries(keys, inner, max_size=5)
        | st.dictionaries(st.text(max_size=4), inner, max_size=4).map(_Sub)
        | plain.map(OrderedDict)
        | plain.map(_Frozen)
        | plain.map(MappingProxyType)
        | st.lists(st.tuples(keys, inner), max_size=4).map(lambda kv: _Frozen(dict(kv)))
    )


values = st.recursive(scalars, _containers, max_leaves=40)


def _outcome(fn: Any, value: Any) -> tuple[str, Any]:
    try:
        return ("ok", fn(value))
    except CanonicalEncodingError as exc:
        return ("error", (type(exc), exc.what, exc.where, exc.expected, repr(exc.got)))


@settings(max_examples=600)
@given(values)
def test_fast_encoding_equals_the_reference_bytes_and_errors(value: Any) -> None:
    """Same bytes, or the same error (type, what, where, expected, got), as encode_value."""
    assert _outcome(encode_fast, value) == _outcome(encode_value, value)


@given(values)
def test_element_encoding_is_the_reference_without_the_array_header(value: Any) -> None:
    """encode_element(x) is encode_value([x]) minus its one-byte header, errors alike."""
    want = _outcome(encode_value, [value])
    got = _outcome(encode_element, value)
    if want[0] == "ok":
        assert got == ("ok", want[1][1:])
    else:
        assert got == want


@given(st.dictionaries(st.text(max_size=300), st.integers(), max_size=20), st.randoms())
def test_str_keys_are_ordered_by_encoded_bytes_in_any_insertion_order(
    mapping: dict[str, int], rnd: Any
) -> None:
    """Keys across str length classes (fixstr, str8, str16) sort as the reference does."""
    items = list(mapping.items())
    rnd.shuffle(items)
    assert encode_fast(dict(items)) == encode_value(mapping)


@pytest.mark.parametrize("n", [0, 1, 15, 16, 255, 65535, 65536])
def test_huge_lists_and_maps_across_header_classes_encode_like_the_reference(n: int) -> None:
    """Arrays and maps at every header length class: the same bytes."""
    items = [{"role": "user", "content": str(i)} for i in range(n)]
    assert encode_fast(items) == encode_value(items)
    mapping = {f"k{i}": i for i in range(n)}
    assert encode_fast(mapping) == encode_value(mapping)


@pytest.mark.parametrize("depth", [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, MAX_DEPTH + 5])
@pytest.mark.parametrize("leaf", [[], [1], {}, {"a": 1}, "x", None])
def test_nesting_at_the_depth_limit_matches_the_reference(depth: int, leaf: Any) -> None:
    """Lists and dicts nested around MAX_DEPTH: accepted or refused exactly as the spec."""
    value: Any = leaf
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    assert _outcome(encode_fast, value) == _outcome(encode_value, value)


def test_keys_with_the_same_encoding_are_refused_with_the_reference_error() -> None:
    """Two NaN keys (unequal in Python, one encoding): the spec's duplicate-key error."""
    clash = {"p": [1, {float("nan"): 1, float("nan"): 2}]}
    want = _outcome(encode_value, clash)
    assert want[0] == "error"
    assert _outcome(encode_fast, clash) == want


def test_a_lone_surrogate_in_a_key_is_named_by_the_reference_path() -> None:
    """The error's where is the reference's, not something the fast path made up."""
    value = {"messages": [{"role": "user", "content": "ok"}, {"ro\udc80le": "x"}]}
    with pytest.raises(CanonicalEncodingError) as exc:
        encode_fast(value)
    assert exc.value.where == "${'messages'}[1]{'ro\\udc80le'}"


class _Shown(str):
    """A str subclass whose str() is not its text."""

    def __str__(self) -> str:
        return "shown"


class _Named(str, Enum):  # noqa: UP042 (the str-mixin form is the point)
    """A str-mixin Enum: str() is "_Named.X", the text is "x"."""

    X = "x"


class _Scaled(float):
    """A float subclass whose float() is not its value."""

    def __float__(self) -> float:
        return 1.0


class _Liar(str):
    """A str subclass equal to every str and hashing like "a"."""

    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return hash("a")


@pytest.mark.parametrize(
    "value",
    [
        _Shown("abc"),
        [_Shown("abc"), {}],
        {_Shown("k"): 1},
        {"a": _Shown("x")},
        [_Named.X, {}],
        {_Named.X: 1},
        {"a": [_Named.X]},
        _Scaled(2.5),
        [_Scaled(2.5)],
        {"a": _Scaled(2.5)},
    ],
)
def test_str_and_float_subclasses_encode_their_value_not_their_str_or_float(value: Any) -> None:
    """A subclass overriding __str__/__float__ (str-mixin Enum) is stored as the spec does."""
    assert encode_fast(value) == encode_value(value)
    assert encode_element(value) == encode_value([value])[1:]


def test_a_key_that_lies_about_equality_never_takes_a_cached_key_plan() -> None:
    """A str-subclass key equal to a cached plan's key is encoded as its own text."""
    encode_fast({"a": [1, {}]})  # caches the plan for ("a",)
    value = {_Liar("x"): [1, {}]}
    assert encode_fast(value) == encode_value(value)


def _packed(value: Any, *, bin_type: bool) -> bytes:
    """``value`` as plain msgpack (no canonical order or forms); b"\\xc1" when it cannot be."""
    try:
        return bytes(msgpack.packb(value, default=repr, use_bin_type=bin_type))
    except (TypeError, ValueError, UnicodeError, OverflowError):
        return b"\xc1"


def _decoded(fn: Any, data: bytes) -> str:
    """The outcome of decoding ``data`` as text (NaN != NaN, so values compare by repr)."""
    return repr(_outcome(fn, data))


@settings(max_examples=400)
@given(values)
def test_fast_decoding_of_canonical_bytes_equals_the_reference(value: Any) -> None:
    """decode_fast of a value's canonical bytes is decode_value's value (or its error)."""
    try:
        data = encode_value(value)
    except CanonicalEncodingError:
        return  # no canonical bytes to decode
    assert _decoded(decode_fast, data) == _decoded(decode_value, data)


@settings(max_examples=400)
@given(
    st.one_of(
        st.binary(max_size=200),
        values.map(lambda v: _packed(v, bin_type=True)),
        values.map(lambda v: _packed(v, bin_type=False)),
    )
)
def test_fast_decoding_of_any_bytes_equals_the_reference(data: bytes) -> None:
    """On any bytes (garbage, msgpack in non-canonical form) decode_fast gives decode_value's
    value or the same error (type, what, where, expected, got)."""
    assert _decoded(decode_fast, data) == _decoded(decode_value, data)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xc1",
        msgpack.packb({"b": 1, "a": 2}),  # keys out of canonical order
        b"\xcd\x00\x01",  # 1 as uint16: not the shortest form
        b"\xcb" + struct_pack_nan(),
        msgpack.packb([1.0]),  # a float64 that the canonical form writes as is
        b"\x92\x01",  # truncated array
    ],
)
def test_fast_decoding_of_adversarial_bytes_equals_the_reference(data: bytes) -> None:
    """Empty, reserved, unsorted, over-long, NaN-payload and truncated bytes: decode_fast
    and decode_value agree on every one."""
    assert _decoded(decode_fast, data) == _decoded(decode_value, data)


@settings(max_examples=300)
@given(st.dictionaries(st.text(max_size=8), values, max_size=5))
def test_checkpoint_metadata_bytes_and_errors_are_the_references(metadata: dict[str, Any]) -> None:
    """``checked_metadata`` (every checkpoint's metadata, encoded by encode_fast) keeps
    encode_value's bytes, and its errors with the path named from the argument."""
    want = _outcome(encode_value, metadata)
    got = _outcome(lambda m: checked_metadata(m, "metadata")[1], metadata)
    if want[0] == "ok":
        assert got == want
    else:
        kind, what, where, expected, value = want[1]
        assert got == ("error", (kind, what, "metadata" + (where or "$")[1:], expected, value))
