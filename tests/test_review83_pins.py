"""review83: a pin is read by its value in the recorder, as a ``Run`` reads it.

``Recorder.observe`` and ``observe_many`` (``checked_pin``) read a float subclass's pin
by its own ``__float__``: one of value 3.0 saying 2.0 was recorded pinned at 2.0, where a
``Run`` given the same read holds 3.0 (so the same pin was a re-pin, QUARANTINE, against
its own recording); one of value NaN saying 2.0 was recorded pinned at 2.0 (a ``Run``
refuses a NaN pin); and ``Mock(spec=float)``, an instance of float to ``isinstance``,
raised a bare TypeError. Now ``native.records.number_value`` reads every pin.
"""

from __future__ import annotations

import math
from typing import Any
from unittest import mock

import pytest
from pg_cluster import backend_store  # noqa: F401 - the ``store`` fixture

from cpstore.decision.validate import validate
from cpstore.errors import DocumentError, InvalidInputError
from cpstore.native.records import number_value
from cpstore.run.model import Observation, PackedTokens, ReplayMode, Run
from cpstore.store.facade import Store


class _SaysTwo(float):
    """A float whose ``__float__`` and ``+`` give 2.0, whatever its value."""

    def __float__(self) -> float:
        return 2.0

    def __add__(self, other: object) -> float:
        return 2.0

    __hash__ = float.__hash__


def test_a_pin_is_recorded_as_its_value_and_matches_a_run_of_it(store: Store) -> None:
    rec = store.recorder("r")
    rec.observe(1, "db", b"a", pinned_at=_SaysTwo(3.0))
    rec.observe_many([(1, "db", b"b", _SaysTwo(4.0))])
    cid = rec.checkpoint(1, b"state")
    rec.close()
    with store.read(cid) as cp:
        stored = cp.observations()
        man = cp.manifest
    assert [o[3] for o in stored] == [3.0, 4.0]  # was [2.0, 2.0]
    replay = Run(
        "r",
        1,
        man.state_digest,
        tokens=PackedTokens(b"", values=[]),
        observations=(
            Observation(1, "db", stored[0][2], _SaysTwo(3.0)),
            Observation(1, "db", stored[1][2], _SaysTwo(4.0)),
        ),
        transcript_digest=man.transcript_digest,
        provenance_tags=(f"replay:{cid}",),
        mode=ReplayMode.STRICT,
    )
    assert [o.pinned_at for o in replay.observations] == [3.0, 4.0]
    assert validate(cid, replay, store=store, record=False).verdict.name == "ACCEPT"


@pytest.mark.parametrize(
    "bad",
    [_SaysTwo(math.nan), _SaysTwo(math.inf), mock.Mock(spec=float), mock.Mock(spec=int)],
    ids=["nan", "inf", "Mock(spec=float)", "Mock(spec=int)"],
)
def test_a_pin_that_is_no_finite_number_is_refused_everywhere(store: Store, bad: Any) -> None:
    rec = store.recorder("r")
    with pytest.raises(InvalidInputError):
        rec.observe(1, "db", b"a", pinned_at=bad)
    with pytest.raises(InvalidInputError):
        rec.observe_many([(1, "db", b"a", bad)])
    rec.close()
    with pytest.raises(DocumentError):
        Run("r", 1, "d", observations=(Observation(1, "db", "x", bad),))


@pytest.mark.parametrize(
    ("given", "value"),
    [(_SaysTwo(3.0), 3.0), (True, True), (7, 7), (-0.0, -0.0), ("7", "7"), (None, None)],
)
def test_number_value(given: Any, value: Any) -> None:
    got = number_value(given)
    assert got == value and type(got) is type(value)
