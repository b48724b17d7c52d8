"""ident72: a replay is evidence only about the checkpoint it replayed (LMDB and PostgreSQL).

``ReplaySession.finish`` tags its run ``replay:<the checkpoint it replayed>``, and the
tag was never compared with R. A replay of checkpoint A validated against another
checkpoint B of the same run and step with equal streams (a branch that recorded the
same step, a re-recording) was an ACCEPT, and with a store it became B's standing
decision, which lets a recorder resume from B: evidence about a state the replay never
started from (review70's open question). Now a ``replay:`` tag that names a checkpoint
id other than R's is a CHECKPOINT_MISMATCH: a QUARANTINE (equal streams from A's
pre-state prove nothing about B's), releasable by an operator's sign-off.
"""

from __future__ import annotations

import dataclasses

import pytest
from pg_cluster import backend_store  # noqa: F401 - fixture

import cpstore
from cpstore.decision.table import FindingCode, Verdict
from cpstore.errors import GateError

STATE = {"a": 1}


def _record(store: cpstore.Store, branch: str, *, tags: tuple[str, ...] = ()) -> str:
    """One checkpoint at step 1 of run ``r``: the same streams and state on every branch."""
    rec = store.recorder("r", branch=branch)
    rec.decision(1, "run_tool", args=["ls"])
    rec.token("rng", 7)
    return rec.checkpoint(1, STATE, seal_ledger=True, tags=tags)


def _replay(store: cpstore.Store, cid: str) -> cpstore.Run:
    """A faithful strict replay of ``cid``, tagged ``replay:<cid>`` by the session."""
    with store.read(cid) as cp:
        session = cpstore.ReplaySession(cp)
        session.decision(1, "run_tool", args=["ls"])
        session.cursor.resolve("rng")
        return session.finish(cpstore.state_digest(STATE))


def _two(store: cpstore.Store) -> tuple[str, str]:
    a, b = _record(store, "main"), _record(store, "alt")
    assert a != b  # two checkpoints, equal in everything validate compares but their id
    return a, b


def test_a_replay_of_one_checkpoint_is_rejected_against_another(store: cpstore.Store) -> None:
    a, b = _two(store)
    replayed = _replay(store, a)
    assert replayed.provenance_tags == (f"replay:{a}",)
    decision = cpstore.validate(b, replayed, store=store, record=False)
    assert decision.verdict is Verdict.QUARANTINE and not decision.evidence
    assert decision.codes == {FindingCode.CHECKPOINT_MISMATCH}
    f = decision.findings[0]
    assert (f.stream, f.side, f.position, f.unit) == ("identity", "replayed", 0, "index")
    assert (f.expected, f.observed) == (f"replay:{b}", f"replay:{a}")
    assert f.releasable
    assert a in f.message and b in f.message


def test_the_replay_still_accepts_against_the_checkpoint_it_replayed(
    store: cpstore.Store,
) -> None:
    a, b = _two(store)
    assert cpstore.validate(a, _replay(store, a), store=store, record=False).verdict is (
        Verdict.ACCEPT
    )
    assert cpstore.validate(b, _replay(store, b), store=store, record=False).verdict is (
        Verdict.ACCEPT
    )


def test_the_wrong_replay_is_not_recorded_as_the_checkpoints_evidence(
    store: cpstore.Store,
) -> None:
    """Recorded, the mistaken validation stands as B's QUARANTINE (a recorder from B is
    refused without a permit) until a replay of B itself is validated, which supersedes it."""
    a, b = _two(store)
    wrong = cpstore.validate(b, _replay(store, a), store=store)
    assert wrong.verdict is Verdict.QUARANTINE
    with pytest.raises(GateError):
        store.recorder("r", branch="alt")
    right = cpstore.validate(b, _replay(store, b), store=store)
    assert right.verdict is Verdict.ACCEPT
    rec = store.recorder("r", branch="alt")
    rec.token("rng", 8)
    assert rec.checkpoint(2, {"a": 2}, seal_ledger=True) != b


def test_a_stored_recording_of_a_replay_is_compared_too(store: cpstore.Store) -> None:
    """P as a stored checkpoint tagged ``replay:<a>`` (a replay engine that records its
    replays): against B it is a CHECKPOINT_MISMATCH, against A it is not."""
    a, b = _two(store)
    p = _record(store, "replay-1", tags=(f"replay:{a}",))
    against_b = cpstore.validate(b, p, store=store, record=False)
    assert FindingCode.CHECKPOINT_MISMATCH in against_b.codes
    against_a = cpstore.validate(a, p, store=store, record=False)
    assert FindingCode.CHECKPOINT_MISMATCH not in against_a.codes


@pytest.mark.parametrize(
    "tags",
    [
        (),  # a Run built by hand names no checkpoint
        ("replay:session-42",),  # a free-form tag names no checkpoint id
        ("replay:",),
        ("replay:" + "g" * 32,),  # 32 characters, not hex
        ("note:" + "0" * 32,),  # not a replay: tag
    ],
)
def test_a_tag_that_names_no_checkpoint_id_is_not_compared(
    store: cpstore.Store, tags: tuple[str, ...]
) -> None:
    a, b = _two(store)
    replayed = dataclasses.replace(_replay(store, a), provenance_tags=tags)
    assert cpstore.validate(b, replayed, store=store, record=False).verdict is Verdict.ACCEPT


def test_an_uppercase_id_names_the_same_checkpoint(store: cpstore.Store) -> None:
    a, b = _two(store)
    replayed = dataclasses.replace(_replay(store, a), provenance_tags=(f"replay:{b.upper()}",))
    assert cpstore.validate(b, replayed, store=store, record=False).verdict is Verdict.ACCEPT
    assert cpstore.validate(a, replayed, store=store, record=False).codes == {
        FindingCode.CHECKPOINT_MISMATCH
    }


def test_every_tag_must_name_r_and_the_first_other_is_located(store: cpstore.Store) -> None:
    a, b = _two(store)
    tags = (f"replay:{b}", "replay:session-42", f"replay:{a}", "replay:" + "0" * 32)
    replayed = dataclasses.replace(_replay(store, a), provenance_tags=tags)
    decision = cpstore.validate(b, replayed, store=store, record=False)
    (f,) = decision.findings
    assert (f.code, f.position, f.observed, f.count) == (
        FindingCode.CHECKPOINT_MISMATCH,
        2,
        f"replay:{a}",
        2,
    )


def test_r_as_a_document_has_no_id_to_compare(store: cpstore.Store) -> None:
    """R handed over as a run document (no checkpoint id): the tag cannot be compared."""
    a, b = _two(store)
    replayed = _replay(store, a)
    recorded = dataclasses.replace(_replay(store, b), provenance_tags=(), mode=None)
    decision = cpstore.validate(recorded, replayed, record=False)
    assert FindingCode.CHECKPOINT_MISMATCH not in decision.codes


def test_a_replay_of_what_r_replayed_is_of_the_same_checkpoint(store: cpstore.Store) -> None:
    """R a stored recording of a replay of A (REPLAY_OF_REPLAY already): P replaying A,
    or R itself (seed 004's replay validated against itself), replayed R's checkpoint;
    a replay of B did not."""
    a, b = _two(store)
    pid = _record(store, "replay-1", tags=(f"replay:{a}",))
    itself = cpstore.validate(pid, pid, store=store, record=False)
    assert FindingCode.REPLAY_OF_REPLAY in itself.codes
    assert FindingCode.CHECKPOINT_MISMATCH not in itself.codes
    of_a = cpstore.validate(pid, _replay(store, a), store=store, record=False)
    assert FindingCode.CHECKPOINT_MISMATCH not in of_a.codes
    of_b = cpstore.validate(pid, _replay(store, b), store=store, record=False)
    assert FindingCode.CHECKPOINT_MISMATCH in of_b.codes


def test_an_operator_who_knows_b_shares_as_pre_state_may_release_it(
    store: cpstore.Store,
) -> None:
    """Releasable: a sign-off of the recorded QUARANTINE, then a resume gate, gives the
    permit a recorder from B needs (audited, used once)."""
    a, b = _two(store)
    wrong = cpstore.validate(b, _replay(store, a), store=store)
    so = cpstore.sign_off(store, wrong, operator="op", reason="A and B share their pre-state")
    permit = cpstore.resume_gate(store, b, wrong, sign_off=so)
    rec = store.recorder("r", branch="alt", permit=permit)
    rec.token("rng", 8)
    assert rec.checkpoint(2, {"a": 2}, seal_ledger=True) != b
