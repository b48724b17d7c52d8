"""review83: a ``Run`` holds the values of its steps, seqs and pins, so every copy of it
validates as it does.

``Run(...)`` checked a step by its value (``step_value``: ``int.__index__``) but kept
the object given. The validator and the JSON and msgpack writers read that value too,
but the packed run file's writer (``.cprun``) and the call graph's comparison go through
the canonical encoder, which reads an int subclass by its own ``__int__`` and compares
it with its own comparisons, and a float subclass by its own ``__add__``. So a replay
whose step was 7 by value and 2 by ``__int__`` was a STEP_MISMATCH (REJECT) as given and
as JSON or msgpack, and an ACCEPT as its ``.cprun`` copy; the same for an observation's
step, an effect's seq and a pin; a decision node's step of 7 by value matched the
recording's 2 (ACCEPT) where the recorder and the replay session store 7 (REJECT); and a
step of 5 by value, -1 by ``__int__`` made a run whose every ``.cprun`` copy was refused.
Now the run holds plain ints and floats, read as the checks read them.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import pytest
from lying_ints import Agrees
from pg_cluster import backend_store  # noqa: F401 - the ``store`` fixture

from cpstore.decision.validate import validate
from cpstore.errors import DocumentError
from cpstore.run.document import load_document
from cpstore.run.model import Effect, Observation, PackedTokens, ReplayMode, Run
from cpstore.run.writer import write_document
from cpstore.store.facade import Store


class _Says(int):
    """An int whose ``__int__`` and ``__index__`` give another number than its value."""

    said = 2

    def __int__(self) -> int:
        return self.said

    def __index__(self) -> int:
        return self.said

    __hash__ = int.__hash__


class _SaysMinusOne(_Says):
    said = -1


class _SaysZero(_Says):
    said = 0


class _AddsTo(float):
    """A float whose ``__add__`` and ``__float__`` give 2.0, whatever its value."""

    def __add__(self, other: object) -> float:
        return 2.0

    def __float__(self) -> float:
        return 2.0

    __hash__ = float.__hash__


@pytest.fixture
def recorded(store: Store) -> tuple[Store, str, dict[str, Any]]:
    """A checkpoint at step 2: a read pinned at 2.0, a decision, an effect, sealed."""
    rec = store.recorder("r")
    rec.observe(2, "db", b"row", pinned_at=2.0)
    rec.decision(2, "pick")
    rec.effect("mail", b"hi")
    cid = rec.checkpoint(2, b"state")
    rec.close()
    with store.read(cid) as cp:
        man = cp.manifest
        fields = {
            "step": 2,
            "observations": tuple(Observation(*o) for o in cp.observations()),
            "call_graph": tuple(cp.call_graph()),
            "effects": tuple(Effect(*e) for e in cp.effects()),
            "state_digest": man.state_digest,
            "transcript_digest": man.transcript_digest,
            "tag": f"replay:{cid}",
        }
    return store, cid, fields


def _replay(fields: dict[str, Any], change: str) -> Run:
    (obs,) = fields["observations"]
    (eff,) = fields["effects"]
    (node,) = fields["call_graph"]
    step = _Says(7) if change == "step" else _SaysMinusOne(5) if change == "step-1" else 2
    if change == "observation":
        obs = Observation(_Says(7), obs.source, obs.payload_digest, obs.pinned_at)
    if change == "pin":
        obs = Observation(obs.step, obs.source, obs.payload_digest, _AddsTo(3.0))
    if change == "effect":
        eff = Effect(_SaysZero(5), eff.target, eff.payload_digest)
    if change == "decision":
        node = {**node, "step": _Says(7)}
    return Run(
        "r",
        step,
        fields["state_digest"],
        tokens=PackedTokens(b"", values=[]),
        observations=(obs,),
        call_graph=(node,),
        transcript_digest=fields["transcript_digest"],
        effects=(eff,),
        provenance_tags=(fields["tag"],),
        mode=ReplayMode.STRICT,
    )


def _copy(run: Run, encoding: str) -> Run:
    out = io.BytesIO()
    write_document(run, out, encoding=encoding)
    return load_document(out.getvalue())


_CHANGES = ["step", "step-1", "observation", "pin", "effect", "decision"]


def test_the_honest_replay_is_accepted_in_every_form(recorded: Any) -> None:
    store, cid, fields = recorded
    run = _replay(fields, "none")
    for form in (run, *(_copy(run, e) for e in ("json", "msgpack", "cprun"))):
        assert validate(cid, form, store=store, record=False).verdict.name == "ACCEPT"


@pytest.mark.parametrize("change", _CHANGES)
def test_a_replay_validates_as_its_every_copy(recorded: Any, change: str) -> None:
    store, cid, fields = recorded
    run = _replay(fields, change)
    direct = validate(cid, run, store=store, record=False)
    assert direct.verdict.name != "ACCEPT", change  # 7 is not 2, 3.0 is not 2.0, 5 not 0
    for encoding in ("json", "msgpack", "cprun"):
        copy = validate(cid, _copy(run, encoding), store=store, record=False)
        assert (copy.verdict, copy.codes) == (direct.verdict, direct.codes), encoding


def test_a_run_holds_plain_values(recorded: Any) -> None:
    _, _, fields = recorded
    run = _replay(fields, "step")
    assert type(run.step) is int and run.step == 7
    reads: dict[str, Callable[[Run], Any]] = {
        "observation": lambda r: r.observations[0].step,
        "pin": lambda r: r.observations[0].pinned_at,
        "effect": lambda r: r.effects[0].seq,
        "decision": lambda r: r.call_graph[0]["step"],
    }
    for change, got in reads.items():
        value = got(_replay(fields, change))
        assert type(value) in (int, float) and value in (7, 3.0, 5), change


@pytest.mark.parametrize("bad", [Agrees(-1), Agrees(2**64)], ids=["-1", "2**64"])
def test_an_effect_seq_is_judged_by_its_value(bad: int) -> None:
    """Its own comparisons were asked: a seq of -1 was taken, and every copy refused."""
    with pytest.raises(DocumentError):
        Run("r", 0, "d", effects=(Effect(bad, "t", "d"),))
