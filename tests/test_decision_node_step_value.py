"""A decision's step is judged by its value (review81's leftover, in ``decision_node``).

An int subclass whose comparisons say every bound holds passed ``0 <= step < 2**63``
with the value -1 and was kept in the call graph as step -1 (the recorder's checkpoint
and observe steps were fixed in review81; the decision, built in cpstore/run/nodes.py,
was left). Now refused by its value; an IntEnum is stored as its value."""

from __future__ import annotations

from typing import Any

import pytest
from test_review81_steps import _LYING, _Step

from cpstore.errors import DocumentError, InvalidInputError
from cpstore.native.records import step_value
from cpstore.run.model import check_step
from cpstore.run.nodes import decision_node


@pytest.mark.parametrize("bad", _LYING, ids=lambda v: f"agrees({int(v)})")
def test_a_lying_step_is_refused(bad: Any) -> None:
    with pytest.raises(InvalidInputError) as err:
        decision_node(bad, "pick", {})
    assert err.value.got == int(bad)


def test_a_plain_subclass_is_stored_as_its_value() -> None:
    entry = decision_node(_Step.THIRD, "pick", {"tool": "search"})
    assert entry == {"step": 3, "node": "pick", "tool": "search"}
    assert type(entry["step"]) is int


@pytest.mark.parametrize("bad", [True, 1.0, "1", None, -1, 2**63])
def test_other_bad_steps_are_refused_naming_them(bad: Any) -> None:
    with pytest.raises(InvalidInputError) as err:
        decision_node(bad, "pick", {})
    assert err.value.got == bad


@pytest.mark.parametrize("bad", _LYING, ids=lambda v: f"agrees({int(v)})")
def test_every_step_reader_judges_by_value(bad: Any) -> None:
    """One reading (``native.records.step_value``) for the recorder, bulk observations,
    decisions and run documents: a run document's step is judged by its value too."""
    assert step_value(bad) is None
    with pytest.raises(DocumentError):
        check_step(bad, "step")
    assert check_step(_Step.THIRD, "step") == 3 and type(check_step(_Step.THIRD, "step")) is int
