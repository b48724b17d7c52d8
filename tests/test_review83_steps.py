"""review83: every place a step is taken reads it one way (``native.records.step_value``).

Two gaps were left after f75c5c2 gave the recorder, bulk observations, decisions and
run documents one reading:

* ``step_value`` asked ``isinstance(value, int)``, which an object answers through its
  ``__class__`` (``unittest.mock.Mock(spec=int)`` does), then ``int.__index__`` raised a
  bare TypeError out of ``checkpoint``, ``observe``, ``observe_many``, ``decision``,
  ``Run(...)`` and the replay session: now refused as any other non-step.
* the replay session's pinned reader (``observations.read``, ``observe_live``) and
  ``finish(step=...)`` kept checks of their own on the step's own comparisons: a step
  whose comparisons agree with every bound (value -1) was taken as a live read, so
  ``finish`` then failed on the replay's own stream, and a step whose ``__eq__`` and
  ``__hash__`` say it is another step was served that step's recorded payload. Now
  judged by value, as the recorder judges them.
"""

from __future__ import annotations

import enum
from decimal import Decimal
from typing import Any
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lying_ints import Agrees
from pg_cluster import backend_store  # noqa: F401 - the ``store`` fixture

from cpstore.decision.validate import validate
from cpstore.errors import CpstoreError, DocumentError, InvalidInputError, RecordingGapError
from cpstore.native.records import STEP_LIMIT, step_value
from cpstore.replay.session import ReplaySession
from cpstore.run.document import dump_document, load_document
from cpstore.run.model import Run, check_step
from cpstore.run.nodes import decision_node
from cpstore.store.facade import Store


class _ClaimsInt:
    """Says it is an int through ``__class__`` (as ``Mock(spec=int)`` does)."""

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return int

    def __index__(self) -> int:
        return 2


class _PosesAsTwo(int):
    """Equal to and hashed like 2, whatever its value."""

    def __eq__(self, other: object) -> bool:
        return True

    def __ne__(self, other: object) -> bool:
        return False

    def __hash__(self) -> int:
        return hash(2)


class _IndexOnly:
    """numpy-like: an integer to ``operator.index``, not an int."""

    def __index__(self) -> int:
        return 2

    def __int__(self) -> int:
        return 2


class _Step(enum.IntEnum):
    TWO = 2


_NOT_INTS = [mock.Mock(spec=int), _ClaimsInt()]
_NOT_INT_IDS = ["Mock(spec=int)", "claims-int"]


@pytest.mark.parametrize("bad", _NOT_INTS, ids=_NOT_INT_IDS)
def test_an_object_claiming_int_is_not_a_step(bad: Any) -> None:
    assert isinstance(bad, int)  # what the check used to trust
    assert step_value(bad) is None
    with pytest.raises(CpstoreError):
        check_step(bad, "step")
    with pytest.raises(InvalidInputError):
        decision_node(bad, "pick", {})
    with pytest.raises(InvalidInputError):
        Run("r", bad, "d")


@given(
    st.one_of(
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=True),
        st.booleans(),
        st.text(max_size=3),
        st.none(),
    )
)
def test_step_value_is_the_value_of_an_int_in_range(value: Any) -> None:
    """Accepted exactly when an int (not a bool) in [0, 2**63), as a plain int."""
    got = step_value(value)
    ok = type(value) is int and 0 <= value < STEP_LIMIT
    assert got == (value if ok else None)
    assert got is None or type(got) is int


@pytest.fixture
def recorded(store: Store) -> tuple[Store, str]:
    """A checkpoint at step 2 with one pinned read and one decision (both engines)."""
    rec = store.recorder("r")
    rec.observe(2, "db", b"row", pinned_at=2.0)
    rec.decision(2, "pick")
    cid = rec.checkpoint(2, b"state")
    rec.close()
    return store, cid


@pytest.mark.parametrize(
    "bad",
    [
        *_NOT_INTS,
        Agrees(-1),
        Agrees(2**63),
        True,
        2.0,
        -1,
        Decimal(2),
        "2",
        _IndexOnly(),
        2**100,
        -(2**100),
    ],
    ids=[
        *_NOT_INT_IDS,
        "agrees(-1)",
        "agrees(2**63)",
        "True",
        "2.0",
        "-1",
        "Decimal",
        "str",
        "index-only",
        "2**100",
        "-2**100",
    ],
)
def test_a_replay_session_refuses_what_the_recorder_refuses(recorded: Any, bad: Any) -> None:
    store, cid = recorded
    rec = store.recorder("other")
    with pytest.raises(InvalidInputError):
        rec.observe(bad, "db", b"x", pinned_at=None)
    rec.close()
    with store.read(cid) as cp:
        session = ReplaySession(cp)
        with pytest.raises(InvalidInputError) as err:
            session.observations.read(bad, "db")
        assert not isinstance(err.value, RecordingGapError)
        with pytest.raises(InvalidInputError):
            session.observe_live(bad, "db", b"x")
        with pytest.raises(InvalidInputError) as err:
            session.finish(cp.manifest.state_digest, step=bad)
        assert err.value.where == "finish(step)"
        assert session.finish(cp.manifest.state_digest).observations == ()


@pytest.mark.parametrize(
    "bad", [STEP_LIMIT, Agrees(-5), Agrees(2**64)], ids=["2**63", "agrees(-5)", "agrees(2**64)"]
)
def test_finish_names_its_argument_for_every_step_out_of_range(recorded: Any, bad: Any) -> None:
    store, cid = recorded
    with store.read(cid) as cp:
        with pytest.raises(InvalidInputError) as err:
            ReplaySession(cp).finish(cp.manifest.state_digest, step=bad)
        assert err.value.where == "finish(step)"  # was Run's DocumentError at "step"


def test_a_read_is_served_by_its_steps_value(recorded: Any) -> None:
    """Step 7 posing as 2 is a read at step 7: refused (nothing recorded there), not
    served step 2's payload; the refused read keeps step 7, a plain int."""
    store, cid = recorded
    with store.read(cid) as cp:
        session = ReplaySession(cp)
        with pytest.raises(RecordingGapError):
            session.observations.read(_PosesAsTwo(7), "db")
        session.observe_live(_Step.TWO, "cfg", b"v")
        assert session.observations.read(_Step.TWO, "db") == b"row"
        p = session.finish(cp.manifest.state_digest, step=_Step.TWO)
    steps = [o.step for o in p.observations]
    assert steps == [7, 2, 2] and all(type(s) is int for s in steps)
    assert type(p.step) is int and p.step == 2


@pytest.mark.parametrize(
    "given", [True, 1.0, _PosesAsTwo(7), "1", _ClaimsInt()], ids=["True", "1.0", "eq", "str", "cls"]
)
def test_a_decision_mapping_step_agrees_only_as_the_same_step(given: Any) -> None:
    """A node's own "step" must be a step of the step's value, as a document's must be
    (it was compared with ==: True and 1.0 agreed with step 1)."""
    with pytest.raises(InvalidInputError):
        decision_node(1, {"node": "pick", "step": given}, {})
    if not isinstance(given, _PosesAsTwo):  # a step, of value 7: a document's may be 7
        with pytest.raises(DocumentError):
            Run("r", 1, "d", call_graph=({"node": "pick", "step": given},))
    assert decision_node(_Step.TWO, {"node": "pick", "step": 2}, {})["step"] == 2


def test_the_largest_step_round_trips_on_every_path(store: Store) -> None:
    """2**63 - 1 is a step everywhere: recorded, read back, replayed and validated as
    itself, and as each document copy (PostgreSQL's BIGINT column included)."""
    top = STEP_LIMIT - 1
    rec = store.recorder("r")
    rec.observe(top, "db", b"row", pinned_at=1.0)
    rec.decision(top, "pick")
    cid = rec.checkpoint(top, b"state")
    rec.close()
    assert [m.step for m in store.history("r")] == [top]
    with store.read(cid) as cp:
        session = ReplaySession(cp)
        assert session.observations.read(top, "db") == b"row"
        session.decision(top, "pick")
        replay = session.finish(cp.manifest.state_digest, step=top)
    for encoding in ("json", "msgpack", "cprun"):
        copy = load_document(dump_document(replay, encoding=encoding))
        assert copy.step == top and copy.observations[0].step == top
        assert validate(cid, copy, store=store, record=False).verdict.name == "ACCEPT"
