"""verdict94: a replay engine's misbehaviours through ReplaySession never end in ACCEPT.

A recording of random tokens (standard kinds, a custom kind and a name sharing its 31-bit
hashed code; values that only a canonical reading tells apart, None among them), pinned
reads, effects and decisions is replayed through :class:`ReplaySession` as a replay engine
would, each step done right or misbehaving at random: a token of another kind asked and
the refusal swallowed (then, or not, the recorded kind asked again), a token skipped, a read
of another source swallowed, a read made live, a read skipped, an effect not in the ledger
tried and its refusal swallowed, a decision changed, the harness's own access. The decision,
alike for the ``Run`` and its ``.cprun`` and msgpack copies, must be ACCEPT exactly when
the replay did every step right. (Trailing effects left undone are not a misbehaviour:
a replay that performed a prefix of the ledger attempted nothing unrecorded.)

The loop found verdict94's swallowed colliding-kind refusal at a token recorded as None
(seeds 1, 5, 6 and 7 of these 8 fail with the cursor fix reverted; 14 of 40 seeds did).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from test_decision_support import colliding_kinds

from cpstore import state_digest
from cpstore.decision.table import Verdict
from cpstore.decision.validate import validate
from cpstore.errors import LedgerGuardError, RecordingGapError, ReplayDivergenceError
from cpstore.replay.session import ReplaySession
from cpstore.run.document import dump_document, load_document
from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store

_A, _B = colliding_kinds()
_KINDS = ["rng", "clock", "tool", _A, _B + "-other"]
_VALUES: list[Any] = [None, 0, 1, 1.0, True, "v", b"v", [], {}, -0.0, [None]]


def _record(store: Store, rnd: random.Random, branch: str) -> tuple[str, list[tuple[Any, ...]]]:
    rec = store.recorder("r", branch=branch)
    plan: list[tuple[Any, ...]] = []
    for i in range(rnd.randint(0, 6)):
        roll = rnd.random()
        if roll < 0.5:
            kind, value = rnd.choice(_KINDS), rnd.choice(_VALUES)
            if kind == _A and rnd.random() < 0.5:
                value = None  # the value a refusal's placeholder holds
            rec.token(kind, value)
            plan.append(("token", kind))
        elif roll < 0.75:
            source = rnd.choice(["cfg", "clock"])
            payload = rnd.choice([b"a", b"b"])
            rec.observe(i, source, payload, pinned_at=100.0)
            plan.append(("read", i, source, payload))
        elif roll < 0.9:
            target, payload = rnd.choice(["db", "mail"]), rnd.choice([b"x", b"y"])
            rec.effect(target, payload)
            plan.append(("effect", target, payload))
        else:
            rec.decision(i, "n", a=rnd.randint(0, 1))
            plan.append(("decision",))
    cid = rec.checkpoint(9, {"s": branch}, seal_ledger=True)
    rec.close()
    return cid, plan


def _replay(
    store: Store, cid: str, plan: list[tuple[Any, ...]], rnd: random.Random, branch: str
) -> tuple[Any, bool]:
    """The replay of ``cid`` and whether it misbehaved anywhere."""
    kinds = [step[1] for step in plan if step[0] == "token"]
    bad = False
    with store.read(cid) as cp:
        session = ReplaySession(cp)
        nodes = iter(cp.call_graph())

        def other_kind(kind: str) -> str:
            # Neither the kind planned nor the one the cursor is at (a skipped token's
            # kind asked for later would be the faithful replay, resynchronised).
            here = session.cursor.position
            at = kinds[here] if here < len(kinds) else None
            if at == _A and rnd.random() < 0.5:
                return _B  # the name with the recorded kind's code, half the time
            return rnd.choice([k for k in [*_KINDS, _B] if k not in (kind, at)])

        for step in plan:
            roll = rnd.random()
            if step[0] == "token":
                kind = step[1]
                try:
                    if roll < 0.7:
                        session.cursor.resolve(kind)
                    elif roll < 0.9:
                        bad = True
                        try:
                            session.cursor.resolve(other_kind(kind))
                        except ReplayDivergenceError:
                            if roll >= 0.8:  # the retry loop asks again
                                session.cursor.resolve(kind)
                    else:
                        bad = True  # skipped
                except ReplayDivergenceError:
                    bad = True
            elif step[0] == "read":
                _, at_step, source, payload = step
                try:
                    if roll < 0.7:
                        session.observations.read(at_step, source)
                    elif roll < 0.8:
                        bad = True
                        session.observations.read(at_step, "other")
                    elif roll < 0.9:
                        bad = True
                        session.observe_live(at_step, source, payload)
                    else:
                        bad = True  # skipped
                except RecordingGapError:
                    bad = True
            elif step[0] == "effect":
                _, target, payload = step
                try:
                    session.guard.check(target, payload if roll < 0.8 else payload + b"!")
                except LedgerGuardError:
                    bad = True
            else:
                node = dict(next(nodes))
                if roll >= 0.85:
                    bad = True
                    node["a"] = 5
                session.decision(node["step"], node)
        if rnd.random() < 0.1:
            bad = True
            session.harness_access({"counter": 1})
        return session.finish(state_digest({"s": branch})), bad


@pytest.mark.parametrize("seed", range(8))
def test_a_misbehaving_replay_is_never_accepted(tmp_path: Path, seed: int) -> None:
    rnd = random.Random(seed)
    with open_store(tmp_path / "s") as store:
        for trial in range(120):
            branch = f"b{trial}"
            cid, plan = _record(store, rnd, branch)
            replayed, bad = _replay(store, cid, plan, rnd, branch)
            forms = [replayed] + [
                load_document(dump_document(replayed, encoding=e)) for e in ("cprun", "msgpack")
            ]
            verdicts = {validate(cid, f, store=store, record=False).verdict for f in forms}
            assert len(verdicts) == 1, (plan, verdicts)
            assert (verdicts.pop() is Verdict.ACCEPT) is not bad, plan
