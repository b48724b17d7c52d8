"""A float token alone is checked from its bits when a packed run is written as JSON.

``check_keys`` decodes every value holding a byte that may start something JSON cannot
hold; a float token is the commonest, and decoding each made a float-heavy JSON write
1.6x slower (review76). A value that is exactly one float64 (``0xcb`` and 8 bytes) is
now judged by its bits: these pin that finite ones still round trip, bit for bit, and
that a NaN or an infinity among them is refused at its index before a byte is written."""

from __future__ import annotations

import io
import math

import pytest

from cpstore.errors import InvalidInputError
from cpstore.run.cprun import dump_cprun, parse_cprun
from cpstore.run.document import load_document
from cpstore.run.model import PackedTokens, Run, Token
from cpstore.run.writer import write_document

FINITE = [0.0, -0.0, 1.5, -2.25, 1e308, -1e-308, 5e-324, 2.0**53 + 2, 1 / 3]


def _packed(values: list[object]) -> Run:
    tokens = PackedTokens.from_tokens([Token(i, "rng", v) for i, v in enumerate(values)])
    return parse_cprun(dump_cprun(Run("r", 1, "s", tokens=tokens)))


def test_finite_float_tokens_round_trip_through_json() -> None:
    run = _packed([*FINITE, "x", [1.5], 7])
    out = io.BytesIO()
    write_document(run, out, encoding="json")
    back = load_document(out.getvalue())
    assert bytes(back.tokens.view()) == bytes(run.tokens.view())


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("at", [0, 4, len(FINITE)])
def test_a_nan_or_infinity_token_is_refused_at_its_index(bad: float, at: int) -> None:
    values: list[object] = list(FINITE)
    values.insert(at, bad)
    run = _packed(values)
    out = io.BytesIO()
    with pytest.raises(InvalidInputError, match="not representable") as info:
        write_document(run, out, encoding="json")
    assert info.value.where == f"tokens[{at}].value"
    assert out.getvalue() == b""
    write_document(run, io.BytesIO(), encoding="msgpack")  # msgpack holds them
