"""review70: a decision node is what the runtime decided *when it decided* (LMDB and PostgreSQL).

``Recorder.decision`` and ``ReplaySession.decision`` kept the caller's own objects in the
entry (a shallow dict), encoded only at ``checkpoint()`` / read at ``finish()``. A runtime
that decided with one argument list and then changed that list (a reused buffer, a
message list it keeps appending to) had the call graph show the changed value: a replay
that took another decision than the recording was an ACCEPT once the list was changed to
what the recording holds (seed 004: the call graph is the evidence of the decision path).
"""

from __future__ import annotations

from pg_cluster import backend_store  # noqa: F401 - fixture

import cpstore
from cpstore.decision.table import FindingCode, Verdict


def _record(store: cpstore.Store, args: list[str], *, mutate_to: list[str] | None = None) -> str:
    rec = store.recorder("r")
    rec.decision(1, "run_tool", args=args)
    if mutate_to is not None:
        args[:] = mutate_to
    rec.token("rng", 1)
    return rec.checkpoint(1, {"a": 1}, seal_ledger=True)


def test_a_replay_decision_changed_after_the_call_is_not_rewritten(store: cpstore.Store) -> None:
    """The replay decided ``rm`` where the recording decided ``ls``, then the runtime reused
    its list: P showed ``ls`` and the decision was an ACCEPT (evidence)."""
    cid = _record(store, ["ls"])
    with store.read(cid) as cp:
        session = cpstore.ReplaySession(cp)
        args = ["rm", "-rf", "/"]
        session.decision(1, "run_tool", args=args)  # the divergent decision
        session.cursor.resolve("rng")
        args[:] = ["ls"]  # the runtime reuses its buffer afterwards
        replayed = session.finish(cpstore.state_digest({"a": 1}))
    decision = cpstore.validate(cid, replayed, store=store, record=False)
    assert decision.verdict is Verdict.REJECT
    assert FindingCode.CALL_GRAPH_MISMATCH in decision.codes
    cg = next(f for f in decision.findings if f.code is FindingCode.CALL_GRAPH_MISMATCH)
    assert cg.observed["args"] == ["rm", "-rf", "/"]


def test_the_mapping_form_is_kept_as_decided_too(store: cpstore.Store) -> None:
    """``decision(step, {"node": ..., ...})``: a nested value changed after the call."""
    cid = _record(store, ["ls"])
    with store.read(cid) as cp:
        session = cpstore.ReplaySession(cp)
        args = ["rm"]
        session.decision(1, {"node": "run_tool", "args": args})
        session.cursor.resolve("rng")
        args[0] = "ls"
        replayed = session.finish(cpstore.state_digest({"a": 1}))
    decision = cpstore.validate(cid, replayed, store=store, record=False)
    assert decision.verdict is Verdict.REJECT
    assert FindingCode.CALL_GRAPH_MISMATCH in decision.codes


def test_a_recorded_decision_changed_before_the_checkpoint_is_kept_as_decided(
    store: cpstore.Store,
) -> None:
    """The recorder's side: the original run decided ``rm`` and reused its list before the
    checkpoint, so the recording said ``ls``; a replay deciding ``ls`` was an ACCEPT."""
    cid = _record(store, ["rm"], mutate_to=["ls"])
    with store.read(cid) as cp:
        assert cp.call_graph()[0]["args"] == ["rm"]
        session = cpstore.ReplaySession(cp)
        session.decision(1, "run_tool", args=["ls"])
        session.cursor.resolve("rng")
        replayed = session.finish(cpstore.state_digest({"a": 1}))
    decision = cpstore.validate(cid, replayed, store=store, record=False)
    assert decision.verdict is Verdict.REJECT
    assert FindingCode.CALL_GRAPH_MISMATCH in decision.codes


def test_an_unchanged_decision_still_accepts(store: cpstore.Store) -> None:
    """The snapshot changes nothing for a runtime that leaves its objects alone (a tuple
    and a list of one value are one canonical value, as before)."""
    cid = _record(store, ["ls"])
    with store.read(cid) as cp:
        session = cpstore.ReplaySession(cp)
        session.decision(1, "run_tool", args=("ls",))
        session.cursor.resolve("rng")
        replayed = session.finish(cpstore.state_digest({"a": 1}))
    decision = cpstore.validate(cid, replayed, store=store, record=False)
    assert decision.verdict is Verdict.ACCEPT, decision.findings
