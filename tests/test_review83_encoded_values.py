"""review83: ``EncodedValues ==`` (0f16152) against odd sequences.

Found: a memoryview was a sequence of ints to it (``EncodedValues([97]) ==
memoryview(b"a")`` was True, where a bytes or bytearray is never equal: all three are
one bytes value); a sequence whose ``__len__`` said more than it iterated was equal to
a longer EncodedValues (its missing items never compared), and one that iterated more
raised IndexError out of ``==``; a ``range`` past ``sys.maxsize`` raised OverflowError
(``len``). Pinned besides: NaN and -0.0 (one encoding each), tuples, deques and arrays
as sequences, a damaged blob equal to nothing, ``==`` and ``!=`` always opposite, and
no hash.
"""

from __future__ import annotations

import math
from array import array
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from cpstore.native.canonical import encode_value
from cpstore.run.values import EncodedValues


def _packed(values: list[Any]) -> EncodedValues:
    encodings = [encode_value(v) for v in values]
    offsets = array("Q", [0])
    for e in encodings:
        offsets.append(offsets[-1] + len(e))
    return EncodedValues(b"".join(encodings), offsets)


class _Says(Sequence[Any]):
    """A sequence whose ``__len__`` says ``n``, whatever it iterates."""

    def __init__(self, items: list[Any], n: int) -> None:
        self._items, self._n = items, n

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, index: Any) -> Any:
        return self._items[index]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._items)


@pytest.mark.parametrize(
    ("held", "other"),
    [
        ([97], memoryview(b"a")),
        ([97, 98], memoryview(b"ab")),
        ([1, 2], _Says([1], 2)),  # was True: item 2 never compared
        ([1, 2], _Says([1, 2, 3], 2)),  # was IndexError
        ([1, 2], range(10**30)),  # was OverflowError
        ([b"a"], memoryview(b"a")),
    ],
    ids=["mv", "mv2", "iterates-less", "iterates-more", "huge-range", "bytes-vs-mv"],
)
def test_not_equal_and_no_error(held: list[Any], other: Any) -> None:
    packed = _packed(held)
    assert (packed == other) is False
    assert (packed != other) is True


@pytest.mark.parametrize(
    ("held", "other"),
    [
        ([math.nan], [float("nan")]),  # every NaN is one canonical NaN
        ([0.0], [-0.0]),
        ([[1, 2]], [(1, 2)]),
        ([1, 2], (1, 2)),
        ([1, 2], deque([1, 2])),
        ([1, 2], array("q", [1, 2])),
        ([0, 1, 2], range(3)),
        ([1, 2], _Says([1, 2], 2)),
    ],
    ids=["nan", "-0.0", "tuple-in", "tuple", "deque", "array", "range", "honest"],
)
def test_equal_as_encodings(held: list[Any], other: Any) -> None:
    packed = _packed(held)
    assert (packed == other) is True
    assert (packed != other) is False


def test_a_damaged_blob_equals_nothing_and_nothing_is_hashed() -> None:
    damaged = EncodedValues(b"\x01\x02", array("Q", [0, 2, 2]))  # one item is two values
    assert damaged != [1, 2]
    assert damaged != _packed([1, 2])
    with pytest.raises(TypeError):
        hash(_packed([1]))
