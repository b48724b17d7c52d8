"""The bulk path agrees with the per-token path on every input, through a replay.

A recording made token by token (``Recorder.token``) and one made in bulk
(``Recorder.tokens``: one msgspec encode, one native batch digest, packed columns) are
the same checkpoint; a STRICT cursor over either, stored (zero-copy, verified in blocks)
or in memory, serves the same values; and what the native comparison in ``validate``
finds for a replay that asked for other kinds at some tokens is what a per-token loop
over the reference twin (``cpstore.native.reference``) finds. Values include the edges:
ints at ±2**63 and 2**64 - 1, -0.0 and NaNs, non-UTF-8 bytes, astral characters, and
nested containers.
"""

from __future__ import annotations

import contextlib
import math
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cpstore
from cpstore.decision.table import FindingCode, Verdict
from cpstore.decision.validate import validate
from cpstore.errors import ReplayDivergenceError
from cpstore.native import reference
from cpstore.native.binding import first_divergence
from cpstore.native.canonical import encode_value
from cpstore.native.records import RecordType
from cpstore.replay import ReplayCursor, ReplaySession
from cpstore.run.model import PackedTokens, ReplayMode, Run, Token
from cpstore.store.facade import open as open_store

PROPERTY = settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

KINDS = ["rng", "clock", "tool", "env", "my.kind", "другой"]

_SCALARS = (
    st.none()
    | st.booleans()
    | st.sampled_from([2**63 - 1, 2**63, 2**64 - 1, -(2**63), -(2**63) + 1, -33, -32, 0])
    | st.integers(-(2**64), 2**64 - 1)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([-0.0, math.nan, 5e-324])
    | st.text(max_size=4)
    | st.sampled_from(["\U0010ffff", "é", ""])
    | st.binary(max_size=4)
    | st.sampled_from([b"\xff\xfe", b"\x80"])
)
VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner, max_size=2)
    ),
    max_leaves=6,
)
ITEMS = st.lists(st.tuples(st.sampled_from(KINDS), VALUES), max_size=12)
STATE = b"state"


def _record(path: Path, items: list[tuple[str, Any]], *, bulk: bool) -> str:
    with open_store(path) as store:
        rec = store.recorder("run")
        if bulk:
            rec.tokens(items)
        else:
            for kind, value in items:
                rec.token(kind, value)
        return rec.checkpoint(1, STATE)


def _encodings(values: list[Any]) -> list[bytes]:
    return [encode_value(v) for v in values]  # NaN != NaN: compare the canonical bytes


@PROPERTY
@given(items=ITEMS)
def test_bulk_and_single_recordings_replay_to_the_same_values(
    tmp_path_factory: Any, items: list[tuple[str, Any]]
) -> None:
    base = tmp_path_factory.mktemp("b")
    single = _record(base / "single", items, bulk=False)
    bulk = _record(base / "bulk", items, bulk=True)
    assert single == bulk
    in_memory = ReplayCursor(
        PackedTokens.from_tokens(Token(i, k, v) for i, (k, v) in enumerate(items))
    )
    expected = _encodings([in_memory.resolve(k) for k, _ in items])
    assert expected == _encodings([v for _, v in items])
    for name in ("single", "bulk"):
        with open_store(base / name) as store, store.read(single) as cp:
            session = ReplaySession(cp)
            served = [session.cursor.resolve(k) for k, _ in items]
            assert _encodings(served) == expected
            replay = session.finish(cpstore.state_digest(STATE))
            assert bytes(replay.tokens.view()) == bytes(in_memory.replayed().view())
            other = "bulk" if name == "single" else "single"
        with open_store(base / other) as store:  # P of one, validated against the other
            assert validate(single, replay, store=store, record=False).verdict is Verdict.ACCEPT


@PROPERTY
@given(items=ITEMS.filter(bool), data=st.data())
def test_the_native_comparison_finds_what_a_per_token_loop_finds(
    items: list[tuple[str, Any]], data: st.DataObject
) -> None:
    """A replay that asks for other kinds at some tokens (refused, kept in P), then goes
    on: validate's TOKEN_MISMATCH / TOKEN_COUNT are where the reference loop says."""
    recorded = PackedTokens.from_tokens(Token(i, k, v) for i, (k, v) in enumerate(items))
    asked = [
        data.draw(st.sampled_from(KINDS)) if data.draw(st.integers(0, 4)) == 0 else k
        for k, _ in items
    ]
    asked += data.draw(st.lists(st.sampled_from(KINDS), max_size=2))  # past the end
    cursor = ReplayCursor(recorded)
    for kind in asked:
        with contextlib.suppress(ReplayDivergenceError):  # swallowed; the refusal stays in P
            cursor.resolve(kind)
    replay = cursor.replayed()
    r_run = Run("run", 1, "00" * 16, tokens=recorded, ledger_sealed=True)
    p_run = Run("run", 1, "00" * 16, tokens=replay, mode=ReplayMode.STRICT)
    decision = validate(r_run, p_run)
    fields = ("seq", "kind", "value")
    native = first_divergence(RecordType.TOKEN, recorded.view(), replay.view(), fields=fields)
    twin = reference.first_divergence(
        RecordType.TOKEN, recorded.view(), replay.view(), fields=fields
    )
    assert native == twin
    # The per-token loop: the first index whose (seq, kind code, value digest) differ.
    r_recs = [bytes(recorded.view()[32 * i : 32 * i + 32]) for i in range(len(recorded))]
    p_recs = [bytes(replay.view()[32 * i : 32 * i + 32]) for i in range(len(replay))]
    first = next(
        (
            i
            for i, (a, b) in enumerate(zip(r_recs, p_recs, strict=False))
            if a[:12] + a[16:] != b[:12] + b[16:]
        ),
        None,
    )
    found = {f.code: f for f in decision.findings}
    mismatch = found.get(FindingCode.TOKEN_MISMATCH)
    assert (mismatch.position if mismatch else None) == first
    assert (FindingCode.TOKEN_COUNT in found) == (len(r_recs) != len(p_recs))
    faithful = asked == [k for k, _ in items]
    assert (decision.verdict is Verdict.ACCEPT) == faithful
