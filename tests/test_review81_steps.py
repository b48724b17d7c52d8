"""A step given as an int subclass is judged by its value, not by its own comparisons
(review81). meta80's checks ``0 <= step < 2**63`` ran the subclass's ``__ge__``/``__lt__``:
one saying yes to everything passed with the value -1, and the manifest encoder's
``_STEPS[step]`` (its ``__index__``: -1) wrote step 4095, a wrong step in an
acknowledged checkpoint; with the value 2**64 the encoder raised IndexError, outside
cpstore's errors. A plain subclass (an IntEnum) is stored as its value.
"""

from __future__ import annotations

import enum
from typing import Any

import pytest
from lying_ints import Agrees
from pg_cluster import backend_store  # noqa: F401 - the ``store`` fixture

from cpstore.errors import InvalidInputError
from cpstore.store import Store


class _Step(enum.IntEnum):
    THIRD = 3


_LYING = [Agrees(-1), Agrees(-4096), Agrees(2**63), Agrees(2**64)]


@pytest.mark.parametrize("bad", _LYING, ids=lambda v: f"agrees({int(v)})")
def test_a_step_whose_comparisons_lie_is_refused_before_a_write(store: Store, bad: Any) -> None:
    """Refused by its value (InvalidInputError naming run and branch): no checkpoint, no
    ref; stored before as step 4095 (value -1) or IndexError (value 2**64)."""
    rec = store.recorder("r")
    with pytest.raises(InvalidInputError) as err:
        rec.checkpoint(bad, {"a": 1})
    assert err.value.where == "run r branch main"
    assert store.ref("r") is None and store.runs() == []
    with pytest.raises(InvalidInputError):
        rec.observe(bad, "src", b"x", pinned_at=None)
    with pytest.raises(InvalidInputError):
        rec.observe_many([(0, "src", b"x", None), (bad, "src", b"y", None)])
    rec.checkpoint(0, {"a": 1})
    assert [m.step for m in store.history("r")] == [0]
    assert store.verify().ok


def test_a_plain_int_subclass_step_is_stored_as_its_value(store: Store) -> None:
    rec = store.recorder("r")
    rec.observe(_Step.THIRD, "src", b"x", pinned_at=None)
    rec.observe_many([(_Step.THIRD, "src", b"y", None)])
    rec.checkpoint(_Step.THIRD, {"a": 1})
    step = store.history("r")[0].step
    assert step == 3 and type(step) is int
    with pytest.raises(InvalidInputError):  # steps never go backwards, judged by value
        rec.checkpoint(Agrees(2), {"a": 2})
    assert store.verify().ok
