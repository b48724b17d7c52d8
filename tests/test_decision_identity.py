"""What a replay is of: its run, step, mode and token kinds are compared, not assumed."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_decision_support import clean_doc, colliding_kinds, replay_of

from cpstore.decision.gates import certify_rollback
from cpstore.decision.table import FindingCode, Verdict
from cpstore.decision.validate import validate
from cpstore.errors import GateError, InvalidInputError
from cpstore.native.records import kind_code
from cpstore.run.model import PackedTokens, ReplayMode, Run, Token
from cpstore.store.facade import open as open_store

if TYPE_CHECKING:
    from cpstore import Decision, Store


def test_a_replay_of_another_run_is_a_non_releasable_reject() -> None:
    """P naming another run_id (all else equal): REJECT with RUN_MISMATCH, no sign-off."""
    r = clean_doc()
    d = validate(r, replay_of(r, run_id="someone-else"))
    assert d.verdict is Verdict.REJECT and d.codes == {FindingCode.RUN_MISMATCH}
    assert not d.releasable
    f = d.divergences["identity"]
    assert (f.expected, f.observed) == ("run-1", "someone-else")


def test_a_replay_that_reached_another_step_is_a_non_releasable_reject() -> None:
    """P at step 999 against R at step 47: REJECT with STEP_MISMATCH."""
    r = clean_doc()
    d = validate(r, replay_of(r, step=999))
    assert d.verdict is Verdict.REJECT and d.codes == {FindingCode.STEP_MISMATCH}
    assert not d.releasable and d.divergences["identity"].position == 999


def test_a_replay_of_another_run_and_step_lists_both() -> None:
    """The issue's repro: another run_id and step 999 give both identity findings."""
    r = clean_doc()
    d = validate(r, replay_of(r, run_id="other", step=999))
    assert d.codes == {FindingCode.RUN_MISMATCH, FindingCode.STEP_MISMATCH}


def test_a_replay_recorded_on_another_branch_of_the_run_is_compared_normally(
    tmp_path: Path,
) -> None:
    """The branch may differ (a replay branch or a fork): no identity finding for it."""
    with open_store(tmp_path / "s") as store:
        rec = store.recorder("run")
        rec.token("rng", 1)
        cid = rec.checkpoint(3, b"s")
        rec = store.recorder("run", branch="replay-1")
        rec.token("rng", 1)
        pid = rec.checkpoint(3, b"s")
        d = validate(cid, pid, store=store)
        assert FindingCode.RUN_MISMATCH not in d.codes
        assert FindingCode.STEP_MISMATCH not in d.codes


def _self_validated(store: Store, metadata: dict[str, Any]) -> tuple[str, Decision]:
    rec = store.recorder("run")
    rec.observe(1, "clock", b"t", pinned_at=1.0)
    rec.token("rng", 1)
    cid = rec.checkpoint(1, {"a": 1}, metadata=metadata)
    return cid, validate(cid, cid, store=store)


def test_user_metadata_never_declares_a_replay_strict(tmp_path: Path) -> None:
    """A checkpoint whose metadata says replay_mode=strict, validated against itself: QUARANTINE."""
    with open_store(tmp_path / "s") as store:
        cid, d = _self_validated(store, {"replay_mode": "strict"})
        assert d.mode is None
        assert d.verdict is Verdict.QUARANTINE and d.codes == {FindingCode.BEST_EFFORT}
        with pytest.raises(GateError, match="STRICT"):
            certify_rollback(store, cid, d)


@settings(max_examples=15, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["replay_mode", "mode", "tags", "fidelity", "provenance", "verdict"]),
        st.sampled_from(["strict", "STRICT", "FAITHFUL", "ACCEPT", ["replay:x"]]),
    )
)
def test_no_metadata_changes_the_decision_about_a_stored_replay(
    tmp_path_factory: pytest.TempPathFactory, metadata: dict[str, Any]
) -> None:
    """Whatever the user metadata holds, a stored P's mode, tags and verdict stay the same."""
    with open_store(tmp_path_factory.mktemp("m") / "s") as store:
        _, d = _self_validated(store, metadata)
    assert d.mode is None and d.codes == {FindingCode.BEST_EFFORT}
    assert d.verdict is Verdict.QUARANTINE and d.fidelity.value == "UNVERIFIED"


def test_colliding_kind_codes_are_still_different_kinds() -> None:
    """Two custom kinds with one 31-bit code, same values: REJECT TOKEN_MISMATCH in kind."""
    a, b = colliding_kinds()
    assert kind_code(a) == kind_code(b)
    r = clean_doc(tokens=0)
    r["tokens"] = [{"seq": 0, "kind": a, "value": 7, "provenance": "recorded"}]
    p = replay_of(r)
    p["tokens"][0]["kind"] = b
    d = validate(r, p)
    assert d.verdict is Verdict.REJECT and d.codes == {FindingCode.TOKEN_MISMATCH}
    f = d.divergences["tokens"]
    assert (f.expected["kind"], f.observed["kind"]) == (a, b)
    assert "kind" in f.message


def test_colliding_kind_codes_against_a_stored_recording_are_different_kinds(
    tmp_path: Path,
) -> None:
    """R in the store (kinds table) vs P naming the other colliding kind: TOKEN_MISMATCH."""
    a, b = colliding_kinds()
    with open_store(tmp_path / "s") as store:
        rec = store.recorder("run")
        rec.token("rng", 1)
        rec.token(a, 2)
        cid = rec.checkpoint(1, b"s")
        with store.read(cid) as cp:
            state = cp.manifest.state_digest
        p = Run(
            "run",
            1,
            state,
            tokens=PackedTokens.from_tokens([Token(0, "rng", 1), Token(1, b, 2)]),
            mode=ReplayMode.STRICT,
        )
        d = validate(cid, p, store=store)
        assert d.codes == {FindingCode.TOKEN_MISMATCH}
        assert d.divergences["tokens"].position == 1


def test_a_replayed_hashed_kind_without_a_name_is_not_the_recorded_kind(tmp_path: Path) -> None:
    """P handing over packed records with no kind_names: its hashed kinds match nothing."""
    a, _ = colliding_kinds()
    with open_store(tmp_path / "s") as store:
        rec = store.recorder("run")
        rec.token(a, 2)
        cid = rec.checkpoint(1, b"s")
        with store.read(cid) as cp:
            state, raw = cp.manifest.state_digest, bytes(cp.tokens())
        p = Run("run", 1, state, tokens=PackedTokens(raw), mode=ReplayMode.STRICT)
        assert validate(cid, p, store=store).codes == {FindingCode.TOKEN_MISMATCH}
        named = PackedTokens(raw, kind_names={kind_code(a): a})
        ok = validate(cid, Run("run", 1, state, tokens=named, mode=ReplayMode.STRICT), store=store)
        assert ok.verdict is Verdict.ACCEPT, ok.findings


def test_a_recording_with_an_unnamed_hashed_kind_is_bad_input() -> None:
    """An in-memory R whose packed records use a hashed code it does not name is refused."""
    raw = PackedTokens.from_tokens([Token(0, "custom", 1)]).records
    r = Run("run", 1, "s", tokens=PackedTokens(raw))
    with pytest.raises(InvalidInputError, match="no name"):
        validate(r, r)


def test_a_recorder_refuses_two_kind_names_with_one_code(tmp_path: Path) -> None:
    """Within one log, a second name with a taken code is refused, not merged."""
    a, b = colliding_kinds()
    with open_store(tmp_path / "s") as store:
        rec = store.recorder("run")
        rec.token(a, 1)
        with pytest.raises(ValueError, match="same code"):
            rec.token(b, 1)
