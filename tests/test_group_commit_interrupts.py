"""Group commit under a second (and third) interrupt landing while the first is handled.

tests/test_group_commit_audit.py raises one KeyboardInterrupt per call from a
trace function (which Python unsets once it raised). These raise several in
one call, in a planned order, on entering the named group_commit functions of
one thread (where an async exception lands) and on leaving the group's mutex
(the ``with`` block's exit, where one also lands), and check the contract of
docs/durability.md "Group commit": no writer waits forever, no writer is told
"stored" for a write that is not stored, nothing is stored twice.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from test_group_commit_audit import _check as _check_contract
from test_group_commit_audit import (
    _refusing_store,
    _run_writers,
    _Store,
    _violations,
    _waiting_group,
    _write_all,
    _x_y_then_z,
)
from test_store_group_commit import _committer

from cpstore.store import group_commit
from cpstore.store.group_commit import GroupCommit

#: The module functions an interrupt can be planned on (the methods are patched per instance).
_FUNCTIONS = ("_signal", "_settle", "_unknown", "_outcome")
_METHODS = ("_commit", "_end", "_run", "_abandon", "_next", "_take", "_rescue")


class _Mutex:
    """The group's mutex, whose ``with`` exit is a place a planned interrupt lands."""

    def __init__(self, plan: _Plan) -> None:
        self._lock = threading.Lock()
        self._plan = plan

    def __enter__(self) -> None:
        self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()
        self._plan.hit("mutex exit")


class _Plan:
    """KeyboardInterrupts raised in thread ``target`` on entering each named place in
    order ("mutex exit" after _take: on leaving the mutex once a group was taken)."""

    def __init__(self, target: str, names: Sequence[str]) -> None:
        self.target = target
        self.left = list(names)
        self.raised: list[str] = []
        self.taken = False
        self.gc: GroupCommit[str] | None = None

    def hit(self, name: str) -> None:
        if threading.current_thread().name != self.target or not self.left:
            return
        if name == "mutex exit" and not self.taken:
            return
        if self.left[0] == name:
            self.left.pop(0)
            self.raised.append(name)
            if self.gc is not None:
                self.gc._last_seconds = 0.0  # the usual quick group: a next timer gives up at once
            raise KeyboardInterrupt(f"on entering {name}")

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def planned(*args: Any, **kwargs: Any) -> Any:
            self.hit(name)
            result = fn(*args, **kwargs)
            if name == "_take":
                self.taken = True
            return result

        return planned


def _interrupt(gc: GroupCommit[str], plan: _Plan, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _FUNCTIONS:
        monkeypatch.setattr(group_commit, name, plan.wrap(name, getattr(group_commit, name)))
    for name in _METHODS:
        if hasattr(gc, name):
            setattr(gc, name, plan.wrap(name, getattr(gc, name)))
    gc._mutex = _Mutex(plan)  # type: ignore[assignment]


def _group_of_two(
    names: Sequence[str], monkeypatch: pytest.MonkeyPatch
) -> tuple[dict[str, str], _Store, _Plan]:
    """x queues and times the queue; y completes the group of two and takes it, and is
    interrupted at each of ``names`` in turn; then z commits. Returns name -> outcome."""
    monkeypatch.setattr(group_commit, "MAX_GATHER_SECONDS", 30.0)
    store, gc = _waiting_group()
    plan = _Plan("y", names)
    plan.gc = gc
    _interrupt(gc, plan, monkeypatch)
    outcome: dict[str, str] = {}
    _x_y_then_z(gc, outcome, _committer(gc, outcome), timeout=20)
    return outcome, store, plan


def _check(outcome: dict[str, str], store: _Store, plan: _Plan) -> None:
    """Every planned interrupt was raised, and the contract held (test_group_commit_audit)."""
    assert not plan.left, f"planned interrupts not reached: {plan.left} ({plan.raised})"
    _check_contract(outcome, store)


class TestSecondInterruptInTheCommitter:
    @pytest.mark.parametrize(
        "names",
        [
            ["_end", "_end"],
            ["_end", "_signal"],
            ["_signal", "_signal"],
            ["_signal", "_end"],
        ],
    )
    def test_interrupts_while_ending_a_committed_group_hang_no_writer(
        self, names: list[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The group's txn ran; interrupts land on every attempt to settle and wake its
        writers: x (stored) is still told so, and later writers still commit."""
        outcome, store, plan = _group_of_two(names, monkeypatch)
        _check(outcome, store, plan)
        assert store.calls[0] == ["x", "y"]
        assert outcome["x"] == "ok"

    @pytest.mark.parametrize("names", [["_run", "_end", "_end"], ["_run", "_unknown", "_end"]])
    def test_interrupts_before_the_group_txn_and_while_ending_it_commit_the_other_write(
        self, names: list[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Interrupted before the group's txn and on both attempts to end it: x, never
        handed to a txn, goes back in the queue and is committed (once) and told so."""
        outcome, store, plan = _group_of_two(names, monkeypatch)
        _check(outcome, store, plan)
        assert outcome["x"] == "ok" and "x" in store.stored
        assert "y" not in store.stored


class TestSecondInterruptWhileWithdrawing:
    def test_an_interrupt_while_putting_a_taken_group_back_hangs_no_writer(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """y takes the group and is interrupted leaving the mutex, then again on entering
        _abandon (which puts the unattempted group back): x is still committed, not lost."""
        outcome, store, plan = _group_of_two(["mutex exit", "_abandon"], monkeypatch)
        _check(outcome, store, plan)
        assert outcome["x"] == "ok" and "y" not in store.stored


class _Random(_Plan):
    """KeyboardInterrupts in every thread, on each planned place with probability ``rate``
    (any number per call: a second and third land while the first is handled)."""

    def __init__(self, seed: int, rate: float) -> None:
        super().__init__("", [])
        self.rate = rate
        self.seed = seed
        self.local = threading.local()
        self.count = 0

    def hit(self, name: str) -> None:
        rnd = getattr(self.local, "rnd", None)
        if rnd is None:
            return
        if rnd.random() < self.rate:
            self.count += 1
            raise KeyboardInterrupt(f"on entering {name}")


def _stress(seed: int, threads: int, per: int, rate: float) -> tuple[list[str], int]:
    """``threads`` writers of ``per`` writes each, every 10th refused, KeyboardInterrupt on
    ``rate`` of the planned places; the contract's violations and how many interrupts."""
    commit_many, stored = _refusing_store()
    gc = GroupCommit[str](commit_many)
    plan = _Random(seed, rate)
    mp = pytest.MonkeyPatch()
    outcome: dict[str, str] = {}
    try:
        _interrupt(gc, plan, mp)

        def writer(i: int) -> None:
            mine = random.Random(seed * 1000 + i)
            plan.local.rnd = random.Random(mine.random())
            _write_all(gc, i, per, mine, outcome)

        problems = _run_writers(writer, threads, 30)
    finally:
        mp.undo()
    problems += _violations(stored, outcome)
    return problems, plan.count


class TestManyInterruptsStress:
    @pytest.mark.parametrize("seed", range(3))
    def test_many_interrupts_per_call_hang_no_writer_and_fake_no_success(self, seed: int) -> None:
        """6 threads x 30 writes, refused writes, and interrupts on 8% of the function entries
        and mutex exits of group commit in every thread (several per call): every call
        returns, each 'stored' is stored once, nothing refusable is refused wrongly."""
        problems, count = _stress(seed, 6, 30, 0.08)
        assert problems == []
        assert count > 20  # the interrupts did land, many in handling
