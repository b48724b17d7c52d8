"""audit33: what audit31's refusals must leave alone — valid numbers and our own values.

audit31 refused JSON number literals past the float range, repeated msgpack keys,
and packed token values whose offsets do not cut one msgpack item each (in
``Recorder.tokens_packed`` and in the replay cursor, block by block). These pin the
other side of each line: the extremes of the float and integer ranges read the same
on the streamed and the strict JSON path, and every value type our own writers
produce (big ints as ext, deep nesting, long str/bin, maps) goes through
``tokens_packed`` from each document encoding, is served back by the stored cursor
across a block boundary, and validates ACCEPT.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cpstore.decision.table import Verdict
from cpstore.decision.validate import validate
from cpstore.errors import DocumentError
from cpstore.replay.cursor import ReplayCursor
from cpstore.run.document import dump_document, load_document
from cpstore.run.model import Observation, PackedTokens, ReplayMode, Run, Token
from cpstore.store.facade import open as open_store

_DIGEST = "ab" * 16
_KINDS = ("rng", "clock", "tool", "env")


def _doc(value: str, *, spaced: bool) -> bytes:
    run = Run(
        "r",
        1,
        "s",
        tokens=PackedTokens.from_tokens([Token(0, "rng", 7)]),
        observations=(Observation(0, "src", _DIGEST, 2.0),),
    )
    raw = dump_document(run)
    assert raw.count(b'"value": 7') == 1
    raw = raw.replace(b'"value": 7', b'"value": ' + value.encode())
    # an escaped key is valid JSON the streamed path leaves to the strict one
    return raw.replace(b'"run_id"', b'"run\\u005fid"') if spaced else raw


@pytest.mark.parametrize("spaced", [False, True], ids=["streamed", "strict"])
@pytest.mark.parametrize(
    ("literal", "value"),
    [
        ("1e308", 1e308),
        ("-1e308", -1e308),
        ("5e-324", 5e-324),
        ("-5e-324", -5e-324),
        ("1.7976931348623157e308", 1.7976931348623157e308),
        ("1.7976931348623158e308", 1.7976931348623157e308),  # rounds down: finite
        ("1E308", 1e308),
        ("2.2250738585072014e-308", 2.2250738585072014e-308),
        ("18446744073709551615", 2**64 - 1),
        ("-9223372036854775808", -(2**63)),
        ("123456789012345678901234567890", 123456789012345678901234567890),
    ],
)
def test_number_literals_in_range_load_the_same_on_both_paths(
    literal: str, value: Any, spaced: bool
) -> None:
    run = load_document(_doc(literal, spaced=spaced))
    assert run.tokens.values is not None
    got = run.tokens.values[0]
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize("spaced", [False, True], ids=["streamed", "strict"])
@pytest.mark.parametrize("literal", ["1e400", "-1e400", "1.7976931348623159e308"])
def test_number_literals_past_the_float_range_are_refused_on_both_paths(
    literal: str, spaced: bool
) -> None:
    with pytest.raises(DocumentError, match="float range"):
        load_document(_doc(literal, spaced=spaced))


def _values() -> list[Any]:
    deep: Any = 1
    for _ in range(200):
        deep = [deep]
    common: list[Any] = [
        None,
        True,
        False,
        0,
        -1,
        2**64 - 1,
        -(2**63),
        1e308,
        -1e308,
        5e-324,
        0.5,
        "",
        "é" * 40,
        [],
        {},
        {"a": [1, {"b": None}], "c": "d"},
        list(range(20)),
        {str(i): i for i in range(20)},
    ]
    once: list[Any] = [deep, "x" * 70_000, 2**200, -(2**100), b"", b"\x00\xff" * 40_000]
    return once + common * 240  # > 4096 tokens: the cursor checks two blocks


@pytest.mark.parametrize("encoding", ["list", "cprun", "json", "msgpack"])
def test_our_own_values_go_through_tokens_packed_and_the_cursor(
    tmp_path: Path, encoding: str
) -> None:
    values = _values()
    if encoding == "json":  # no bytes in JSON
        values = [v for v in values if not isinstance(v, bytes)]
    if encoding == "msgpack":  # no int beyond 64 bits in msgpack
        values = [v for v in values if not (isinstance(v, int) and not -(2**63) <= v < 2**64)]
    tokens = PackedTokens.from_tokens(Token(i, _KINDS[i % 4], v) for i, v in enumerate(values))
    if encoding != "list":
        raw = dump_document(Run("r", 1, "s", tokens=tokens), encoding=encoding)
        tokens = load_document(raw).tokens
        assert not isinstance(tokens.values, list)  # the blob + offsets path is checked
    with open_store(tmp_path / "s") as store:
        rec = store.recorder("r")
        rec.tokens_packed(tokens)
        cid = rec.checkpoint(1, b"state")
        rec.close()
        with store.read(cid) as cp:
            cursor = ReplayCursor.from_checkpoint(cp)
            got = [cursor.resolve(_KINDS[i % 4]) for i in range(len(values))]
            cursor.assert_fully_consumed()
            replayed = cursor.replayed()
            state = cp.manifest.state_digest
        assert got == values
        p = Run("r", 1, state, tokens=replayed, mode=ReplayMode.STRICT)
        assert validate(cid, p, store=store, record=False).verdict is Verdict.ACCEPT
