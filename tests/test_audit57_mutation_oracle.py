"""audit57: a field-mutation oracle for ``validate`` (docs/decision-table.md).

A recording R and its faithful STRICT replay P validate to ACCEPT. Then every field
that carries identity or evidence on either side (identity, state, mode, seal,
harness, tags, every observation / token / decision / effect field, and each list's
items: dropped, duplicated, swapped with the next, an extra one, emptied) is mutated
on ONE side, by a small fixed set of changes (one byte or value, a type change,
empty, null, dropped). Each mutated pair must either be refused as bad input (a
``DocumentError`` naming the field, never a crash) or give exactly the findings,
located exactly where, that a reference table written from the docs alone gives
(``tests/audit57_oracle.py``), and so the verdict. A mutation the reference keeps at
ACCEPT must be one the docs say is not compared (``KEPT`` below, each with its doc
line). The fixed enumeration covers every field on every run; hypothesis adds pairs
of mutations, on one side or both, and the other input forms (msgpack, ``.cprun``).

The same mutations run against a stored recording (the recorder) with the replay a
``ReplaySession`` built, and a sample through ``cpstore validate`` (exit codes).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgpack
import pytest
from audit57_oracle import (
    DROP,
    Located,
    Mutation,
    apply,
    mutations,
    recording,
    replay_of,
    spec_fidelity,
    spec_findings,
    spec_verdict,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_decision_support import colliding_kinds

from cpstore import ReplaySession, dump_document, parse_document, state_digest, validate
from cpstore.cli.entry import main as cli_main
from cpstore.decision.table import Decision, Verdict
from cpstore.errors import (
    CpstoreError,
    DocumentError,
    FormatVersionError,
    ReplayDivergenceError,
)
from cpstore.native.canonical import encode_value
from cpstore.run.document import document_dict
from cpstore.run.model import ReplayMode
from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store

R0 = recording()
P0 = replay_of(R0)
MUTATIONS = list(mutations(R0))

#: Mutations that keep the ACCEPT, with the doc line that says the field is not
#: compared (or compares equal). Keyed by (side, field), field without item index.
KEPT: dict[tuple[str, str], str] = {
    # decision-table.md: "R declaring `strict` (or nothing) adds no finding."
    ("R", "mode"): "decision-table.md, Notes, Mode",
    # run-document.md fields table: "`ledger_sealed` ... R: was the ledger sealed at
    # checkpoint time" (P's is not read).
    ("P", "ledger_sealed"): "run-document.md, Fields",
    # decision-table.md, Notes, ReplaySession: "as P its tags are never compared, so
    # the tag changes no verdict there"; REPLAY_OF_REPLAY: "R carries a provenance tag
    # starting with `replay:`" (other tags of R are not identity).
    ("P", "provenance_tags"): "decision-table.md, ReplaySession",
    ("R", "provenance_tags"): "decision-table.md, Findings, REPLAY_OF_REPLAY",
    # decision-table.md, Notes, Effects: "A replay that performed only a prefix of the
    # ledger attempted nothing unrecorded." (P dropped its last effects; R grew.)
    ("P", "effects"): "decision-table.md, Notes, Effects",
    ("R", "effects"): "decision-table.md, Notes, Effects",
    # decision-table.md, HARNESS_PERTURBATION: "P's harness-access stream is not
    # empty"; run-document.md: "`harness_accesses` ... P: the replay harness's own
    # accesses". R's stream is not read: POLICY QUESTION (see the audit57 report):
    # a recording made under a replay harness carries accesses seed 004 says perturb.
    ("R", "harness_accesses"): "decision-table.md, Findings, HARNESS_PERTURBATION",
    ("P", "harness_accesses"): "an empty stream stays empty (dropped: default [])",
    # audit51 / checks._pin: an int pin is the same instant as its float (100 == 100.0).
    ("R", "observations.pinned_at"): "tests/test_audit51_pinned_at.py (int pin = float)",
    ("P", "observations.pinned_at"): "tests/test_audit51_pinned_at.py (int pin = float)",
}


def _field(m: Mutation) -> str:
    head, _, leaf = m.path.partition(".")
    name = head.partition("[")[0]
    return f"{name}.{leaf}" if leaf else name


def _same(a: Any, b: Any) -> bool:
    """Equal as the canonical encoding sees them (1, 1.0 and True differ)."""
    try:
        return bytes(encode_value(a)) == bytes(encode_value(b))
    except CpstoreError:
        return False


def located(decision: Decision) -> Located:
    return {(f.code.name, f.side): (f.position, f.unit) for f in decision.findings}


def classed(decision: Decision) -> tuple[str, tuple[Any, ...]]:
    gaps = tuple(
        (g.step, g.unpinned_sources, g.unrecorded_sources) for g in decision.recording_gaps
    )
    return decision.fidelity.name, gaps


def check(m: Mutation, decide: Any) -> None:
    """Run ``decide(r, p)`` on the mutated pair; compare with the reference table."""
    r, p = apply(m, R0, P0)
    if _same(r, R0) and _same(p, P0):  # a change to the value it had (P's mode "strict")
        assert decide(r, p).verdict is Verdict.ACCEPT
        return
    try:
        decision = decide(r, p)
    except (DocumentError, FormatVersionError) as exc:
        # Bad input is refused naming the field mutated, never a verdict or a crash.
        assert exc.where is not None and exc.where.startswith(m.path.partition("[")[0]), (
            m.ident,
            exc,
        )
        # Only an enumeration refuses a same-type change (format 2, mode "stricu").
        assert m.op not in ("one_byte", "plus_one", "plus_half", "swap", "duplicate") or _field(
            m
        ) in ("format", "mode", "tokens.provenance"), (m.ident, exc)
        return
    want = spec_findings(r, p)
    assert located(decision) == want, m.ident
    assert decision.verdict.name == spec_verdict(want), m.ident
    assert classed(decision) == spec_fidelity(r, p, want), m.ident
    if decision.verdict is Verdict.ACCEPT:
        assert (m.side, _field(m)) in KEPT, f"{m.ident}: ACCEPT of a field the docs compare"
    else:
        assert not decision.evidence and decision.standing == "hypothesis"
    for finding in decision.findings:  # the first divergence of each stream is named
        assert decision.divergences[finding.stream].code is not None


def test_the_unmutated_pair_accepts_in_every_form() -> None:
    run_r, run_p = parse_document(R0), parse_document(P0)
    for r, p in (
        (R0, P0),
        (run_r, run_p),
        (msgpack.packb(R0, use_bin_type=True), msgpack.packb(P0, use_bin_type=True)),
        (dump_document(run_r, encoding="cprun"), dump_document(run_p, encoding="cprun")),
    ):
        d = validate(r, p)
        assert d.verdict is Verdict.ACCEPT and d.findings == () and d.evidence


def test_the_enumeration_covers_every_field() -> None:
    fields = {(m.side, _field(m)) for m in MUTATIONS}
    for side in ("R", "P"):
        for name in R0:
            assert (side, name) in fields
        for name in ("observations", "tokens", "call_graph", "effects"):
            for leaf in R0[name][0]:
                assert (side, f"{name}.{leaf}") in fields
    ops = {m.op for m in MUTATIONS}
    assert {"drop", "duplicate", "swap", "extra_key", "append", "empty", "to_str"} <= ops
    assert len(MUTATIONS) > 800


def test_every_field_the_docs_do_not_compare_keeps_the_accept() -> None:
    """Each KEPT field has a mutation that changes it and still ACCEPTs (so KEPT lists
    no field the docs compare: an ACCEPT elsewhere fails the test below)."""
    kept = set()
    for m in MUTATIONS:
        r, p = apply(m, R0, P0)
        if _same(r, R0) and _same(p, P0):
            continue
        try:
            if validate(r, p).verdict is Verdict.ACCEPT:
                kept.add((m.side, _field(m)))
        except CpstoreError:
            continue
    assert kept == set(KEPT)


@pytest.mark.parametrize("m", MUTATIONS, ids=lambda m: m.ident)
def test_each_field_mutation_on_one_side(m: Mutation) -> None:
    check(m, validate)


# -- pairs of mutations and the other input forms (hypothesis) ----------------------


def _forms(doc: Mapping[str, Any]) -> list[Any]:
    out: list[Any] = [msgpack.packb(doc, use_bin_type=True)]
    with contextlib.suppress(CpstoreError):
        run = parse_document(doc)
        out += [run, dump_document(run, encoding="cprun")]
    return out


@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    st.lists(st.sampled_from(MUTATIONS), min_size=1, max_size=3),
    st.integers(0, 2),
)
def test_mutations_combined_and_in_every_form(ms: list[Mutation], form: int) -> None:
    r, p = dict(R0), dict(P0)
    for m in ms:
        try:
            r, p = (m.apply(r), p) if m.side == "R" else (r, m.apply(p))
        except (IndexError, KeyError):
            return  # an earlier mutation removed what this one names
    try:
        want = validate(r, p)
    except CpstoreError:
        return
    assert located(want) == spec_findings(r, p)
    assert want.verdict.name == spec_verdict(spec_findings(r, p))
    assert classed(want) == spec_fidelity(r, p, spec_findings(r, p))
    rf, pf = _forms(r), _forms(p)
    got = validate(rf[min(form, len(rf) - 1)], pf[min(form, len(pf) - 1)])
    assert located(got) == located(want) and got.verdict is want.verdict


# -- the fixed defect: where a divergence is located ----------------------------------


def test_a_token_divergence_is_located_at_its_position_not_rs_broken_seq() -> None:
    """R's seqs broken (its first token dropped): tokens at seq 1.. are equal on both
    sides, and the replay departs at position 0. Before audit57 TOKEN_MISMATCH was
    located at R's seq there (1), naming a pair of tokens that agree."""
    r = replay_of(R0)
    del r["tokens"][0]
    d = validate(r, P0)
    first = d.divergences["tokens"]
    assert (first.code.name, first.position, first.unit) == ("TOKEN_MISMATCH", 0, "seq")
    r = replay_of(R0)
    r["tokens"][0], r["tokens"][5] = r["tokens"][5], r["tokens"][0]  # seqs 5,1,2,3,4,0
    first = validate(r, P0).divergences["tokens"]
    assert (first.code.name, first.position) == ("TOKEN_MISMATCH", 0)


def test_an_effect_divergence_is_located_at_the_ledger_entry_not_ps_seq() -> None:
    """P's first attempt claims seq 1 (its db write) or is the mail write (its db write
    dropped): the ledger entry it violates is seq 0 (db). Before audit57 the finding
    named P's claimed seq, 1: the mail entry, which P's second attempt matches."""
    p = replay_of(P0)
    p["effects"][0]["seq"] = 1
    f = validate(R0, p).divergences["effects"]
    assert (f.code.name, f.position, f.expected) == ("UNRECORDED_EFFECT", 0, [0, "db", "e0"])
    assert f.observed == [1, "db", "e0"]
    p = replay_of(P0)
    del p["effects"][0]
    f = validate(R0, p).divergences["effects"]
    assert (f.position, f.expected, f.observed) == (0, [0, "db", "e0"], [1, "mail", "e1"])


# -- a stored recording and a ReplaySession replay ------------------------------------

STATE1 = {"messages": ["hi"], "memory": {"k": 1}}
STATE2 = {"messages": ["hi", "there"], "memory": {"k": 2}}


def _record(store: Store, tamper: Mapping[str, Any] | None = None) -> tuple[str, str]:
    """Two checkpoints of one run (the second's parent is the first); ``tamper``
    changes one thing the second records."""
    t = dict(tamper or {})
    with store.recorder(t.get("run_id", "run-s")) as rec:
        rec.observe(1, "clock", b"t1", pinned_at=10.0)
        rec.token("rng", 4)
        rec.decision(1, "plan")
        c1 = rec.checkpoint(1, STATE1)
        reads = [("read_config", t.get("payload", b"cfg-v1"), t.get("pin", 11.0))]
        if t.get("reads") == "duplicated":
            reads = reads * 2
        if t.get("reads") == "extra_first":
            reads = [("clock", b"t2", 11.0), *reads]
        for source, payload, pin in reads:
            rec.observe(2, source, payload, pinned_at=pin)
        tokens = [(t.get("kind", "clock"), t.get("value", 1.5)), ("my-kind", b"raw")]
        if t.get("tokens") == "dropped":
            tokens = tokens[:1]
        if t.get("tokens") == "extra":
            tokens = [*tokens, ("rng", 5)]
        if t.get("tokens") == "swapped":
            tokens = tokens[::-1]
        for kind, value in tokens:
            rec.token(kind, value, provenance=t.get("provenance", "recorded"))
        rec.decision(2, "select_tool", tool=t.get("tool", "search"))
        if t.get("decisions") == "extra":
            rec.decision(2, "answer")
        rec.effect("db", t.get("effect", b"row"))
        if t.get("effects") == "extra":
            rec.effect("mail", b"hi")
        if t.get("harness"):
            rec.harness_access("cache", {"n": 1})
        rec.transcript(t.get("transcript", b"hello"))
        c2 = rec.checkpoint(
            t.get("step", 2),
            t.get("state", STATE2),
            tags=t.get("tags", ["agent:v1"]),
            seal_ledger=t.get("seal", True),
        )
        if not t.get("seal", True):
            rec.close(discard_effects=True)  # the unsealed effect stays in c2's ledger
    return c1, c2


def _session(cp: Any, deviate: str = "", mode: ReplayMode = ReplayMode.STRICT) -> ReplaySession:
    """A ReplaySession over open checkpoint ``cp`` that replays it faithfully, but for
    the one ``deviate`` names (what a buggy or perturbed replay engine would do; an
    error the session raises is swallowed, as seed 002's retry loop does)."""
    session = ReplaySession(cp, mode=mode)
    kinds = [cp.token(i)[1] for i in range(cp.token_count())]
    if deviate == "token_skipped":
        kinds = kinds[:-1]
    if deviate == "token_extra":
        kinds = [*kinds, "rng"]
    if deviate == "token_kind":
        kinds[1] = "rng"
    for kind in kinds:
        with contextlib.suppress(ReplayDivergenceError):
            session.cursor.resolve(kind, live=lambda: 99)
    reads = [(step, source) for step, source, _digest, _pin in cp.observations()]
    if deviate == "read_skipped":
        reads = reads[:1]
    if deviate == "read_twice":
        reads = [reads[0], *reads]
    if deviate == "reads_swapped":
        reads = reads[::-1]
    for step, source in reads:
        if deviate.startswith("read_live") and source == "read_config":
            payload = b"cfg-v1" if deviate == "read_live_same" else b"cfg-v2"
            session.observe_live(step, source, payload)
            continue
        with contextlib.suppress(ReplayDivergenceError):
            session.observations.read(step, source)
    nodes = [{k: v for k, v in node.items() if k != "step"} for node in cp.call_graph()]
    steps = [node["step"] for node in cp.call_graph()]
    if deviate == "decision_field":
        nodes[1]["tool"] = "fetch"
    for step, node in zip(steps, nodes, strict=True):
        session.decision(step, node)
    if deviate == "decision_extra":
        session.decision(2, "answer")
    if deviate == "harness_access":
        session.harness_access({"resource": "cache", "op": "stat"})
    effects = [(target, cp.effect_payload(seq)) for seq, target, _digest in cp.effects()]
    if deviate == "effect_skipped":
        effects = []
    if deviate == "effect_extra":
        effects = [*effects, ("mail", b"hi")]
    if deviate == "effect_payload":
        effects = [("db", b"other row")]
    for target, payload in effects:
        with contextlib.suppress(ReplayDivergenceError):
            session.guard.check(target, payload)
    return session


def _replay(store: Store, cid: str, state: Any = STATE2) -> Any:
    """A faithful STRICT replay of checkpoint ``cid`` made with a ReplaySession."""
    with store.read(cid) as cp:
        transcript = cp.manifest.transcript_digest
        return _session(cp).finish(state_digest(state), transcript_digest=transcript)


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with open_store(tmp_path_factory.mktemp("s") / "s") as store:
        c1, c2 = _record(store)
        yield store, c1, c2, _replay(store, c2)


@pytest.mark.parametrize(
    ("deviate", "expected"),
    [
        ("token_skipped", {("TOKEN_COUNT", "both"): 2}),
        ("token_extra", {("TOKEN_COUNT", "both"): 3}),
        # Asked rng where clock was recorded: refused, and so is the next request
        # (my-kind, the cursor still at clock); each refusal is kept at its position.
        ("token_kind", {("TOKEN_MISMATCH", "both"): 1}),
        ("read_skipped", {("OBSERVATION_MISMATCH", "both"): 2}),
        # Refused (one recorded clock read at step 1): kept unpinned, so also UNPINNED.
        (
            "read_twice",
            {("OBSERVATION_MISMATCH", "both"): 1, ("UNPINNED_OBSERVATION", "replayed"): 1},
        ),
        ("reads_swapped", {("OBSERVATION_MISMATCH", "both"): 1}),
        ("read_live_same", {("UNPINNED_OBSERVATION", "replayed"): 2}),
        (
            "read_live_other",
            {("OBSERVATION_MISMATCH", "both"): 2, ("UNPINNED_OBSERVATION", "replayed"): 2},
        ),
        ("decision_field", {("CALL_GRAPH_MISMATCH", "both"): 1}),
        ("decision_extra", {("CALL_GRAPH_MISMATCH", "both"): 2}),
        ("harness_access", {("HARNESS_PERTURBATION", "replayed"): 0}),
        ("effect_extra", {("UNRECORDED_EFFECT", "replayed"): 1}),
        ("effect_payload", {("UNRECORDED_EFFECT", "replayed"): 0}),
        # decision-table.md, Notes, Effects: a prefix of the ledger is no finding.
        ("effect_skipped", {}),
    ],
)
def test_a_session_replay_that_deviates_in_one_thing(
    stored: Any, deviate: str, expected: Mapping[tuple[str, str], Any]
) -> None:
    """What a replay engine does wrong through the session API (skips, repeats, swaps,
    reads live, decides otherwise, touches the harness, writes more), each swallowing
    the session's error: the finding it must give, located."""
    store, _c1, c2, _p = stored
    with store.read(c2) as cp:
        transcript = cp.manifest.transcript_digest
        p = _session(cp, deviate).finish(state_digest(STATE2), transcript_digest=transcript)
    d = validate(c2, p, store=store, record=False)
    assert _stored_findings(d) == dict(expected)
    assert (d.verdict is Verdict.ACCEPT) == (not expected)


def test_a_best_effort_session_replay_is_never_evidence(stored: Any) -> None:
    store, _c1, c2, _p = stored
    with store.read(c2) as cp:
        transcript = cp.manifest.transcript_digest
        faithful = _session(cp, mode=ReplayMode.BEST_EFFORT)
        p = faithful.finish(state_digest(STATE2), transcript_digest=transcript)
        extra = _session(cp, "token_extra", mode=ReplayMode.BEST_EFFORT)
        q = extra.finish(state_digest(STATE2), transcript_digest=transcript)
    d = validate(c2, p, store=store, record=False)
    assert _stored_findings(d) == {("BEST_EFFORT", "replayed"): None}
    d = validate(c2, q, store=store, record=False)
    assert _stored_findings(d) == {
        ("BEST_EFFORT", "replayed"): None,
        ("TOKEN_COUNT", "both"): 3,
        ("LIVE_RESOLUTION", "replayed"): 3,
    }


def _stored_findings(d: Decision) -> dict[tuple[str, str], Any]:
    return {(f.code.name, f.side): f.position for f in d.findings}


def test_a_stored_recording_and_its_session_replay_accept(stored: Any) -> None:
    store, _c1, c2, p = stored
    d = validate(c2, p, store=store, record=False)
    assert d.verdict is Verdict.ACCEPT and d.evidence


def test_every_mutation_of_the_session_replay_against_the_stored_recording(
    stored: Any,
) -> None:
    """P, exported as a mapping, mutated field by field as above; R is the stored
    checkpoint (R's side of the reference table is the document of R's replay
    before mutation, with R's own ledger seal, tags and mode)."""
    store, _c1, c2, p = stored
    p0 = document_dict(p)
    r_doc = {**p0, "ledger_sealed": True, "provenance_tags": ["agent:v1"], "mode": None}
    seen = 0
    for m in mutations(p0):
        if m.side != "P":
            continue
        try:
            pm = m.apply(p0)
        except (IndexError, KeyError):
            continue
        if _same(pm, p0):
            continue
        try:
            d = validate(c2, pm, store=store, record=False)
        except (DocumentError, FormatVersionError) as exc:
            assert exc.where is not None, m.ident
            continue
        want = spec_findings(r_doc, pm)
        assert located(d) == want, m.ident
        if d.verdict is Verdict.ACCEPT:
            assert ("P", _field(m)) in KEPT, m.ident
        seen += 1
    assert seen > 100


@pytest.mark.parametrize(
    ("tamper", "expected"),
    [
        ({"payload": b"cfg-v2"}, {("OBSERVATION_MISMATCH", "both"): 2}),
        ({"pin": 12.0}, {("UNPINNED_OBSERVATION", "replayed"): 2}),
        ({"pin": None}, {("UNPINNED_OBSERVATION", "recorded"): 2}),
        ({"value": 1}, {("TOKEN_MISMATCH", "both"): 1}),
        ({"value": "1.5"}, {("TOKEN_MISMATCH", "both"): 1}),
        ({"kind": "tool"}, {("TOKEN_MISMATCH", "both"): 1}),
        ({"tool": "fetch"}, {("CALL_GRAPH_MISMATCH", "both"): 1}),
        ({"effect": b"row2"}, {("UNRECORDED_EFFECT", "replayed"): 0}),
        ({"transcript": b"hello!"}, {("TRANSCRIPT_MISMATCH", "both"): None}),
        (
            {"state": {"messages": ["hi", "there"], "memory": {"k": 3}}},
            {("STATE_MISMATCH", "both"): 2},
        ),
        ({"tags": ["replay:0123"]}, {("REPLAY_OF_REPLAY", "recorded"): 0}),
        ({"seal": False}, {("LEDGER_UNSEALED", "recorded"): None}),
        ({"run_id": "run-t"}, {("RUN_MISMATCH", "both"): None}),
        ({"step": 3}, {("STEP_MISMATCH", "both"): 2}),
        ({"reads": "duplicated"}, {("OBSERVATION_MISMATCH", "both"): 2}),
        ({"reads": "extra_first"}, {("OBSERVATION_MISMATCH", "both"): 2}),
        ({"tokens": "dropped"}, {("TOKEN_COUNT", "both"): 2}),
        ({"tokens": "extra"}, {("TOKEN_COUNT", "both"): 3}),
        ({"tokens": "swapped"}, {("TOKEN_MISMATCH", "both"): 1}),
        ({"provenance": "live"}, {("LIVE_RESOLUTION", "recorded"): 1}),
        ({"decisions": "extra"}, {("CALL_GRAPH_MISMATCH", "both"): 2}),
        # decision-table.md, Notes, Effects: P did a prefix of R's ledger.
        ({"effects": "extra"}, {}),
        # R's harness stream is not read (KEPT: the policy question in the report).
        ({"harness": True}, {}),
        ({"tags": []}, {}),
    ],
    ids=lambda v: repr(v)[:40],
)
def test_a_stored_recording_changed_in_one_thing(
    tmp_path: Path, tamper: Mapping[str, Any], expected: Mapping[tuple[str, str], Any]
) -> None:
    """R recorded with one thing changed, against the replay of the unchanged one."""
    with open_store(tmp_path / "clean") as clean:
        _c1, c2 = _record(clean)
        p = _replay(clean, c2)
    with open_store(tmp_path / "s") as store:
        _a1, a2 = _record(store, tamper)
        d = validate(a2, p, store=store, record=False)
    # P is the session replay of the clean store's c2, tagged replay:<c2>: against a2,
    # another checkpoint, that is a CHECKPOINT_MISMATCH (ident72) beside the tamper's own.
    assert a2 != c2
    assert _stored_findings(d) == {**expected, ("CHECKPOINT_MISMATCH", "replayed"): 0}


def test_state_parts_and_checkpoint_parents(stored: Any) -> None:
    store, c1, c2, p = stored
    # The parent checkpoint is not the one replayed: another step, state, log.
    d = validate(c1, p, store=store, record=False)
    assert d.verdict is Verdict.REJECT
    assert {"STEP_MISMATCH", "STATE_MISMATCH", "TOKEN_COUNT"} <= {f.code.name for f in d.findings}
    # One state part changed, dropped, added, or retyped: STATE_MISMATCH at R's step.
    for state in (
        {"messages": ["hi", "there"]},
        {**STATE2, "extra": 1},
        {"messages": ["hi", "there"], "memory": {"k": "2"}},
        {"messages": ["hi", "there!"], "memory": {"k": 2}},
        b"state",
    ):
        d = validate(c2, _replay(store, c2, state), store=store, record=False)
        assert _stored_findings(d) == {("STATE_MISMATCH", "both"): 2}, state
    # The parts' order is not identity (a map: docs/store.md, the state digest is
    # of the canonical {name: part digest} map).
    reordered = {"memory": {"k": 2}, "messages": ["hi", "there"]}
    d = validate(c2, _replay(store, c2, reordered), store=store, record=False)
    assert d.verdict is Verdict.ACCEPT


# -- the command line ----------------------------------------------------------------

EXIT = {"ACCEPT": 0, "REJECT": 10, "QUARANTINE": 11}
CLI_SAMPLE = [m for i, m in enumerate(MUTATIONS) if i % 23 == 0]


def _write(path: Path, doc: Mapping[str, Any]) -> Path:
    path.write_bytes(msgpack.packb(doc, use_bin_type=True))
    return path


@pytest.mark.parametrize("m", CLI_SAMPLE, ids=lambda m: m.ident)
def test_cli_exit_code_is_the_verdict(
    m: Mutation, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    r, p = apply(m, R0, P0)
    try:
        want: str | None = spec_verdict(spec_findings(r, p))
        parse_document(r)
        parse_document(p)
    except (CpstoreError, KeyError, TypeError, AttributeError):
        want = None  # refused: exit 3 (9 for an unknown format)
    code = cli_main(
        [
            "validate",
            str(_write(tmp_path / "r.mpk", r)),
            str(_write(tmp_path / "p.mpk", p)),
            "--json",
        ]
    )
    out, err = capsys.readouterr()
    if want is None:
        assert code in (3, 9) and err.count("\n") == 1 and "Traceback" not in err, m.ident
    else:
        assert code == EXIT[want], m.ident
        assert json.loads(out)["verdict"] == want


def test_cli_in_a_process(tmp_path: Path) -> None:
    """The installed entry point, once per verdict."""
    cases = {
        0: (R0, P0),
        10: (R0, Mutation("P", "tokens[2].value", "one", {"rows": [1, "b"]}).apply(P0)),
        11: (R0, Mutation("P", "mode", "none", DROP).apply(P0)),
    }
    for want, (r, p) in cases.items():
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "cpstore.cli",
                "validate",
                str(_write(tmp_path / "r.mpk", r)),
                str(_write(tmp_path / "p.mpk", p)),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        assert proc.returncode == want, proc.stderr


def test_cli_against_a_stored_recording(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``cpstore validate CID P --store S``: the session replay as a ``.cprun`` file, then
    mutated (a sample), each exit code the verdict the Python API gives."""
    path = tmp_path / "s"
    with open_store(path) as store:
        _c1, c2 = _record(store)
        with store.read(c2) as cp, (tmp_path / "p.cprun").open("wb") as fh:
            transcript = cp.manifest.transcript_digest
            _session(cp).write(fh, state_digest(STATE2), transcript_digest=transcript)
        p0 = document_dict(_replay(store, c2))
        sample = [m for i, m in enumerate(mutations(p0)) if m.side == "P" and i % 11 == 0]
        wanted = {}
        for m in sample:
            try:
                wanted[m.ident] = validate(c2, m.apply(p0), store=store, record=False).verdict.name
            except CpstoreError:
                wanted[m.ident] = "refused"
    cprun = str(tmp_path / "p.cprun")
    # Every way to name the recording names the same one (identity), or none.
    for ref, want in ((c2, 0), (c2[:8], 0), ("run-s@main", 0), ("run-s@main~1", 10)):
        assert cli_main(["validate", ref, cprun, "--store", str(path)]) == want, ref
    for ref, want in (("run-s@main~2", 4), ("run-s@other", 4), (c2[:7], 3)):
        assert cli_main(["validate", ref, cprun, "--store", str(path)]) == want, ref
    capsys.readouterr()
    assert set(wanted.values()) >= {"ACCEPT", "REJECT", "QUARANTINE", "refused"}
    for m in sample:
        doc = _write(tmp_path / "p.mpk", m.apply(p0))
        code = cli_main(["validate", c2, str(doc), "--store", str(path), "--json"])
        out, err = capsys.readouterr()
        if wanted[m.ident] == "refused":
            assert code in (3, 9) and "Traceback" not in err, m.ident
        else:
            assert code == EXIT[wanted[m.ident]], m.ident
            assert json.loads(out)["verdict"] == wanted[m.ident]


def test_two_kind_names_with_one_hashed_code() -> None:
    """Token kinds are names: a replayed kind renamed to another name with the same
    31-bit code is a TOKEN_MISMATCH in ``kind`` at that token (decision-table.md,
    Notes, Token kinds), on every input form."""
    a, b = colliding_kinds()
    r = recording()
    r["tokens"][3]["kind"] = a
    p = replay_of(r)
    p["tokens"][3]["kind"] = b
    for rf, pf in ((r, p), *zip(_forms(r), _forms(p), strict=True)):
        d = validate(rf, pf)
        assert located(d) == {("TOKEN_MISMATCH", "both"): (3, "seq")} == spec_findings(r, p)
        assert "differs in kind" in d.findings[0].message


# -- policy questions (behaviour pinned as documented; see the audit57 report) -------


def test_policy_a_recording_carrying_harness_accesses_is_accepted() -> None:
    """POLICY QUESTION. HARNESS_PERTURBATION is "P's harness-access stream is not
    empty"; R's is not read. Seed 004 says a replay whose harness accesses "appear in
    the state delta stream" is DIVERGENT-PERTURBED and that the recording must not
    contain a prior replay; a recording made under a replay harness (the recorder's
    ``harness_access`` is documented as "an access the replay harness itself made")
    carries such accesses, and its faithful replay is today an ACCEPT (also stored:
    ``test_a_stored_recording_changed_in_one_thing``, ``{'harness': True}``)."""
    r = recording()
    r["harness_accesses"] = [{"resource": "cache", "n": 1}]
    d = validate(r, P0)  # P's harness made no access
    assert d.verdict is Verdict.ACCEPT and d.fidelity.name == "FAITHFUL"


def test_policy_a_recording_declaring_a_strict_replay_mode_is_accepted() -> None:
    """POLICY QUESTION. ``mode`` is "P: how the replay resolved tokens"; a recording
    that declares ``strict`` says it is a strict replay, handed over as the recording.
    The docs chose (decision-table.md, Mode): "R declaring `strict` (or nothing) adds
    no finding" -- only ``best_effort`` is a finding (audit51), and replay-of-replay is
    found from ``replay:`` tags only, so a replay whose tag was dropped passes as a
    recording."""
    r = recording()
    assert r["mode"] == "strict" and r["provenance_tags"] == ["agent:v1"]
    assert validate(r, replay_of(r)).verdict is Verdict.ACCEPT


def test_replay_lineage_is_inherited_by_what_is_recorded_after_it(tmp_path: Path) -> None:
    """A checkpoint tagged ``replay:`` passes the tag on: to the next checkpoint of the
    recorder, to a branch forked from it, and to a later recorder on its branch; each,
    replayed faithfully, is a REPLAY_OF_REPLAY (seed 004's recursion guard)."""
    with open_store(tmp_path / "s") as store:
        with store.recorder("run-l") as rec:
            rec.token("rng", 1)
            c1 = rec.checkpoint(1, {"a": 1}, tags=["replay:0123"])
            rec.token("rng", 2)
            c2 = rec.checkpoint(2, {"a": 2})
        with store.recorder("run-l", branch="fork", parent=c1) as rec:
            rec.token("rng", 3)
            c3 = rec.checkpoint(3, {"a": 3})
        with store.recorder("run-l") as rec:
            rec.token("rng", 4)
            c4 = rec.checkpoint(4, {"a": 4})
        for cid, state in ((c1, {"a": 1}), (c2, {"a": 2}), (c3, {"a": 3}), (c4, {"a": 4})):
            d = validate(cid, _replay(store, cid, state), store=store, record=False)
            assert _stored_findings(d) == {("REPLAY_OF_REPLAY", "recorded"): 0}, cid
