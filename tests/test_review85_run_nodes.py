"""review85: a ``Run`` holds each decision node and harness access holding a type other
than the builtins as its canonical value, read once.

``validate`` encoded a Run's nodes again at each call, so a dict subclass whose
``items()`` answered otherwise at each read matched the replay on one call and not on
the next: an ACCEPT in memory where the Run's document, written from one read, was a
REJECT. The writers already wrote such a value as its canonical value; the Run now holds
that value from the start, so it is judged alike in memory and as each copy.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from cpstore.decision.validate import validate
from cpstore.run import PackedTokens, ReplayMode, Run, dump_document, load_document

NONE = PackedTokens(b"", values=[])


class _Flip(dict):  # type: ignore[type-arg]
    """A dict whose items() say 7, then 2, then 7 ... for every key."""

    calls = itertools.count()

    def items(self) -> Any:
        value = 7 if next(self.calls) % 2 == 0 else 2
        return [(key, value) for key in self]


def _recorded(value: Any, access: Any = None) -> Run:
    return Run(
        "r",
        1,
        "s",
        tokens=NONE,
        call_graph=({"step": 0, "node": "a", "v": value},),
        ledger_sealed=True,
    )


@pytest.mark.parametrize("encoding", ["json", "msgpack", "cprun"])
@pytest.mark.parametrize("parity", [0, 1])
def test_a_node_is_judged_alike_in_memory_and_as_its_document(encoding: str, parity: int) -> None:
    replay = Run(
        "r",
        1,
        "s",
        tokens=NONE,
        call_graph=({"step": 0, "node": "a", "v": {"z": 7}},),
        mode=ReplayMode.STRICT,
    )
    for _ in range(parity):
        next(_Flip.calls)
    recorded = _recorded(_Flip(z=0))
    in_memory = {validate(recorded, replay).verdict for _ in range(4)}
    copy = load_document(dump_document(recorded, encoding=encoding))
    assert in_memory == {validate(copy, replay).verdict}
    assert recorded.call_graph == copy.call_graph


def test_plain_nodes_and_accesses_are_held_as_given() -> None:
    node = {"step": 0, "node": "a", "v": [1, {"k": b"x"}]}
    run = Run("r", 1, "s", tokens=NONE, call_graph=(node,), harness_accesses=({"a": 1},))
    assert run.call_graph[0] is node


def test_a_harness_access_is_held_as_its_canonical_value() -> None:
    run = Run("r", 1, "s", tokens=NONE, harness_accesses=(_Flip(z=0), bytearray(b"x")))
    assert type(run.harness_accesses[0]) is dict
    assert run.harness_accesses[0] == dict(run.harness_accesses[0])
    assert run.harness_accesses[1] == b"x"
