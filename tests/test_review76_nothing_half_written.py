"""review76: ``write_document`` refuses a run its encoding cannot hold before a byte is written.

JSON holds no bytes, no NaN or infinity and no int longer than the interpreter's
int-to-str limit (4 300 digits by default); msgpack no int outside [-2**63, 2**64).
The refusals were there (InvalidInputError), but raised by the encoder in the middle of
the stream: ``write_document`` (and ``ReplaySession.write(..., encoding="json")``) had
already written the document's head and left the caller's stream holding a cut
document. Map keys were checked up front (``check_keys``); every scalar is now checked
the same way, for plain values and for the canonical blobs of a loaded or ``.cprun``
run alike.
"""

from __future__ import annotations

import io
import math
from typing import Any

import pytest

from cpstore.errors import InvalidInputError
from cpstore.run.cprun import dump_cprun, parse_cprun
from cpstore.run.document import dump_document, load_document
from cpstore.run.model import PackedTokens, Run, Token
from cpstore.run.writer import write_document

BIG = 10**5000  # more digits than json.dumps writes by default
NOT_IN = {
    "json": [b"x", math.nan, -math.inf, BIG, [1, {"a": b"y"}], {"k": [math.inf]}],
    "msgpack": [2**64, -(2**63) - 1, BIG, [1, {"a": 2**70}], {"k": [-(2**64)]}],
}
CASES = [
    pytest.param(enc, v, id=f"{enc}-{i}")
    for enc, values in NOT_IN.items()
    for i, v in enumerate(values)
]


def _run(value: Any, where: str) -> Run:
    tokens = [Token(0, "rng", 1), Token(1, "clock", "t")]
    nodes: tuple[dict[str, Any], ...] = ({"step": 1, "node": "a"},)
    harness: tuple[Any, ...] = ()
    if where == "token":
        tokens.append(Token(2, "tool", value))
    elif where == "node":
        nodes = ({"step": 1, "node": value},)
    else:
        harness = (value,)
    return Run(
        "r",
        1,
        "s",
        tokens=PackedTokens.from_tokens(tokens),
        call_graph=nodes,
        harness_accesses=harness,
    )


@pytest.mark.parametrize(("encoding", "value"), CASES)
@pytest.mark.parametrize("where", ["token", "node", "harness"])
@pytest.mark.parametrize("packed", [False, True], ids=["objects", "cprun"])
def test_a_value_the_encoding_cannot_hold_is_refused_before_a_byte(
    encoding: str, value: Any, where: str, packed: bool
) -> None:
    run = _run(value, where)
    if packed:
        run = parse_cprun(dump_cprun(run))  # token values as canonical blobs
    out = io.BytesIO()
    with pytest.raises(InvalidInputError, match="not representable"):
        write_document(run, out, encoding=encoding)
    assert out.getvalue() == b""  # before: the head, or the head and some tokens
    with pytest.raises(InvalidInputError, match="not representable"):
        dump_document(run, encoding=encoding)


@pytest.mark.parametrize("encoding", ["json", "msgpack"])
def test_values_each_encoding_holds_still_round_trip(encoding: str) -> None:
    edge: list[Any] = [2**63 - 1, -(2**63), 2**64 - 1, 0.0, -0.0, 1e308, "\x00", "é", True, None]
    if encoding == "json":
        edge += [2**70, -(2**70), 10**4000]
    else:
        edge += [b"\xc4\xcb", b""]
    run = parse_cprun(dump_cprun(_run(edge, "token")))
    out = io.BytesIO()
    write_document(run, out, encoding=encoding)
    back = load_document(out.getvalue())
    assert bytes(back.tokens.view()) == bytes(run.tokens.view())
