"""A token's value is shown in its canonical form, whatever Python object was given.

review79's leftover: ``PackedTokens.info`` of a run whose values are a Python list showed
``-0.0``, a tuple or a subclass as given, while the same run read from a document shows
``0.0``, a list, the plain value (4 of 7 fail before). The findings' text was already
canonical; the second test pins that a run and its documents give the same findings."""

from __future__ import annotations

from typing import Any

import pytest

from cpstore.decision.validate import validate
from cpstore.run.document import dump_document, load_document
from cpstore.run.model import PackedTokens, Run, Token


class _Float(float):
    def __repr__(self) -> str:
        return "_Float(!)"


def _run(values: list[Any]) -> Run:
    # the records of ``values``, with the values kept as the caller's own objects
    records = PackedTokens.from_tokens(
        Token(i, "rng", v, "recorded") for i, v in enumerate(values)
    ).records
    return Run("r", 0, "s", tokens=PackedTokens(records, values=list(values)))


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        (-0.0, 0.0),
        ((1, 2), [1, 2]),
        (_Float(1.5), 1.5),
        ({"b": (1,), "a": -0.0}, {"a": 0.0, "b": [1]}),
    ],
)
def test_a_value_is_shown_canonical(given: Any, shown: Any) -> None:
    info = _run([given]).tokens.info(0)
    assert info.value == shown and type(info.value) is type(shown)
    assert repr(info.value) == repr(shown)


@pytest.mark.parametrize("given", [-0.0, (1, 2), _Float(1.5)])
def test_findings_read_the_same_from_python_and_from_a_document(given: Any) -> None:
    recorded, replayed = _run([given, 1]), _run([5, 1])  # the finding names ``given``
    direct = validate(recorded, replayed, record=False)
    for encoding in ("json", "msgpack", "cprun"):
        back = validate(
            load_document(dump_document(recorded, encoding=encoding)),
            load_document(dump_document(replayed, encoding=encoding)),
            record=False,
        )
        assert back.verdict == direct.verdict
        assert [str(f) for f in back.findings] == [str(f) for f in direct.findings], encoding
