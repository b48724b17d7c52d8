"""review76 (policy, pinned): ``pinned_at`` is a float, so integer pins past 2**53 round.

docs/run-document.md: ``pinned_at`` is a finite number. Every reader holds it as a
float (``pinned_or_none``), so two integer pins that differ only past the 53 bits of a
float's mantissa (``2**53 + 1`` and ``2**53``) are one pin: a replay pinned at one
validates against a recording pinned at the other as pinned at the same time. A pin is
a time; no clock cpstore knows counts past 2**53 units. Kept, and listed as a policy
question in review76's report; a pin that differs within the float's precision is a
re-fetch (UNPINNED_OBSERVATION), as before.
"""

from __future__ import annotations

import json

from run_docs import doc_body

from cpstore.decision.table import FindingCode, Verdict
from cpstore.decision.validate import validate
from cpstore.run.document import load_document


def _doc(pin: float, mode: str | None = None) -> bytes:
    observation = {"step": 1, "source": "clock", "payload_digest": "p", "pinned_at": pin}
    body = doc_body(step=5, observations=[observation], tokens=[], ledger_sealed=True, mode=mode)
    return json.dumps(body).encode()


def test_integer_pins_past_the_float_mantissa_are_one_pin() -> None:
    recording, replay = load_document(_doc(2**53 + 1)), load_document(_doc(2**53, "strict"))
    assert recording.observations[0].pinned_at == replay.observations[0].pinned_at == 2.0**53
    assert validate(recording, replay).verdict is Verdict.ACCEPT


def test_a_pin_one_float_step_away_is_a_refetch() -> None:
    recording = load_document(_doc(1.0000000000000002))
    replay = load_document(_doc(1, "strict"))
    decision = validate(recording, replay)
    assert decision.verdict is Verdict.QUARANTINE
    assert [f.code for f in decision.findings] == [FindingCode.UNPINNED_OBSERVATION]
