"""``EncodedValues ==`` never raises a caller's own exception (review82's leftover).

Since s33 ``==`` compares canonical encodings, and the canonical encoder reads a value
through its methods (``items()`` of a Mapping, ``int()`` of an int subclass, ``+ 0.0``
of a float subclass, ``len()`` of the other sequence): a subclass raising in one of
them raised out of ``==`` (Python's ``==`` had not called them). A value with no
canonical form is equal to nothing (the docstring's rule since s33): a value whose own
methods raise has none to compare, so ``==`` is False and ``!=`` True, as for a set or
a NaN-free value nested too deeply. cpstore's own damage (a blob cut mid-value) is
equal to nothing too, as before.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cpstore.native.canonical import encode_value
from cpstore.run.values import EncodedValues


class BoomError(Exception):
    """The caller's own exception."""


class BadInt(int):
    def __int__(self) -> int:
        raise BoomError("int")

    def __index__(self) -> int:
        raise BoomError("index")


class BadFloat(float):
    def __add__(self, other: Any) -> float:
        raise BoomError("add")


class BadDict(dict):  # type: ignore[type-arg]
    def items(self) -> Any:
        raise BoomError("items")


class BadList(list):  # type: ignore[type-arg]
    def __iter__(self) -> Iterator[Any]:
        raise BoomError("iter")

    def __len__(self) -> int:
        raise BoomError("len")


class BadBytes(bytes):
    def __bytes__(self) -> bytes:
        raise BoomError("bytes")


class BadSequence(Sequence[Any]):
    """Another sequence whose own methods raise."""

    def __init__(self, n: int, fail_len: bool) -> None:
        self._n, self._fail_len = n, fail_len

    def __len__(self) -> int:
        if self._fail_len:
            raise BoomError("len")
        return self._n

    def __getitem__(self, index: Any) -> Any:
        raise BoomError("getitem")


def _packed(values: list[Any]) -> EncodedValues:
    encodings = [encode_value(v) for v in values]
    offsets = array("Q", [0])
    for e in encodings:
        offsets.append(offsets[-1] + len(e))
    return EncodedValues(b"".join(encodings), offsets)


# An int or float subclass is read by its value since review85 (int.__index__,
# float.__float__): BadInt(1) is 1, never raising (test_an_int_raising_..._is_its_value).
BAD = [
    BadFloat(1.0),
    BadDict(a=1),
    BadList([1]),
    BadBytes(b"x"),
    [BadDict(a=1)],
    {"k": BadDict(a=2)},
]


def test_an_int_raising_in_its_own_methods_is_its_value() -> None:
    packed = _packed([1])
    assert (packed == [BadInt(1)]) is True
    assert (packed == [BadInt(2)]) is False


@pytest.mark.parametrize("bad", BAD, ids=lambda b: type(b).__name__)
def test_a_value_raising_in_its_own_methods_is_equal_to_nothing(bad: Any) -> None:
    packed = _packed([1])
    assert (packed == [bad]) is False
    assert (packed != [bad]) is True
    assert ([bad] == packed) is False  # list.__eq__ defers to ours


@pytest.mark.parametrize("fail_len", [True, False])
def test_a_sequence_raising_in_its_own_methods_is_equal_to_nothing(fail_len: bool) -> None:
    packed = _packed([1, 2])
    assert (packed == BadSequence(2, fail_len)) is False
    assert (packed != BadSequence(2, fail_len)) is True


def test_cpstores_own_damage_is_still_equal_to_nothing() -> None:
    packed = EncodedValues(b"\x92\x01", array("Q", [0, 1, 2]))  # cut inside an array
    assert (packed == [[1], 1]) is False


_PLAIN = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=8,
)


@given(st.lists(_PLAIN, max_size=5), st.data())
def test_equality_with_a_bad_value_anywhere(values: list[Any], data: st.DataObject) -> None:
    """Empty, tiny and nested runs; one value replaced by (or wrapped around) a bad one:
    ``==`` is a bool, False, never an exception; the plain list is still equal."""
    packed = _packed(values)
    assert packed == values
    if not values:
        assert packed != [BadDict(a=0)]
        return
    index = data.draw(st.integers(0, len(values) - 1))
    bad = data.draw(st.sampled_from(BAD))
    other = [*values[:index], bad, *values[index + 1 :]]
    assert (packed == other) is False
    assert (packed != other) is True


def test_a_huge_run_against_a_bad_last_value() -> None:
    values = list(range(100_000))
    packed = _packed(values)
    assert packed == values
    assert packed != [*values[:-1], BadDict(a=99_999)]
