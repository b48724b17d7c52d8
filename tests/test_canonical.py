"""The canonical encoding: one encoding per value, strict decoding, clear refusals."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import cpstore

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=True)
    | st.text()
    | st.binary()
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.dictionaries(st.text(max_size=5) | st.integers(-5, 5), inner, max_size=5)
    ),
    max_leaves=30,
)


def _norm(value: Any) -> Any:
    """What a value decodes back to: tuples are lists, NaN stays NaN."""
    if isinstance(value, tuple):
        return [_norm(v) for v in value]
    if isinstance(value, list):
        return [_norm(v) for v in value]
    if isinstance(value, dict):
        return {k: _norm(v) for k, v in value.items()}
    return value


@given(values)
def test_encoding_round_trips_and_is_stable(value: Any) -> None:
    """decode(encode(v)) re-encodes to the same bytes."""
    encoded = cpstore.native.encode_value(value)
    assert cpstore.native.encode_value(cpstore.native.decode_value(encoded)) == encoded


@given(st.dictionaries(st.text(max_size=8), st.integers(), max_size=12), st.randoms())
def test_map_key_order_never_changes_the_bytes(mapping: dict[str, int], rnd: Any) -> None:
    """Equal maps built in any insertion order encode the same."""
    items = list(mapping.items())
    rnd.shuffle(items)
    assert cpstore.native.encode_value(dict(items)) == cpstore.native.encode_value(mapping)


@given(values, values)
def test_equal_encodings_only_for_equal_values(a: Any, b: Any) -> None:
    """Different bytes for values Python calls different (NaN aside)."""
    ea, eb = cpstore.native.encode_value(a), cpstore.native.encode_value(b)
    if ea == eb:
        decode = cpstore.native.decode_value
        assert repr(_norm(decode(ea))) == repr(_norm(decode(eb)))


@given(st.integers(min_value=-(2**200), max_value=2**200))
def test_every_int_round_trips(value: int) -> None:
    """Big and small ints decode to themselves."""
    assert cpstore.native.decode_value(cpstore.native.encode_value(value)) == value


def test_negative_zero_and_zero_share_bytes_but_differ_from_int_zero() -> None:
    """-0.0 and 0.0 encode equally (they are equal); 0 and False do not."""
    assert cpstore.native.encode_value(-0.0) == cpstore.native.encode_value(0.0)
    assert len({cpstore.native.encode_value(v) for v in (0, 0.0, False, "", b"", None)}) == 6


@pytest.mark.parametrize(
    ("value", "where"),
    [
        (object(), "$"),
        ({1, 2}, "$"),
        ([1, {"k": object()}], "$[1]{'k'}"),
        ("\ud800", "$"),
    ],
)
def test_unsupported_values_are_refused_with_their_path(value: Any, where: str) -> None:
    """Unsupported types and lone surrogates raise CanonicalEncodingError naming the path."""
    with pytest.raises(cpstore.errors.CanonicalEncodingError) as info:
        cpstore.native.encode_value(value)
    assert info.value.where == where
    assert isinstance(info.value, ValueError)


def test_colliding_map_keys_are_refused() -> None:
    """Two distinct NaN keys would encode the same; the map is refused."""
    with pytest.raises(cpstore.errors.CanonicalEncodingError, match="same canonical encoding"):
        cpstore.native.encode_value({math.nan: 1, float("nan"): 2})


def test_too_deep_nesting_is_refused_not_recursed() -> None:
    """Nesting past MAX_DEPTH raises instead of blowing the stack."""
    deep: Any = []
    for _ in range(300):
        deep = [deep]
    with pytest.raises(cpstore.errors.CanonicalEncodingError, match="too deeply"):
        cpstore.native.encode_value(deep)


@pytest.mark.parametrize(
    "hexbytes",
    [
        "cc01",  # 1 as uint8: not shortest
        "ca3f800000",  # float 32
        "82a16201a16102",  # unsorted map
        "d90131",  # str8 for a 1-byte string: not shortest
        "c70102ff",  # unknown ext type
        "",  # nothing
        "92",  # truncated array
        "c1",  # never-used byte
    ],
)
def test_non_canonical_bytes_are_refused(hexbytes: str) -> None:
    """decode_value refuses anything that is not the one canonical encoding."""
    with pytest.raises(cpstore.errors.CanonicalEncodingError):
        cpstore.native.decode_value(bytes.fromhex(hexbytes))
