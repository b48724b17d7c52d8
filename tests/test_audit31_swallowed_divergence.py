"""audit31: a divergence the replay's retry loop swallows still reaches the decision.

Seed 002: a divergence at token resolution must be a hard error, "never a warning,
because a warning will be swallowed by the retry loop that wraps most agent
replays". The cursor raised, but left no trace in the replay it builds: a loop
that caught the error and asked again (the kind the recording has, or nothing
more) produced a P equal to R, and the decision was ACCEPT for a replay that
asked for a clock where an rng was recorded, or for one token more than the log
holds. The ledger guard already keeps a refused effect in ``attempted``; the
cursor now keeps a refused resolution in ``replayed()`` the same way, and the
pinned-observation reader a refused read.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cpstore.decision.table import Decision, FindingCode, Verdict
from cpstore.decision.validate import validate
from cpstore.errors import InvalidInputError, RecordingGapError, ReplayDivergenceError
from cpstore.replay.cursor import ReplayCursor
from cpstore.replay.session import ReplaySession
from cpstore.run.model import PackedTokens, ReplayMode, Run, Token
from cpstore.store.facade import open as open_store


def _recorded(n: int = 3) -> PackedTokens:
    return PackedTokens.from_tokens(Token(i, ("rng", "clock")[i % 2], i * 10) for i in range(n))


def _decide(rec: PackedTokens, cursor: ReplayCursor) -> Decision:
    r = Run("r", 1, "s", tokens=rec, ledger_sealed=True)
    p = Run("r", 1, "s", tokens=cursor.replayed(), mode=cursor.mode)
    return validate(r, p)


def _retrying(cursor: ReplayCursor, *kinds: str) -> None:
    """resolve() the first kind that does not raise: a retry loop that swallows errors."""
    for kind in kinds:
        try:
            cursor.resolve(kind)
            return
        except ReplayDivergenceError:
            continue


def test_a_swallowed_kind_mismatch_is_a_token_mismatch() -> None:
    rec = _recorded()
    c = ReplayCursor(rec)
    _retrying(c, "clock", "rng")  # asked for a clock first: the recording has an rng
    _retrying(c, "clock")
    _retrying(c, "rng")
    c.assert_fully_consumed()  # every recorded token was resolved
    d = _decide(rec, c)
    assert d.verdict is Verdict.REJECT  # was ACCEPT
    first = d.divergences["tokens"]
    assert (first.code, first.position) == (FindingCode.TOKEN_MISMATCH, 0)
    assert "clock" in first.message


def test_a_swallowed_resolution_past_the_log_is_a_token_count() -> None:
    rec = _recorded(2)
    c = ReplayCursor(rec)
    c.resolve("rng")
    c.resolve("clock")
    with pytest.raises(ReplayDivergenceError, match="exhausted"):
        c.resolve("rng")  # the replay wanted one token more than the recording holds
    d = _decide(rec, c)
    assert d.verdict is Verdict.REJECT  # was ACCEPT
    assert FindingCode.TOKEN_COUNT in d.codes


def test_a_refusal_leaves_position_and_remaining_as_they_were() -> None:
    c = ReplayCursor(_recorded())
    with pytest.raises(ReplayDivergenceError):
        c.resolve("env")
    assert (c.position, c.remaining) == (0, 3)
    assert c.resolve("rng") == 0


def test_a_clean_strict_replay_still_accepts() -> None:
    rec = _recorded()
    c = ReplayCursor(rec)
    for kind in ("rng", "clock", "rng"):
        c.resolve(kind)
    assert bytes(c.replayed().view()) == bytes(rec.view())
    assert _decide(rec, c).verdict is Verdict.ACCEPT


def test_best_effort_without_a_live_source_keeps_its_refusal_too() -> None:
    rec = _recorded(1)
    c = ReplayCursor(rec, mode=ReplayMode.BEST_EFFORT)
    c.resolve("rng")
    with pytest.raises(ReplayDivergenceError, match="no live source"):
        c.resolve("rng")
    assert FindingCode.TOKEN_COUNT in _decide(rec, c).codes


def test_a_swallowed_recording_gap_is_an_observation_mismatch(tmp_path: Path) -> None:
    with open_store(tmp_path / "s") as store:
        rec = store.recorder("r")
        rec.observe(1, "cfg", b"v1", pinned_at=1.0)
        rec.token("rng", 1)
        cid = rec.checkpoint(1, b"state")
        rec.close()
        with store.read(cid) as cp:
            state = cp.manifest.state_digest
            session = ReplaySession(cp)
            assert session.observations.read(1, "cfg") == b"v1"
            with pytest.raises(RecordingGapError):
                session.observations.read(1, "clock")  # not recorded: swallowed below
            session.cursor.resolve("rng")
            p = session.finish(state)
        d = validate(cid, p, store=store, record=False)
        assert d.verdict is Verdict.REJECT  # was ACCEPT
        first = d.divergences["observations"]
        assert (first.code, first.position) == (FindingCode.OBSERVATION_MISMATCH, 1)
        assert FindingCode.UNPINNED_OBSERVATION in d.codes


def test_a_refused_read_then_made_live_is_one_unpinned_read(tmp_path: Path) -> None:
    # The documented flow: the pinned reader refuses, the replay fetches live and
    # says so (observe_live). That is one read, unpinned: QUARANTINE, as before.
    with open_store(tmp_path / "s") as store:
        rec = store.recorder("r")
        rec.observe(1, "cfg", b"v1", pinned_at=None)  # recorded unpinned: never served
        rec.token("rng", 1)
        cid = rec.checkpoint(1, b"state")
        rec.close()
        with store.read(cid) as cp:
            state = cp.manifest.state_digest
            session = ReplaySession(cp)
            with pytest.raises(RecordingGapError, match="not pinned"):
                session.observations.read(1, "cfg")
            session.observe_live(1, "cfg", b"v1")
            session.cursor.resolve("rng")
            p = session.finish(state)
        assert len(p.observations) == 1
        d = validate(cid, p, store=store, record=False)
        assert d.verdict is Verdict.QUARANTINE
        assert FindingCode.OBSERVATION_MISMATCH not in d.codes


def test_a_read_of_a_malformed_step_is_bad_input_not_a_kept_refusal(tmp_path: Path) -> None:
    with open_store(tmp_path / "s") as store:
        rec = store.recorder("r")
        rec.token("rng", 1)
        cid = rec.checkpoint(1, b"state")
        rec.close()
        with store.read(cid) as cp:
            session = ReplaySession(cp)
            for step, source in (("1", "cfg"), (-1, "cfg"), (True, "cfg"), (1, "")):
                with pytest.raises(InvalidInputError):
                    session.observations.read(step, source)  # type: ignore[arg-type]
            session.cursor.resolve("rng")
            assert session.finish(cp.manifest.state_digest).observations == ()
