"""review83: ``PackedTokens.kind_names`` is keyed by kind codes, read by value.

Taken unchecked, a key that is no kind code was kept: the ``.cprun`` writer's
``int(k)`` raised a bare ValueError (``"x"``) or TypeError (``Mock(spec=int)``), and
``validate`` a TypeError (``int.__index__`` of the Mock); a bool, a negative code or one
past 32 bits was written as given. An int subclass's code was written as its own
``__int__`` by the ``.cprun`` writer, as its value by the validator. Now a key must be
an int in [0, 2**32) by type and value, and is held as a plain int; the names are left
as given (audit68).
"""

from __future__ import annotations

import io
from typing import Any
from unittest import mock

import pytest

from cpstore.errors import InvalidInputError
from cpstore.native.records import kind_code
from cpstore.run.document import load_document
from cpstore.run.model import PackedTokens, Run
from cpstore.run.writer import write_document

_CODE = kind_code("fetch")


class _Says(int):
    """A code whose ``__int__`` and ``__index__`` give 5, whatever its value."""

    def __int__(self) -> int:
        return 5

    def __index__(self) -> int:
        return 5

    __hash__ = int.__hash__


@pytest.mark.parametrize(
    "key",
    ["x", mock.Mock(spec=int), True, -1, 2**32, 1.0],
    ids=["str", "Mock(spec=int)", "True", "-1", "2**32", "1.0"],
)
def test_a_key_that_is_no_kind_code_is_refused(key: Any) -> None:
    with pytest.raises(InvalidInputError) as err:
        PackedTokens(b"", values=[], kind_names={key: "fetch"})
    assert err.value.where == "tokens.kind_names"


def test_a_subclass_code_is_held_and_written_as_its_value() -> None:
    tokens = PackedTokens(b"", values=[], kind_names={_Says(_CODE): "fetch"})
    assert tokens.kind_names == {_CODE: "fetch"}
    assert all(type(k) is int for k in tokens.kind_names)
    out = io.BytesIO()
    write_document(Run("r", 0, "d", tokens=tokens), out, encoding="cprun")
    assert load_document(out.getvalue()).tokens.kind_names == {_CODE: "fetch"}  # was {5: ..}


def test_names_are_left_as_given() -> None:
    odd: Any = {5: 7}
    assert PackedTokens(b"", kind_names=odd).kind_names is odd
