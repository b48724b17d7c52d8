"""Each seed's incident, end to end through the store, the validator and the gates."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from stored import edit_raw, flip_byte

from cpstore.decision.gates import certify_rollback, resume_gate, sign_off
from cpstore.decision.table import Fidelity, FindingCode, Verdict
from cpstore.decision.validate import validate
from cpstore.errors import GateError, LedgerGuardError, ReplayDivergenceError
from cpstore.native.binding import digest
from cpstore.replay.session import ReplaySession
from cpstore.run.model import Effect, Observation, PackedTokens, ReplayMode, Run, Token
from cpstore.store.facade import open as open_store

if TYPE_CHECKING:
    from cpstore import CheckpointView, Store

CONFIG_V1 = b'{"region": "eu", "limit": 10}'
CONFIG_V2 = b'{"region": "eu", "limit": 20}'  # mutated in the backing store after the run


def hexd(data: bytes) -> str:
    return digest(data).hex()


# -- seed 000: stale config at step 12 of a step-47 checkpoint ---------------


def record_seed_000(store: Store) -> str:
    rec = store.recorder("agent-000")
    for step in range(1, 48):
        if step == 12:
            rec.observe(12, "read_config", CONFIG_V1, pinned_at=1_700_000_012.0)
            rec.decision(12, {"node": "read_config"})
        if step % 5 == 0:
            rec.observe(step, "clock", str(step).encode(), pinned_at=1_700_000_000.0 + step)
            rec.token("clock", 1_700_000_000.0 + step)
            rec.decision(step, {"node": "tool", "name": f"search-{step}"})
    rec.effect("crm", b"update-1")
    rec.transcript(b"final answer")
    return rec.checkpoint(47, {"memory": "same", "plan": [1, 2, 3]})


def replay_seed_000(cp: CheckpointView, *, refetch_config: bytes | None) -> Run:
    """The recovery replay; ``refetch_config`` re-issues read_config live (the bug)."""
    s = ReplaySession(cp)
    for step in range(1, 48):
        if step == 12:
            if refetch_config is None:
                s.observations.read(12, "read_config")
            s.decision(12, "read_config")
        if step % 5 == 0:
            s.observations.read(step, "clock")
            s.cursor.resolve("clock")
            s.decision(step, "tool", name=f"search-{step}")
    s.guard.check("crm", b"update-1")
    s.cursor.assert_fully_consumed()
    run = s.finish(cp.manifest.state_digest, transcript_digest=cp.manifest.transcript_digest)
    if refetch_config is None:
        return run
    obs = list(run.observations)
    obs.insert(2, Observation(12, "read_config", hexd(refetch_config), None))
    return Run(
        run.run_id,
        run.step,
        run.state_digest,
        tokens=run.tokens,
        observations=tuple(obs),
        call_graph=run.call_graph,
        transcript_digest=run.transcript_digest,
        effects=run.effects,
        mode=run.mode,
    )


def test_seed_000_faithful_recovery_accepts_and_resumes(tmp_path: Path) -> None:
    """Replaying with every read pinned from the store: ACCEPT, and the resume gate opens."""
    with open_store(tmp_path / "s") as store:
        cid = record_seed_000(store)
        with store.read(cid) as cp:
            p = replay_seed_000(cp, refetch_config=None)
        d = validate(cid, p, store=store)
        assert d.verdict is Verdict.ACCEPT and d.fidelity is Fidelity.FAITHFUL
        assert resume_gate(store, cid, d).verdict is Verdict.ACCEPT


def test_seed_000_stale_config_under_equal_state_is_rejected_and_gated(tmp_path: Path) -> None:
    """Re-fetched newer config at step 12, identical state hash: REJECT, sign-off needed."""
    with open_store(tmp_path / "s") as store:
        cid = record_seed_000(store)
        with store.read(cid) as cp:
            p = replay_seed_000(cp, refetch_config=CONFIG_V2)
            state = cp.manifest.state_digest
        assert p.state_digest == state  # the masking: state is insensitive to the config
        d = validate(cid, p, store=store)
        assert d.verdict is Verdict.REJECT
        assert FindingCode.STATE_MISMATCH not in d.codes
        f = d.divergences["observations"]
        assert f.code is FindingCode.OBSERVATION_MISMATCH and f.position == 12
        assert f.expected == [12, "read_config", hexd(CONFIG_V1)]
        assert f.observed == [12, "read_config", hexd(CONFIG_V2)]
        assert FindingCode.UNPINNED_OBSERVATION in d.codes
        # The divergence is on the record, not discarded: the auditor can tell the runs apart.
        (audit,) = [r for r in store.audit_records(kind="decision")]
        assert audit.body["decision_id"] == d.id and audit.body["verdict"] == "REJECT"
        with pytest.raises(GateError, match="sign-off"):
            resume_gate(store, cid, d)
        so = sign_off(store, d, operator="oncall@example", reason="config v2 reviewed")
        permit = resume_gate(store, cid, d, sign_off=so)
        assert permit.sign_off == so.audit_digest


def test_seed_000_identical_refetch_is_still_not_accepted(tmp_path: Path) -> None:
    """Re-fetched but identical payload: equivalence unprovable, so QUARANTINE."""
    with open_store(tmp_path / "s") as store:
        cid = record_seed_000(store)
        with store.read(cid) as cp:
            p = replay_seed_000(cp, refetch_config=CONFIG_V1)
        d = validate(cid, p, store=store)
        assert d.codes == {FindingCode.UNPINNED_OBSERVATION}
        assert d.verdict is Verdict.QUARANTINE


# -- seed 002: evicted cache, re-seeded RNG, orphaned write -------------------


def record_seed_002(store: Store) -> str:
    base = store.recorder("agent-002").checkpoint(0, {"plan": "start"})
    rec = store.recorder("agent-002", branch="speculative", parent=base)
    rec.observe(1, "tool:cache", b"cached-response", pinned_at=1_700_000_100.0)
    rec.token("tool", "cached-response")
    rec.token("rng", 3)  # tie-break for the retry backoff
    rec.decision(1, {"node": "retry", "backoff": 3})
    rec.effect("downstream", b"claimed-write")
    rec.transcript(b"answer 42")
    return rec.checkpoint(2, {"answer": 42})


def test_seed_002_strict_replay_stops_at_the_exact_token_and_effect(tmp_path: Path) -> None:
    """STRICT: re-seeding from the clock raises at seq 1; the live write never escapes."""
    with open_store(tmp_path / "s") as store:
        cid = record_seed_002(store)
        with store.read(cid) as cp:
            s = ReplaySession(cp)
            assert s.cursor.resolve("tool") == "cached-response"  # the log is the cache
            with pytest.raises(ReplayDivergenceError) as info:
                s.cursor.resolve(
                    "clock", live=lambda: 1_700_009_999.0
                )  # RNG re-seed from wall clock
            assert (info.value.where, info.value.expected, info.value.got) == (
                "seq=1",
                "rng",
                "clock",
            )
            escaped = []
            with pytest.raises(LedgerGuardError) as guard:
                s.guard.perform("downstream", b"live-tool-call", lambda: escaped.append(1))
            assert escaped == [] and guard.value.where == "effect seq=0"


def test_seed_002_best_effort_match_is_quarantined_and_never_rolled_back(tmp_path: Path) -> None:
    """Same answer via live tool call and clock-seeded RNG: QUARANTINE; rollback refused forever."""
    with open_store(tmp_path / "s") as store:
        cid = record_seed_002(store)
        with store.read(cid) as cp:
            m = cp.manifest
            ledger = [Effect(*e) for e in cp.effects()]
            obs = tuple(Observation(*o) for o in cp.observations())
            graph = tuple(cp.call_graph())
        live_tokens = PackedTokens.from_tokens(
            [Token(0, "tool", "cached-response", "live"), Token(1, "rng", 3, "live")]
        )
        p = Run(
            m.run_id,
            m.step,
            m.state_digest,
            tokens=live_tokens,
            observations=obs,
            call_graph=graph,
            transcript_digest=m.transcript_digest,
            effects=(*ledger, Effect(1, "downstream", hexd(b"live-tool-call"))),
            mode=ReplayMode.BEST_EFFORT,
        )
        d = validate(cid, p, store=store)
        assert d.verdict is Verdict.QUARANTINE
        assert d.codes == {
            FindingCode.LIVE_RESOLUTION,
            FindingCode.BEST_EFFORT,
            FindingCode.UNRECORDED_EFFECT,
        }
        assert d.divergences["tokens"].position == 0 and d.divergences["tokens"].count == 2
        assert not d.evidence
        with pytest.raises(GateError, match="STRICT"):
            certify_rollback(store, cid, d)
        # A later strict replay of the same branch is faithful...
        with store.read(cid) as cp:
            s = ReplaySession(cp)
            s.observations.read(1, "tool:cache")
            s.cursor.resolve("tool")
            s.cursor.resolve("rng")
            s.decision(1, "retry", backoff=3)
            s.guard.check("downstream", b"claimed-write")
            good = s.finish(cp.manifest.state_digest, transcript_digest=m.transcript_digest)
        ok = validate(cid, good, store=store)
        assert ok.verdict is Verdict.ACCEPT
        # ...but a quarantined branch is never rolled back.
        with pytest.raises(GateError, match="quarantined"):
            certify_rollback(store, cid, ok)


# -- seed 004: harness counter and idempotent branch --------------------------


def record_seed_004(store: Store) -> str:
    rec = store.recorder("session-004")
    rec.observe(1, "cache_dir", b"listing", pinned_at=10.0)
    rec.observe(2, "rate_limiter", b"count=7", pinned_at=11.0)
    rec.decision(1, {"node": "plan"})
    rec.decision(2, {"node": "tool", "name": "fetch_a"})
    rec.decision(3, {"node": "answer"})
    rec.transcript(b"the answer is 42")
    return rec.checkpoint(3, {"scratch": "x"})


def record_replay_004(
    store: Store, cid: str, *, tool: str, transcript: bytes, harness: bool
) -> str:
    """The replay harness records its own run as a checkpoint tagged replay:<cid>.

    A fresh branch of the same run, not a fork: a forked recorder would inherit
    the recording's logs. A replay of another run is RUN_MISMATCH.
    """
    rec = store.recorder("session-004", branch=f"replay-{tool}-{harness}")
    rec.observe(1, "cache_dir", b"listing", pinned_at=10.0)
    rec.observe(
        2,
        "rate_limiter",
        b"count=8" if harness else b"count=7",
        pinned_at=None if harness else 11.0,
    )
    if harness:
        rec.harness_access("rate_limiter", {"op": "incr"})
    rec.decision(1, {"node": "plan"})
    rec.decision(2, {"node": "tool", "name": tool})
    rec.decision(3, {"node": "answer"})
    rec.transcript(transcript)
    return rec.checkpoint(3, {"scratch": "x"}, tags=[f"replay:{cid}"])


def test_seed_004_idempotent_branch_with_harness_counter_is_perturbed(tmp_path: Path) -> None:
    """Equal transcript, different tool, harness bumped a counter: REJECT, DIVERGENT_PERTURBED."""
    with open_store(tmp_path / "s") as store:
        cid = record_seed_004(store)
        pid = record_replay_004(
            store, cid, tool="fetch_b", transcript=b"the answer is 42", harness=True
        )
        d = validate(cid, pid, store=store)
        assert d.verdict is Verdict.REJECT
        assert d.fidelity is Fidelity.DIVERGENT_PERTURBED
        assert {
            FindingCode.CALL_GRAPH_MISMATCH,
            FindingCode.HARNESS_PERTURBATION,
            FindingCode.OBSERVATION_MISMATCH,
        } <= d.codes
        assert FindingCode.TRANSCRIPT_MISMATCH not in d.codes
        assert d.divergences["call_graph"].position == 1
        assert d.standing == "hypothesis" and d.replayed.checkpoint_id == pid


def test_seed_004_transcript_and_graph_differ_is_causal_with_recording_gap(tmp_path: Path) -> None:
    """Both differ: DIVERGENT_CAUSAL, the gap report names step 2 and the unpinned source."""
    with open_store(tmp_path / "s") as store:
        cid = record_seed_004(store)
        pid = record_replay_004(
            store, cid, tool="fetch_b", transcript=b"the answer is 41", harness=True
        )
        d = validate(cid, pid, store=store)
        assert d.fidelity is Fidelity.DIVERGENT_CAUSAL
        (gap,) = d.recording_gaps
        assert gap.step == 2 and gap.unpinned_sources == ("rate_limiter",)


def test_seed_004_replay_of_replay_is_rejected(tmp_path: Path) -> None:
    """A recording that is itself a replay (tag replay:...) can never be evidence."""
    with open_store(tmp_path / "s") as store:
        cid = record_seed_004(store)
        pid = record_replay_004(
            store, cid, tool="fetch_a", transcript=b"the answer is 42", harness=False
        )
        # A stored checkpoint declares no replay mode: equal in every stream
        # but that one.
        faithful = validate(cid, pid, store=store)
        assert faithful.codes == {FindingCode.BEST_EFFORT}, faithful.findings
        again = validate(pid, pid, store=store)
        assert again.codes == {FindingCode.REPLAY_OF_REPLAY, FindingCode.BEST_EFFORT}
        assert again.verdict is Verdict.REJECT and not again.releasable


# -- INTEGRITY through the store ---------------------------------------------


def test_damaged_recording_is_an_integrity_reject_not_an_exception(tmp_path: Path) -> None:
    """A flipped byte in R's token log gives REJECT (INTEGRITY) and is recorded."""
    path = tmp_path / "s"
    with open_store(path) as store:
        cid = record_seed_002(store)
        with store.read(cid) as cp:
            tokens_digest = cp.manifest.tokens_digest
            assert tokens_digest is not None  # the recording has a token log
            key = bytes.fromhex(tokens_digest)
            p = Run(cp.manifest.run_id, 2, cp.manifest.state_digest, mode=ReplayMode.STRICT)
    edit_raw(path, "objects", key, flip_byte(20))
    with open_store(path) as store:
        d = validate(cid, p, store=store)
        assert d.codes == {FindingCode.INTEGRITY}
        assert d.verdict is Verdict.REJECT and not d.releasable
        assert d.recorded.checkpoint_id == cid
        assert any(r.body["decision_id"] == d.id for r in store.audit_records(kind="decision"))


def test_missing_checkpoint_is_an_integrity_reject(tmp_path: Path) -> None:
    """A checkpoint id the store does not hold ends in INTEGRITY, never an exception."""
    with open_store(tmp_path / "s") as store:
        d = validate("ab" * 16, Run("r", 1, "s", mode=ReplayMode.STRICT), store=store)
        assert d.codes == {FindingCode.INTEGRITY} and d.verdict is Verdict.REJECT


def test_a_damaged_object_named_only_by_digest_is_an_integrity_reject(tmp_path: Path) -> None:
    """A flipped byte in an object R names only by digest (a state part) is INTEGRITY, located."""
    path = tmp_path / "s"
    with open_store(path) as store:
        rec = store.recorder("r")
        rec.observe(1, "cfg", b"payload", pinned_at=1.0)
        cid = rec.checkpoint(1, {"a": "x" * 40, "b": "y" * 40})
        key = bytes.fromhex(store.manifest(cid).state_parts["b"])
        assert validate(cid, cid, store=store, record=False).codes == {FindingCode.BEST_EFFORT}
    edit_raw(path, "objects", key, lambda old: old[:5] + bytes([old[5] ^ 0x01]) + old[6:])
    with open_store(path) as store:
        d = validate(cid, cid, store=store, record=False)
        assert d.verdict is Verdict.REJECT and FindingCode.INTEGRITY in d.codes
        f = next(f for f in d.findings if f.code is FindingCode.INTEGRITY)
        assert (f.stream, f.side, f.position, f.unit) == ("state", "recorded", 1, "index")
        assert f.expected == key.hex() and f.observed != key.hex() and key.hex() in f.message
        skipped = validate(cid, cid, store=store, record=False, verify=False)
        assert FindingCode.INTEGRITY not in skipped.codes  # verify=False: the explicit opt-out
