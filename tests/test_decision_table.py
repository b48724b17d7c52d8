"""The decision table, row by row, on run documents (no store needed)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from test_decision_support import clean_doc, replay_of

from cpstore.decision.table import FINDING_RULES, Fidelity, FindingCode, Verdict
from cpstore.decision.validate import validate
from cpstore.errors import InvalidInputError, RecordFormatError, ValidationFailedError
from cpstore.native.canonical import decode_value, encode_value
from cpstore.native.records import pack_token_value
from cpstore.run.document import parse_document
from cpstore.run.model import PackedTokens, ReplayMode, Run, Token

if TYPE_CHECKING:
    from cpstore import Decision, Finding


def only(decision: Decision, code: FindingCode) -> Finding:
    """The one finding of ``code`` (and assert there is exactly one)."""
    found = [f for f in decision.findings if f.code is code]
    assert len(found) == 1, decision.findings
    return found[0]


# -- the clean case -----------------------------------------------------------


def test_equal_clean_inputs_accept_as_faithful_evidence() -> None:
    """Identical clean R and P: ACCEPT, FAITHFUL, evidence, no findings."""
    r = clean_doc()
    d = validate(r, replay_of(r))
    assert d.verdict is Verdict.ACCEPT
    assert d.fidelity is Fidelity.FAITHFUL
    assert d.findings == ()
    assert d.evidence and d.standing == "evidence"
    assert not d.releasable


# -- REJECT rows --------------------------------------------------------------


def test_replay_of_replay_tag_rejects_unreleasably() -> None:
    """R tagged ``replay:...`` is REPLAY_OF_REPLAY (seed 004 recursion guard)."""
    r = clean_doc(provenance_tags=["agent:v1", "replay:abc"])
    d = validate(r, replay_of(r))
    f = only(d, FindingCode.REPLAY_OF_REPLAY)
    assert (f.position, f.observed) == (1, "replay:abc")
    assert d.verdict is Verdict.REJECT and not d.releasable


def test_tag_merely_containing_replay_is_not_replay_of_replay() -> None:
    """Only a tag *starting* with ``replay:`` counts."""
    r = clean_doc(provenance_tags=["agent:replay:x", "REPLAY:y"])
    assert validate(r, replay_of(r)).verdict is Verdict.ACCEPT


def test_state_mismatch_rejects() -> None:
    """A different post-state digest is STATE_MISMATCH at R's step."""
    r = clean_doc()
    f = only(validate(r, replay_of(r, state_digest="other")), FindingCode.STATE_MISMATCH)
    assert (f.position, f.unit, f.expected, f.observed) == (47, "step", "state-47", "other")


def test_token_value_mismatch_located_by_seq_and_compared_by_type() -> None:
    """Value 14 vs 14.0 at seq 2 is TOKEN_MISMATCH at seq 2 (type-distinct)."""
    r = clean_doc()
    p = replay_of(r)
    p["tokens"][2]["value"] = 14.0
    d = validate(r, p)
    f = only(d, FindingCode.TOKEN_MISMATCH)
    assert (f.position, f.unit) == (2, "seq")
    assert f.expected["value"] == 14 and type(f.expected["value"]) is int
    assert type(f.observed["value"]) is float
    assert FindingCode.TOKEN_COUNT not in d.codes
    assert d.verdict is Verdict.REJECT


def test_token_kind_mismatch_is_a_token_mismatch() -> None:
    """Same value, different kind: TOKEN_MISMATCH naming both kinds."""
    r = clean_doc()
    p = replay_of(r)
    p["tokens"][4]["kind"] = "env"
    f = only(validate(r, p), FindingCode.TOKEN_MISMATCH)
    assert f.position == 4 and f.expected["kind"] == "clock" and f.observed["kind"] == "env"


@pytest.mark.parametrize("delta", [-2, +1])
def test_token_count_differs(delta: int) -> None:
    """Fewer or more tokens than recorded is TOKEN_COUNT with both counts."""
    r = clean_doc(tokens=6)
    p = replay_of(r, tokens=clean_doc(tokens=6 + delta)["tokens"])
    d = validate(r, p)
    f = only(d, FindingCode.TOKEN_COUNT)
    assert (f.expected, f.observed, f.position) == (6, 6 + delta, min(6, 6 + delta))
    assert FindingCode.TOKEN_MISMATCH not in d.codes


def test_call_graph_mismatch_located_by_index() -> None:
    """A different decision node at index 1 is CALL_GRAPH_MISMATCH at index 1."""
    r = clean_doc()
    p = replay_of(r)
    p["call_graph"][1] = {"step": 12, "node": "read_config_cached"}
    f = only(validate(r, p), FindingCode.CALL_GRAPH_MISMATCH)
    assert (f.position, f.unit) == (1, "index")
    assert f.observed["node"] == "read_config_cached"


def test_call_graph_extra_node_is_a_mismatch() -> None:
    """A replay that took one more decision diverges at the first extra index."""
    r = clean_doc()
    p = replay_of(r)
    p["call_graph"].append({"step": 40, "node": "retry"})
    f = only(validate(r, p), FindingCode.CALL_GRAPH_MISMATCH)
    assert f.position == 3 and f.expected is None


def test_observation_mismatch_rejects_but_is_releasable() -> None:
    """A different payload at step 12 is OBSERVATION_MISMATCH, REJECT, releasable."""
    r = clean_doc()
    p = replay_of(r)
    p["observations"][1]["payload_digest"] = "cfg-v2"
    d = validate(r, p)
    f = only(d, FindingCode.OBSERVATION_MISMATCH)
    assert (f.position, f.unit) == (12, "step")
    assert f.expected == [12, "read_config", "cfg-v1"] and f.observed == [
        12,
        "read_config",
        "cfg-v2",
    ]
    assert d.verdict is Verdict.REJECT and d.releasable


def test_observation_pinned_at_another_time_quarantines() -> None:
    """A read pinned at another time than the recording's was not replayed from the log
    (seed 000, condition 3): re-fetched, UNPINNED_OBSERVATION. Observations still compare
    on (step, source, payload_digest). It was an ACCEPT before audit51
    (tests/test_audit51_pinned_at.py)."""
    r = clean_doc()
    p = replay_of(r)
    p["observations"][0]["pinned_at"] = 999.0
    d = validate(r, p)
    assert d.codes == {FindingCode.UNPINNED_OBSERVATION} and d.verdict is Verdict.QUARANTINE


def test_missing_observation_is_a_mismatch() -> None:
    """A replay that skipped a read diverges at that read."""
    r = clean_doc()
    p = replay_of(r)
    del p["observations"][2]
    f = only(validate(r, p), FindingCode.OBSERVATION_MISMATCH)
    assert f.position == 30 and f.observed is None


# -- QUARANTINE rows ----------------------------------------------------------


def test_unpinned_observation_quarantines_with_count() -> None:
    """pinned_at null (re-fetched) is UNPINNED_OBSERVATION; reported per side with a count."""
    r = clean_doc()
    r["observations"][1]["pinned_at"] = None
    d = validate(r, replay_of(r))
    found = [f for f in d.findings if f.code is FindingCode.UNPINNED_OBSERVATION]
    assert {f.side for f in found} == {"recorded", "replayed"}
    assert all(f.position == 12 and f.count == 1 for f in found)
    assert d.verdict is Verdict.QUARANTINE and d.releasable


def test_live_resolution_quarantines_at_first_live_seq() -> None:
    """A P token with provenance live is LIVE_RESOLUTION at its seq."""
    r = clean_doc()
    p = replay_of(r)
    p["tokens"][3]["provenance"] = "live"
    p["tokens"][5]["provenance"] = "live"
    d = validate(r, p)
    f = only(d, FindingCode.LIVE_RESOLUTION)
    assert (f.side, f.position, f.count) == ("replayed", 3, 2)
    assert d.verdict is Verdict.QUARANTINE


@pytest.mark.parametrize("mode", ["best_effort", None])
def test_non_strict_mode_quarantines(mode: str | None) -> None:
    """best_effort, or no declared mode, is BEST_EFFORT: evidence of nothing."""
    r = clean_doc()
    d = validate(r, replay_of(r, mode=mode))
    f = only(d, FindingCode.BEST_EFFORT)
    assert f.observed == (mode or "undeclared")
    assert d.verdict is Verdict.QUARANTINE and not d.evidence


def test_mode_absent_from_document_is_not_strict() -> None:
    """A replay document without ``mode`` is not trusted as strict."""
    r = clean_doc()
    p = replay_of(r)
    del p["mode"]
    assert FindingCode.BEST_EFFORT in validate(r, p).codes


def test_token_sequence_break_in_recording_quarantines() -> None:
    """R seqs not 0,1,2,... is TOKEN_SEQUENCE at the first break."""
    r = clean_doc()
    r["tokens"][3]["seq"] = 9
    d = validate(r, replay_of(r))
    f = only(d, FindingCode.TOKEN_SEQUENCE)
    assert (f.position, f.expected, f.observed) == (3, 3, 9)
    assert d.verdict is Verdict.QUARANTINE


def test_unsealed_ledger_quarantines() -> None:
    """R's ledger not sealed is LEDGER_UNSEALED."""
    r = clean_doc(ledger_sealed=False)
    d = validate(r, replay_of(r))
    assert d.codes == {FindingCode.LEDGER_UNSEALED}
    assert d.verdict is Verdict.QUARANTINE


def test_ledger_sealed_defaults_to_false_when_absent() -> None:
    """A recording that does not say its ledger was sealed is treated as unsealed."""
    r = clean_doc()
    del r["ledger_sealed"]
    assert FindingCode.LEDGER_UNSEALED in validate(r, replay_of(r)).codes


def test_unrecorded_effect_quarantines_at_its_seq() -> None:
    """An effect not in the sealed ledger at that position is UNRECORDED_EFFECT."""
    r = clean_doc()
    p = replay_of(r)
    p["effects"].append({"seq": 2, "target": "orphan-write", "payload_digest": "x"})
    d = validate(r, p)
    f = only(d, FindingCode.UNRECORDED_EFFECT)
    assert (f.position, f.expected, f.observed) == (2, None, [2, "orphan-write", "x"])
    assert d.verdict is Verdict.QUARANTINE


def test_effect_fewer_than_ledger_is_not_unrecorded() -> None:
    """A replay that performed only a prefix of the ledger attempted nothing unrecorded."""
    r = clean_doc()
    p = replay_of(r)
    p["effects"] = p["effects"][:1]
    assert validate(r, p).verdict is Verdict.ACCEPT


def test_harness_perturbation_quarantines_as_perturbed() -> None:
    """A non-empty harness-access stream is HARNESS_PERTURBATION, DIVERGENT_PERTURBED."""
    r = clean_doc()
    d = validate(r, replay_of(r, harness_accesses=[{"resource": "rate_limiter", "op": "incr"}]))
    f = only(d, FindingCode.HARNESS_PERTURBATION)
    assert f.observed == {"resource": "rate_limiter", "op": "incr"}
    assert d.verdict is Verdict.QUARANTINE
    assert d.fidelity is Fidelity.DIVERGENT_PERTURBED


def test_transcript_mismatch_alone_quarantines_as_lossy() -> None:
    """Transcript differs with an equal call graph: TRANSCRIPT_MISMATCH, QUARANTINE."""
    r = clean_doc()
    d = validate(r, replay_of(r, transcript_digest="transcript-2"))
    assert d.codes == {FindingCode.TRANSCRIPT_MISMATCH}
    assert d.verdict is Verdict.QUARANTINE
    assert d.fidelity is Fidelity.UNVERIFIED


# -- fidelity -----------------------------------------------------------------


def test_call_graph_divergence_hidden_by_equal_transcript_is_perturbed() -> None:
    """Seed 004's dangerous case: equal transcript, different call graph."""
    r = clean_doc()
    p = replay_of(r)
    p["call_graph"][2] = {"step": 30, "node": {"tool": "search_v2", "args": ["q"]}}
    d = validate(r, p)
    assert d.fidelity is Fidelity.DIVERGENT_PERTURBED
    assert d.verdict is Verdict.REJECT
    assert d.recording_gaps == ()


def test_call_graph_and_transcript_both_differ_is_causal_with_gap_report() -> None:
    """Both differ: DIVERGENT_CAUSAL and a recording gap naming the step and unpinned sources."""
    r = clean_doc()
    r["observations"][1]["pinned_at"] = None
    p = replay_of(r, transcript_digest="transcript-2")
    p["call_graph"][1] = {"step": 12, "node": "read_config_live"}
    p["observations"].insert(
        2, {"step": 12, "source": "env", "payload_digest": "e", "pinned_at": None}
    )
    d = validate(r, p)
    assert d.fidelity is Fidelity.DIVERGENT_CAUSAL
    (gap,) = d.recording_gaps
    assert gap.step == 12
    assert gap.unpinned_sources == ("env", "read_config")
    assert gap.unrecorded_sources == ("env",)


def test_other_findings_are_unverified_not_faithful() -> None:
    """A state mismatch alone is REJECT with fidelity UNVERIFIED."""
    r = clean_doc()
    d = validate(r, replay_of(r, state_digest="x"))
    assert d.fidelity is Fidelity.UNVERIFIED and not d.evidence


# -- reporting ----------------------------------------------------------------


def test_every_finding_is_reported_not_just_the_first() -> None:
    """A replay wrong in every stream lists one finding per row that fired."""
    r = clean_doc(provenance_tags=["replay:x"], ledger_sealed=False)
    r["tokens"][1]["seq"] = 5
    r["observations"][0]["pinned_at"] = None
    p = replay_of(
        r,
        run_id="another-run",
        step=r["step"] + 1,
        state_digest="s2",
        transcript_digest="t2",
        mode="best_effort",
        harness_accesses=["counter"],
    )
    p["tokens"][0]["value"] = "other"
    p["tokens"][2]["provenance"] = "live"
    p["tokens"].append({"seq": 6, "kind": "rng", "value": 1, "provenance": "recorded"})
    p["call_graph"][0]["node"] = "plan2"
    p["observations"][2]["payload_digest"] = "zz"
    p["effects"].append({"seq": 2, "target": "t", "payload_digest": "d"})
    d = validate(r, p)
    # CHECKPOINT_MISMATCH needs R from a store (tests/test_ident72_replayed_checkpoint.py).
    assert d.codes == set(FindingCode) - {FindingCode.INTEGRITY, FindingCode.CHECKPOINT_MISMATCH}
    order = [f.code for f in d.findings]
    assert order == sorted(order, key=list(FindingCode).index)
    assert d.divergences["tokens"].code is FindingCode.TOKEN_MISMATCH


def test_table_levels_and_releasability_match_the_issue() -> None:
    """FINDING_RULES is the table: REJECT rows, and which ones a sign-off releases."""
    rejects = {c for c, (lvl, _) in FINDING_RULES.items() if lvl is Verdict.REJECT}
    assert {c.value for c in rejects} == {
        "INTEGRITY",
        "RUN_MISMATCH",
        "STEP_MISMATCH",
        "REPLAY_OF_REPLAY",
        "STATE_MISMATCH",
        "TOKEN_MISMATCH",
        "TOKEN_COUNT",
        "CALL_GRAPH_MISMATCH",
        "OBSERVATION_MISMATCH",
    }
    unreleasable = {c.value for c, (_, rel) in FINDING_RULES.items() if not rel}
    assert unreleasable == {
        "INTEGRITY",
        "RUN_MISMATCH",
        "STEP_MISMATCH",
        "REPLAY_OF_REPLAY",
        "STATE_MISMATCH",
        "TOKEN_MISMATCH",
        "TOKEN_COUNT",
        "CALL_GRAPH_MISMATCH",
    }
    assert set(FINDING_RULES) == set(FindingCode)


def test_decision_ids_are_unique_per_validation() -> None:
    """Two validations of the same pair get different decision ids."""
    r = clean_doc()
    a, b = validate(r, replay_of(r)), validate(r, replay_of(r))
    assert a.id != b.id and len(a.id) == 32


def test_failure_is_data_unless_raise_is_requested() -> None:
    """A REJECT returns; raise_on_failure raises ValidationFailedError carrying it."""
    r = clean_doc()
    p = replay_of(r, state_digest="x")
    assert validate(r, p).verdict is Verdict.REJECT
    with pytest.raises(ValidationFailedError) as info:
        validate(r, p, raise_on_failure=True)
    assert info.value.decision is not None
    assert info.value.decision.verdict is Verdict.REJECT
    validate(r, replay_of(r), raise_on_failure=True)  # ACCEPT does not raise


def test_to_dict_is_canonical_plain_data() -> None:
    """The decision's dict (audit body, --json) round-trips the canonical encoding."""
    r = clean_doc()
    p = replay_of(r, state_digest="x")
    p["tokens"][0]["value"] = b"\x00bytes"
    body = validate(r, p).to_dict()
    assert decode_value(encode_value(body)) == body
    assert body["verdict"] == "REJECT" and body["findings"][0]["code"] == "STATE_MISMATCH"


# -- packed inputs ------------------------------------------------------------


def test_packed_buffer_from_a_replay_engine_is_compared_directly() -> None:
    """A Run built on a raw packed buffer (no values) validates and names the digest."""
    r = parse_document(clean_doc(tokens=4))
    raw = b"".join(
        pack_token_value(i, ("rng", "clock", "tool")[i % 3], 1, i * 7 if i != 2 else 0)
        for i in range(4)
    )
    p = Run(
        r.run_id,
        r.step,
        r.state_digest,
        tokens=PackedTokens(memoryview(raw)),
        observations=r.observations,
        call_graph=r.call_graph,
        transcript_digest=r.transcript_digest,
        effects=r.effects,
        mode=ReplayMode.STRICT,
    )
    f = only(validate(r, p), FindingCode.TOKEN_MISMATCH)
    assert f.position == 2 and "value" not in f.observed and len(f.observed["value_digest"]) == 32


def test_malformed_packed_replay_buffer_is_bad_input_not_a_verdict() -> None:
    """A hand-built buffer with reserved bytes set raises RecordFormatError."""
    r = parse_document(clean_doc(tokens=2))
    raw = bytearray(r.tokens.view())
    raw[32 + 13] = 1  # reserved byte of record 1
    p = Run(
        r.run_id, r.step, r.state_digest, tokens=PackedTokens(bytes(raw)), mode=ReplayMode.STRICT
    )
    with pytest.raises(RecordFormatError, match=r"replayed\.tokens\[1\]"):
        validate(r, p)


def test_packed_tokens_from_tokens_round_trips_info() -> None:
    """PackedTokens.from_tokens keeps values and names of custom kinds."""
    pt = PackedTokens.from_tokens([Token(0, "rng", 4), Token(1, "my-kind", "x", "live")])
    assert len(pt) == 2
    info = pt.info(1)
    assert (info.seq, info.kind, info.value, info.provenance) == (1, "my-kind", "x", "live")


def test_checkpoint_id_without_store_is_bad_input() -> None:
    """A 32-hex id with no store is refused as input, not validated as a path."""
    with pytest.raises(InvalidInputError, match="needs a store"):
        validate("0" * 32, clean_doc())


def test_unsupported_input_type_is_bad_input() -> None:
    """Anything but a Run, a mapping, bytes or a path raises InvalidInputError."""
    with pytest.raises(InvalidInputError):
        validate(42, clean_doc())  # type: ignore[arg-type]


def test_docs_decision_table_matches_finding_rules() -> None:
    """Every row of docs/decision-table.md's findings table equals FINDING_RULES."""
    text = (Path(__file__).parent.parent / "docs" / "decision-table.md").read_text()
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0] in FindingCode.__members__:
            rows[FindingCode(cells[0])] = (Verdict[cells[2]], cells[3] == "yes")
    assert rows == dict(FINDING_RULES)
