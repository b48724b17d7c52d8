"""TOKEN_COUNT says how many tokens the replay consumed and how many requests it
had refused, once refusals stay in P (audit31: a refused request is kept as a
placeholder at its position, the value None). It said "consumed 4 tokens" for a
replay that consumed 2 and was refused twice. Verdict and codes are unchanged.
"""

from __future__ import annotations

import pytest

from cpstore.decision.table import Decision, FindingCode, Verdict
from cpstore.decision.token_checks import REFUSAL_LOOKS
from cpstore.decision.validate import validate
from cpstore.errors import ReplayDivergenceError
from cpstore.replay.cursor import ReplayCursor
from cpstore.run.model import PackedTokens, Run, Token


def _recorded(n: int) -> PackedTokens:
    return PackedTokens.from_tokens(Token(i, ("rng", "clock")[i % 2], i * 10) for i in range(n))


def _decide(rec: PackedTokens, p: PackedTokens) -> Decision:
    r = Run("r", 1, "s", tokens=rec, ledger_sealed=True)
    return validate(r, Run("r", 1, "s", tokens=p, mode=ReplayCursor(rec).mode))


def _count(d: Decision) -> str:
    (f,) = [f for f in d.findings if f.code is FindingCode.TOKEN_COUNT]
    return f.message


def test_refusals_past_the_log_are_not_counted_as_consumed() -> None:
    rec = _recorded(2)
    c = ReplayCursor(rec)
    c.resolve("rng")
    c.resolve("clock")
    for _ in range(2):
        with pytest.raises(ReplayDivergenceError):
            c.resolve("rng")
    d = _decide(rec, c.replayed())
    assert d.verdict is Verdict.REJECT
    msg = _count(d)
    assert "consumed 2 tokens" in msg and "refused 2" in msg, msg
    assert "consumed 4" not in msg
    f = next(f for f in d.findings if f.code is FindingCode.TOKEN_COUNT)
    assert (f.expected, f.observed) == (2, 4)  # the record's figures stay P's entries


def test_refusals_before_the_end_are_not_counted_as_consumed() -> None:
    rec = _recorded(6)
    c = ReplayCursor(rec)
    c.resolve("rng")
    c.resolve("clock")
    for _ in range(2):
        with pytest.raises(ReplayDivergenceError):
            c.resolve("env")  # the recording has an rng here
    d = _decide(rec, c.replayed())
    assert d.verdict is Verdict.REJECT
    assert FindingCode.TOKEN_MISMATCH in d.codes
    msg = _count(d)
    assert "consumed 2 tokens" in msg and "refused 2" in msg and "6 recorded" in msg, msg


def test_without_refusals_the_message_is_as_before() -> None:
    rec = _recorded(4)
    c = ReplayCursor(rec)
    c.resolve("rng")
    c.resolve("clock")
    msg = _count(_decide(rec, c.replayed()))
    assert msg == "replay consumed 2 tokens, fewer than the 4 recorded"


def test_a_recorded_none_value_is_consumed_not_refused() -> None:
    rec = PackedTokens.from_tokens([Token(0, "rng", None), Token(1, "rng", None)])
    c = ReplayCursor(rec)
    c.resolve("rng")
    msg = _count(_decide(rec, c.replayed()))
    assert msg == "replay consumed 1 tokens, fewer than the 2 recorded"


def test_a_none_value_of_the_recorded_kind_is_no_refusal() -> None:
    # The cursor refuses only a kind other than the recording's, or past the log.
    rec = _recorded(3)
    p = PackedTokens.from_tokens([Token(0, "rng", None), Token(1, "clock", 10)])
    msg = _count(_decide(rec, p))
    assert msg == "replay consumed 2 tokens, fewer than the 3 recorded"


def test_a_document_full_of_look_alikes_is_not_counted() -> None:
    # Each look-alike is looked at in Python: past REFUSAL_LOOKS the count stops and
    # the message says so, rather than cost more than the whole token check.
    rec = _recorded(1)
    n = REFUSAL_LOOKS + 10
    p = PackedTokens.from_tokens(Token(0, "env", None) for _ in range(n))
    d = _decide(rec, p)
    assert d.verdict is Verdict.REJECT
    assert _count(d) == (
        f"replay holds {n} token entries (refused requests among them not counted), "
        "more than the 1 recorded"
    )
