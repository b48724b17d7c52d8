"""Properties of the decision table over generated recording/replay pairs (hypothesis)."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from test_decision_support import colliding_kinds

from cpstore.decision.table import FINDING_RULES, Finding, FindingCode, Verdict, verdict_for
from cpstore.decision.validate import validate

#: Two custom kinds whose 31-bit codes collide: the recording uses the first.
KIND_A, KIND_B = colliding_kinds()
KINDS = ("rng", "clock", "tool", "env", "custom", KIND_A)
values = st.one_of(
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False),
    st.text(max_size=8),
    st.binary(max_size=8),
    st.booleans(),
    st.none(),
)


@st.composite
def recordings(draw: st.DrawFn) -> dict[str, Any]:
    """A clean recording: every condition of the table holds."""
    n_tok = draw(st.integers(0, 30))
    steps = sorted(draw(st.lists(st.integers(0, 60), min_size=1, max_size=8)))
    return {
        "format": 1,
        "run_id": draw(st.text(min_size=1, max_size=5)),
        "step": 60,
        "state_digest": draw(st.text(min_size=1, max_size=8)),
        "observations": [
            {
                "step": s,
                "source": draw(st.sampled_from(["clock", "cfg", "net"])),
                "payload_digest": draw(st.text(max_size=6)),
                "pinned_at": draw(st.floats(0, 1e9)),
            }
            for s in steps
        ],
        "tokens": [
            {
                "seq": i,
                "kind": draw(st.sampled_from(KINDS)),
                "value": draw(values),
                "provenance": "recorded",
            }
            for i in range(n_tok)
        ],
        "call_graph": [{"step": s, "node": draw(st.text(max_size=5))} for s in steps],
        "transcript_digest": draw(st.one_of(st.none(), st.text(max_size=6))),
        "effects": [
            {
                "seq": i,
                "target": draw(st.text(max_size=4)),
                "payload_digest": draw(st.text(max_size=4)),
            }
            for i in range(draw(st.integers(0, 4)))
        ],
        "ledger_sealed": True,
        "harness_accesses": [],
        "provenance_tags": draw(st.lists(st.sampled_from(["agent:a", "env:b"]), max_size=2)),
        "mode": "strict",
    }


def _tok_value(doc: dict[str, Any]) -> None:
    if doc["tokens"]:
        t = doc["tokens"][len(doc["tokens"]) // 2]
        t["value"] = ["changed", t["value"]]
    else:
        doc["tokens"].append({"seq": 0, "kind": "rng", "value": 1, "provenance": "recorded"})


def _tok_kind(doc: dict[str, Any]) -> None:
    if doc["tokens"]:
        t = doc["tokens"][0]
        t["kind"] = "rng" if t["kind"] != "rng" else "clock"
    else:
        _tok_value(doc)


def _tok_colliding_kind(doc: dict[str, Any]) -> None:
    # The other name with the same 31-bit code: equal codes, different kinds.
    hits = [t for t in doc["tokens"] if t["kind"] == KIND_A]
    if not hits and doc["tokens"]:
        hits = doc["tokens"][:1]
    for t in hits:
        t["kind"] = KIND_B
    if not hits:
        doc["tokens"].append({"seq": 0, "kind": KIND_B, "value": 1, "provenance": "recorded"})


#: Mutations of P, each making one row of the table fire (R stays clean).
MUTATIONS: dict[str, Any] = {
    "state": lambda d: d.update(state_digest=d["state_digest"] + "'"),
    "token_value": _tok_value,
    "token_kind": _tok_kind,
    "token_kind_collision": _tok_colliding_kind,
    "run_id": lambda d: d.update(run_id=d["run_id"] + "'"),
    "step": lambda d: d.update(step=999),
    "token_extra": lambda d: d["tokens"].append(
        {"seq": len(d["tokens"]), "kind": "rng", "value": 0, "provenance": "recorded"}
    ),
    "call_graph": lambda d: d["call_graph"][0].update(node=d["call_graph"][0]["node"] + "'"),
    "observation": lambda d: d["observations"][0].update(
        payload_digest=d["observations"][0]["payload_digest"] + "'"
    ),
    "unpinned": lambda d: d["observations"][-1].update(pinned_at=None),
    "live": lambda d: d["tokens"][-1].update(provenance="live") if d["tokens"] else None,
    "best_effort": lambda d: d.update(mode="best_effort"),
    "effect": lambda d: d["effects"].append({"seq": 99, "target": "x", "payload_digest": "y"}),
    "harness": lambda d: d["harness_accesses"].append("counter"),
    "transcript": lambda d: d.update(transcript_digest=(d["transcript_digest"] or "") + "'"),
}

STRUCTURAL = {
    "token_value": {FindingCode.TOKEN_MISMATCH, FindingCode.TOKEN_COUNT},
    "token_kind": {FindingCode.TOKEN_MISMATCH, FindingCode.TOKEN_COUNT},
    "token_kind_collision": {FindingCode.TOKEN_MISMATCH, FindingCode.TOKEN_COUNT},
    "run_id": {FindingCode.RUN_MISMATCH},
    "step": {FindingCode.STEP_MISMATCH},
    "token_extra": {FindingCode.TOKEN_COUNT},
    "call_graph": {FindingCode.CALL_GRAPH_MISMATCH},
    "observation": {FindingCode.OBSERVATION_MISMATCH},
}


def mutated(doc: dict[str, Any], names: list[str]) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    for name in names:
        MUTATIONS[name](out)
    return out


@settings(max_examples=60, deadline=None)
@given(recordings())
def test_equal_inputs_always_accept(r: dict[str, Any]) -> None:
    """A clean recording validated against itself is ACCEPT, FAITHFUL, no findings."""
    d = validate(r, copy.deepcopy(r))
    assert d.verdict is Verdict.ACCEPT and not d.findings


@settings(max_examples=80, deadline=None)
@given(recordings(), st.sampled_from(sorted(STRUCTURAL)))
def test_state_equality_never_overrides_a_stream_difference(r: dict[str, Any], name: str) -> None:
    """Equal state digests, yet an observation/token/call-graph difference: REJECT."""
    p = mutated(r, [name])
    assert p["state_digest"] == r["state_digest"]
    d = validate(r, p)
    assert d.verdict is Verdict.REJECT
    assert d.codes & STRUCTURAL[name]
    assert FindingCode.STATE_MISMATCH not in d.codes


@settings(max_examples=80, deadline=None)
@given(recordings(), st.lists(st.sampled_from(sorted(MUTATIONS)), unique=True, max_size=6))
def test_verdict_is_the_maximum_level_over_findings(r: dict[str, Any], names: list[str]) -> None:
    """For any replay, verdict == max(level of each finding), ACCEPT when none."""
    d = validate(r, mutated(r, names))
    assert d.verdict == max((FINDING_RULES[f.code][0] for f in d.findings), default=Verdict.ACCEPT)
    assert (d.verdict is Verdict.ACCEPT) == (not d.findings)


@settings(max_examples=80, deadline=None)
@given(
    recordings(),
    st.lists(st.sampled_from(sorted(MUTATIONS)), unique=True, max_size=5),
    st.sampled_from(sorted(MUTATIONS)),
)
def test_adding_a_divergence_never_improves_the_verdict(
    r: dict[str, Any], names: list[str], extra: str
) -> None:
    """Applying one more mutation never lowers the verdict nor removes a code."""
    before = validate(r, mutated(r, names))
    after = validate(r, mutated(r, [*names, extra] if extra not in names else names))
    assert after.verdict >= before.verdict
    assert before.verdict is Verdict.ACCEPT or after.verdict is not Verdict.ACCEPT


finding_codes = st.sampled_from(list(FindingCode))


def _finding(code: FindingCode) -> Finding:
    return Finding(code, "s", "both", None, "", None, None, "m")


@given(st.lists(finding_codes), finding_codes)
def test_adding_a_finding_never_improves_verdict_for(
    codes: list[FindingCode], extra: FindingCode
) -> None:
    """verdict_for is monotone: one more finding never lowers it."""
    base = [_finding(c) for c in codes]
    assert verdict_for([*base, _finding(extra)]) >= verdict_for(base)
    assert verdict_for([*base, _finding(extra)]) >= FINDING_RULES[extra][0]
