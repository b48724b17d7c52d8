"""review76: a finding shows a token's value only when it is the value its record hashes.

``PackedTokens.values`` are taken unchecked (they make findings readable). A replay
whose record holds rng 2 but whose values said 1 was rightly a REJECT, but the finding
read "recorded rng 1 vs replayed rng 1", with 1 as the observed value; and a ``.cprun``
replay whose values section was damaged (rewritten with its section digest) made
``validate`` raise a bare CanonicalEncodingError naming neither token nor file instead
of deciding. ``PackedTokens.info`` now gives a value only after checking it against the
record's digest; otherwise the finding shows the digest, as for a run without values.
"""

from __future__ import annotations

from array import array

import pytest

from cpstore.decision.table import FindingCode, Verdict
from cpstore.decision.validate import validate
from cpstore.run.cprun import dump_cprun, parse_cprun
from cpstore.run.model import PackedTokens, ReplayMode, Run, Token
from cpstore.run.values import EncodedValues

STATE = "00" * 16


def _recording() -> Run:
    tokens = PackedTokens.from_tokens([Token(0, "rng", 1)])
    return Run("run", 1, STATE, tokens=tokens, ledger_sealed=True)


def _replay(values: object) -> Run:
    records = PackedTokens.from_tokens([Token(0, "rng", 2)]).view()
    tokens = PackedTokens(records, values=values)  # type: ignore[arg-type]
    return Run("run", 1, STATE, tokens=tokens, mode=ReplayMode.STRICT)


def test_a_value_that_is_not_the_records_is_not_shown() -> None:
    decision = validate(_recording(), _replay([1]))
    assert decision.verdict is Verdict.REJECT
    (finding,) = decision.findings
    assert finding.code is FindingCode.TOKEN_MISMATCH
    assert finding.expected["value"] == 1
    assert "value" not in finding.observed  # before: 1, the value the record is not
    assert "replayed rng #" in finding.message  # before: "replayed rng 1"


@pytest.mark.parametrize("blob", [b"\xd1\x00\x02", b"\xc1", b""], ids=["long", "bad", "empty"])
def test_a_damaged_cprun_value_is_a_verdict_not_a_crash(blob: bytes) -> None:
    values = EncodedValues(blob, array("Q", [0, len(blob)]))
    replay = parse_cprun(dump_cprun(_replay(values)))  # the section digest rewritten
    decision = validate(_recording(), replay)  # before: CanonicalEncodingError
    assert decision.verdict is Verdict.REJECT
    assert [f.code for f in decision.findings] == [FindingCode.TOKEN_MISMATCH]


def test_the_records_own_value_is_still_shown() -> None:
    decision = validate(_recording(), _replay([2]))
    (finding,) = decision.findings
    assert finding.observed["value"] == 2
    assert "replayed rng 2" in finding.message
