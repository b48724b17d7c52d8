"""audit51: the step a call-graph or observation divergence is located at is where it began.

At the first index where the two sequences differ, the replay departed from the
recording at the *earlier* of the two entries' steps: a replay that inserted a read
(or a decision) at step 5 before the recorded step-12 one diverged at step 5. Before
audit51 the recorded entry's step was reported (12), so seed 004's recording-gap
report ("identifying the step and the class of missing observation") named step 12
with no sources, and missed the live read at step 5 that the recording lacks; the
OBSERVATION_MISMATCH was located at step 12 too.
"""

from __future__ import annotations

from typing import Any

from test_decision_support import clean_doc, replay_of

from cpstore import validate
from cpstore.decision.table import Fidelity, FindingCode, Verdict


def _inserted_live_read() -> tuple[dict[str, Any], dict[str, Any]]:
    r = clean_doc()
    p = replay_of(r, transcript_digest="transcript-2")
    p["observations"].insert(
        1, {"step": 5, "source": "cache", "payload_digest": "x", "pinned_at": None}
    )
    p["call_graph"].insert(1, {"step": 5, "node": "use_cache"})
    return r, p


def test_recording_gap_names_the_step_where_the_replay_departed() -> None:
    r, p = _inserted_live_read()
    d = validate(r, p)
    assert d.verdict is Verdict.REJECT and d.fidelity is Fidelity.DIVERGENT_CAUSAL
    (gap,) = d.recording_gaps
    assert gap.step == 5
    assert gap.unrecorded_sources == ("cache",) and gap.unpinned_sources == ("cache",)
    cg = d.divergences["call_graph"]
    assert (cg.position, cg.unit) == (1, "index") and "(step 5)" in cg.message


def test_observation_mismatch_is_located_at_the_earlier_step() -> None:
    r, p = _inserted_live_read()
    f = next(f for f in validate(r, p).findings if f.code is FindingCode.OBSERVATION_MISMATCH)
    assert (f.position, f.unit) == (5, "step") and "at step 5" in f.message


def test_a_skipped_read_is_located_at_the_recorded_step() -> None:
    """P skipped the step-12 read and went on to step 30: the departure is step 12."""
    r = clean_doc()
    p = replay_of(r)
    del p["observations"][1]
    f = next(f for f in validate(r, p).findings if f.code is FindingCode.OBSERVATION_MISMATCH)
    assert f.position == 12
