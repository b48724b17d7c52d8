"""audit54: a side that cannot be read does not hide what the other side shows on its own.

When the store cannot give one side (a checkpoint id that names nothing, a damaged
stored side), the decision is REJECT with INTEGRITY. Before audit54 that was its only
finding: the side that *was* read lost every finding it shows by itself, though none of
them needs the other side: a recording tagged ``replay:`` (REPLAY_OF_REPLAY), its
unsealed ledger, its unpinned reads and live tokens; a replay's best-effort mode and its
harness accesses. The decision table "reports every finding", and the gates read them:
a REJECT holding a QUARANTINE-level finding quarantines its run and branch for
``certify_rollback`` (seed 002: "an unverified branch must be quarantined rather than
rolled back"), so the INTEGRITY-only record let a later ACCEPT on the branch certify a
rollback that the same validation against a readable replay would have barred.
"""

from __future__ import annotations

import random
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from test_decision_support import clean_doc, replay_of, stored_replay

from cpstore.decision.checks import find_alone
from cpstore.decision.gates import certify_rollback
from cpstore.decision.sides import load_side
from cpstore.decision.table import FindingCode, Verdict
from cpstore.decision.validate import validate
from cpstore.errors import GateError
from cpstore.store.facade import open as open_store

MISSING = "0" * 32


def _unverified_recording(path: Path) -> str:
    with open_store(path) as store:
        rec = store.recorder("run")
        rec.observe(1, "cfg", b"x", pinned_at=None)
        rec.token("rng", 1, provenance="live")
        rec.effect("db", b"e")
        cid = rec.checkpoint(2, {"a": 1}, tags=["replay:old"], seal_ledger=False)
        rec.close(discard_effects=True)
    return cid


def test_the_recordings_own_findings_stay_when_the_replay_cannot_be_read(
    tmp_path: Path,
) -> None:
    cid = _unverified_recording(tmp_path / "s")
    with open_store(tmp_path / "s") as store:
        d = validate(cid, MISSING, store=store, record=False)
    assert d.verdict is Verdict.REJECT
    assert {(f.code, f.side) for f in d.findings} == {
        (FindingCode.INTEGRITY, "replayed"),
        (FindingCode.REPLAY_OF_REPLAY, "recorded"),
        (FindingCode.UNPINNED_OBSERVATION, "recorded"),
        (FindingCode.LIVE_RESOLUTION, "recorded"),
        (FindingCode.LEDGER_UNSEALED, "recorded"),
    }
    order = list(FindingCode)
    assert [order.index(f.code) for f in d.findings] == sorted(
        order.index(f.code) for f in d.findings
    )


@pytest.mark.parametrize("mode", ["best_effort", None])
def test_the_replays_own_findings_stay_when_the_recording_cannot_be_read(
    tmp_path: Path, mode: str | None
) -> None:
    doc = replay_of(clean_doc(), mode=mode, harness_accesses=[{"resource": "cache"}])
    doc["tokens"][1]["provenance"] = "live"
    doc["observations"][2]["pinned_at"] = None
    with open_store(tmp_path / "s") as store:
        d = validate(MISSING, doc, store=store, record=False)
    assert d.verdict is Verdict.REJECT
    assert {(f.code, f.side) for f in d.findings} == {
        (FindingCode.INTEGRITY, "recorded"),
        (FindingCode.BEST_EFFORT, "replayed"),
        (FindingCode.HARNESS_PERTURBATION, "replayed"),
        (FindingCode.LIVE_RESOLUTION, "replayed"),
        (FindingCode.UNPINNED_OBSERVATION, "replayed"),
    }


def test_a_clean_side_adds_nothing_to_the_integrity_finding(tmp_path: Path) -> None:
    with open_store(tmp_path / "s") as store:
        d = validate(MISSING, replay_of(clean_doc()), store=store, record=False)
    assert [f.code for f in d.findings] == [FindingCode.INTEGRITY]


def test_the_unverified_recording_quarantines_its_branch(tmp_path: Path) -> None:
    # One recorder writes X, its ledger unsealed (unverified on its own), then Y, which
    # seals it. X validated against a replay that cannot be read, Y against a
    # faithful STRICT replay: before audit54 Y's rollback was certified.
    with open_store(tmp_path / "s") as store:
        rec = store.recorder("run")
        rec.token("rng", 1)
        rec.effect("db", b"e")
        x = rec.checkpoint(2, {"a": 1}, seal_ledger=False)
        y = rec.checkpoint(4, {"a": 2})
        rec.close()
        validate(x, MISSING, store=store)
        dy = validate(y, stored_replay(store, y), store=store)
        assert dy.verdict is Verdict.ACCEPT, dy.findings
        with pytest.raises(GateError, match="quarantined"):
            certify_rollback(store, y, dy)


def _mutated(rng: random.Random) -> tuple[dict[str, Any], dict[str, Any]]:
    r, p = clean_doc(), replay_of(clean_doc())
    for doc in (r, p):
        if rng.random() < 0.3:
            doc["tokens"][rng.randrange(6)]["provenance"] = "live"
        if rng.random() < 0.3:
            doc["observations"][rng.randrange(3)]["pinned_at"] = None
        if rng.random() < 0.3:
            doc["mode"] = rng.choice(["best_effort", None, "strict"])
        if rng.random() < 0.3:
            doc["provenance_tags"] = ["replay:x"]
        if rng.random() < 0.3:
            doc["ledger_sealed"] = False
        if rng.random() < 0.3:
            doc["harness_accesses"] = [{"resource": "cache"}]
        if rng.random() < 0.2:
            doc["tokens"][2]["seq"] = 9
    return r, p


def test_what_a_side_shows_alone_is_what_the_full_validation_lists_of_it() -> None:
    # The one-sided findings are the full validation's (find_all and find_alone share
    # the checks): a P read pinned at another time than R's needs R, so P's
    # UNPINNED_OBSERVATION is compared only when P has a null pin.
    rng = random.Random(54)
    for _ in range(200):
        r, p = _mutated(rng)
        full = validate(r, p)
        with ExitStack() as stack:  # documents: nothing held open
            rs = load_side(stack, r, "recorded", None, True)[0]
            ps = load_side(stack, p, "replayed", None, True)[0]
        assert rs is not None and ps is not None
        for side in (rs, ps):
            alone = [(f.code, f.side, f.position, f.count) for f in find_alone(side)]
            listed = [
                (f.code, f.side, f.position, f.count)
                for f in full.findings
                if f.side == side.label
                and f.code in _ALONE
                and (f.code is not FindingCode.UNPINNED_OBSERVATION or side is rs)
            ]
            alone = [a for a in alone if a[0] is not FindingCode.UNPINNED_OBSERVATION or side is rs]
            assert alone == listed, (r, p)


_ALONE = {
    FindingCode.REPLAY_OF_REPLAY,
    FindingCode.BEST_EFFORT,
    FindingCode.LEDGER_UNSEALED,
    FindingCode.UNPINNED_OBSERVATION,
    FindingCode.LIVE_RESOLUTION,
    FindingCode.TOKEN_SEQUENCE,
    FindingCode.HARNESS_PERTURBATION,
}
