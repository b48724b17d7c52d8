"""audit33: a retry loop that asks the pinned reader again, then reads live, is one read.

audit31 keeps a refused read in P (seed 002: a swallowed refusal must not yield a P
equal to R) and lets an ``observe_live`` of the same step and source right after it
take its place: one live read, QUARANTINE. A retry loop — seed 002's own picture of
most replays — asks the reader more than once before it gives up and reads live; each
retry was kept as another refused read, so the same single live read became two or
more observations, an OBSERVATION_MISMATCH, and a REJECT where it was a QUARANTINE
before audit31. A refusal repeated with nothing between is the same request: it is
kept once, and still never lets P equal R.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cpstore.decision.table import Decision, FindingCode, Verdict
from cpstore.decision.validate import validate
from cpstore.errors import RecordingGapError
from cpstore.replay.session import ReplaySession
from cpstore.store.facade import open as open_store


def _replay(tmp_path: Path, *, recorded: bool, retries: int, live: bool) -> tuple[Decision, int]:
    with open_store(tmp_path / "s") as store:
        rec = store.recorder("r")
        if recorded:
            rec.observe(1, "cfg", b"v1", pinned_at=None)  # recorded unpinned: never served
        rec.observe(2, "db", b"row", pinned_at=2.0)
        rec.token("rng", 1)
        cid = rec.checkpoint(2, b"state")
        rec.close()
        with store.read(cid) as cp:
            state = cp.manifest.state_digest
            session = ReplaySession(cp)
            for _ in range(retries):  # the retry loop: ask again, swallow the refusal
                with pytest.raises(RecordingGapError):
                    session.observations.read(1, "cfg")
            if live:
                session.observe_live(1, "cfg", b"v1")
            assert session.observations.read(2, "db") == b"row"
            session.cursor.resolve("rng")
            p = session.finish(state)
        return validate(cid, p, store=store, record=False), len(p.observations)


@pytest.mark.parametrize("retries", [1, 2, 5])
def test_retries_then_a_live_read_are_one_unpinned_read(tmp_path: Path, retries: int) -> None:
    d, count = _replay(tmp_path, recorded=True, retries=retries, live=True)
    assert count == 2  # the live read and the pinned one: no trace of the retries
    assert d.verdict is Verdict.QUARANTINE  # was REJECT for retries >= 2
    assert FindingCode.OBSERVATION_MISMATCH not in d.codes
    assert FindingCode.UNPINNED_OBSERVATION in d.codes


@pytest.mark.parametrize("retries", [1, 3])
def test_retries_that_never_read_live_still_differ_from_the_recording(
    tmp_path: Path, retries: int
) -> None:
    d, count = _replay(tmp_path, recorded=True, retries=retries, live=False)
    assert count == 2  # one refused read kept (not one per retry), and the pinned one
    assert d.verdict is Verdict.REJECT  # never P == R
    first = d.divergences["observations"]
    assert (first.code, first.position) == (FindingCode.OBSERVATION_MISMATCH, 1)  # step 1


@pytest.mark.parametrize("retries", [1, 4])
def test_retries_of_an_unrecorded_read_then_live_are_one_extra_read(
    tmp_path: Path, retries: int
) -> None:
    d, count = _replay(tmp_path, recorded=False, retries=retries, live=True)
    assert count == 2  # the read R never made, once, and the pinned one
    assert d.verdict is Verdict.REJECT  # a read the recording does not hold
    assert FindingCode.OBSERVATION_MISMATCH in d.codes


def test_a_refusal_after_another_read_is_kept_again(tmp_path: Path) -> None:
    # Only a refusal repeated with nothing between is the same request.
    with open_store(tmp_path / "s") as store:
        rec = store.recorder("r")
        rec.observe(2, "db", b"row", pinned_at=2.0)
        cid = rec.checkpoint(2, b"state")
        rec.close()
        with store.read(cid) as cp:
            obs = ReplaySession(cp).observations
            with pytest.raises(RecordingGapError):
                obs.read(1, "cfg")
            with pytest.raises(RecordingGapError):
                obs.read(1, "other")
            with pytest.raises(RecordingGapError):
                obs.read(1, "cfg")
            assert [(o.step, o.source, o.payload_digest) for o in obs.observations] == [
                (1, "cfg", ""),
                (1, "other", ""),
                (1, "cfg", ""),
            ]
