"""``EncodedValues ==`` judges values as a validation does: by canonical encoding.

review76 found it compared with Python's equality, so a run's values equalled a list
holding ``True`` where the run held ``1`` (or ``1.0``): three different tokens to a
replay check, one to ``==``. A replay engine comparing ``run.tokens.values`` with its
own list would have been told "same"."""

from __future__ import annotations

from array import array
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cpstore.native.canonical import encode_value
from cpstore.run.values import EncodedValues


def _packed(values: list[Any]) -> EncodedValues:
    encodings = [encode_value(v) for v in values]
    offsets = array("Q", [0])
    for e in encodings:
        offsets.append(offsets[-1] + len(e))
    return EncodedValues(b"".join(encodings), offsets)


@pytest.mark.parametrize(
    ("held", "other", "equal"),
    [
        ([1], [1], True),
        ([1], [True], False),
        ([True], [1], False),
        ([1], [1.0], False),
        ([0], [False], False),
        (["1"], [1], False),
        ([b"a"], ["a"], False),
        ([[1, 2]], [(1, 2)], True),  # a tuple is a list to the canonical form
        ([{"a": 1, "b": 2}], [{"b": 2, "a": 1}], True),
        ([{"a": 1}], [{"a": True}], False),
        ([0.0], [-0.0], True),  # the canonical form keeps one zero
        ([1, 2], [1], False),
        ([1], [{1}], False),  # no canonical form: equal to nothing
        ([], [], True),
    ],
)
def test_equal_exactly_when_the_encodings_are(
    held: list[Any], other: list[Any], equal: bool
) -> None:
    packed = _packed(held)
    assert (packed == other) is equal
    assert (packed != other) is not equal
    assert (other == packed) is equal  # list.__eq__ defers to ours


def test_not_equal_to_text_or_bytes() -> None:
    packed = _packed(["a", "b"])
    assert packed != "ab"
    assert packed != b"ab"
    assert packed == ["a", "b"]


_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.text(max_size=5),
    st.binary(max_size=5),
)
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)


@given(st.lists(_values, max_size=6), st.lists(_values, max_size=6))
def test_equality_is_encoding_equality(held: list[Any], other: list[Any]) -> None:
    want = len(held) == len(other) and all(
        encode_value(a) == encode_value(b) for a, b in zip(held, other, strict=True)
    )
    assert (_packed(held) == other) is want
    assert (_packed(held) == _packed(other)) is want
