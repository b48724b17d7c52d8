"""Group commit under interrupts at the points an async exception can land (audit).

A KeyboardInterrupt (Ctrl-C in the main thread, or ``PyThreadState_SetAsyncExc``)
is raised where the interpreter checks for pending work: among others on
entering a Python function. The tests raise it there deterministically, from a
trace function's ``call`` event in the committing thread, and check the
contract of docs/durability.md "Group commit": no caller hangs, no caller is
told "stored" for a write that is not stored, nothing is stored twice.
"""

from __future__ import annotations

import gc as collector
import os
import random
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from test_store_concurrency import child_raises
from test_store_group_commit import _committer, _wait_for, killed_writers_acknowledged

from cpstore.errors import StoreError
from cpstore.store import group_commit
from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store
from cpstore.store.group_commit import GroupCommit


class _Store:
    """A commit_many that records what it stored (all or nothing per call)."""

    def __init__(self) -> None:
        self.stored: list[str] = []
        self.calls: list[list[str]] = []

    def __call__(self, writes: Sequence[str]) -> None:
        self.calls.append(list(writes))
        self.stored.extend(writes)


def _interrupt_on_entering(function: str, gc: GroupCommit[str]) -> Any:
    """A trace function raising KeyboardInterrupt on the first entry into the
    group_commit function named ``function`` (where an async exception lands);
    ``"after _take"``: the first function entered after the group was taken."""
    armed = [function != "after _take"]
    spent = [False]

    def trace(frame: FrameType, event: str, arg: object) -> Any:
        if frame.f_code.co_filename != group_commit.__file__:
            return None
        name = frame.f_code.co_name
        if event == "return" and name == "_take":
            armed[0] = True
        elif event == "call" and armed[0] and not spent[0] and function in (name, "after _take"):
            spent[0] = True
            gc._last_seconds = 0.0  # the usual quick group: a next timer gives up at once
            raise KeyboardInterrupt(f"on entering {name}")
        return trace

    return trace


@contextmanager
def interrupts_entering_group_commit(rnd: random.Random, chance: float) -> Iterator[None]:
    """For the block (on this thread): KeyboardInterrupt on entering a function of
    group_commit, each entry with probability ``chance`` drawn from ``rnd`` (Python unsets
    the trace once it raised)."""

    def trace(frame: FrameType, event: str, arg: object) -> Any:
        if frame.f_code.co_filename != group_commit.__file__:
            return None
        if event == "call" and rnd.random() < chance:
            raise KeyboardInterrupt
        return None

    collector.disable()  # collector off while hooked: tests/trace_interrupts.py
    sys.settrace(trace)
    try:
        yield
    finally:
        sys.settrace(None)
        collector.enable()


def _waiting_group() -> tuple[_Store, GroupCommit[str]]:
    """A recording store and a group commit on it whose first writer waits (up to the
    cap) for a second write."""
    store = _Store()
    gc = GroupCommit[str](store)
    gc._last_size, gc._last_seconds = 2, 30.0  # x waits (up to the cap) for a second write
    return store, gc


def _x_y_then_z(
    gc: GroupCommit[str],
    outcome: dict[str, str],
    one: Callable[..., None],
    *,
    y_args: tuple[Any, ...] = (),
    timeout: float = 10,
) -> None:
    """Threads named x, y, z run ``one(name)``: x queues and times the queue; y
    (``one("y", *y_args)``) completes the group of two; once both returned (or were
    joined for ``timeout`` seconds each), z commits alone. A thread still running after
    its join of ``timeout`` seconds is "HANG" in ``outcome``."""
    x = threading.Thread(target=one, args=("x",), name="x", daemon=True)
    x.start()
    _wait_for(lambda: gc._timer is not None)
    y = threading.Thread(target=one, args=("y", *y_args), name="y", daemon=True)
    y.start()
    y.join(timeout)
    x.join(timeout)
    gc._last_seconds = 0.0  # z alone: no wait for a second write
    z = threading.Thread(target=one, args=("z",), name="z", daemon=True)
    z.start()
    z.join(timeout)
    for name, t in (("x", x), ("y", y), ("z", z)):
        if t.is_alive():
            outcome[name] = "HANG"


def _group_of_two_interrupted_at(function: str) -> tuple[dict[str, str], _Store]:
    """x queues and times the queue; y completes the group of two and commits it, and
    is interrupted on entering ``function``; then z commits. Returns name -> outcome."""
    store, gc = _waiting_group()
    outcome: dict[str, str] = {}

    commit = _committer(gc, outcome)

    def one(name: str, trace: Any = None) -> None:
        if trace is not None:
            collector.disable()  # collector off while hooked: tests/trace_interrupts.py
            sys.settrace(trace)
        try:
            commit(name)
        finally:
            sys.settrace(None)
            collector.enable()

    _x_y_then_z(gc, outcome, one, y_args=(_interrupt_on_entering(function, gc),))
    return outcome, store


def _check(outcome: dict[str, str], store: _Store) -> None:
    assert "HANG" not in outcome.values(), outcome
    assert outcome["y"] == "KeyboardInterrupt", outcome
    for name, got in outcome.items():
        if got == "ok":  # told stored: it is
            assert name in store.stored, (outcome, store.calls)
        else:
            assert got in ("KeyboardInterrupt", "StoreError"), outcome
    assert sorted(store.stored) == sorted(set(store.stored))  # nothing stored twice
    assert outcome["z"] == "ok"  # the store still commits after the interrupt(s)


class TestInterruptedCommitter:
    def test_an_interrupt_on_entering_the_commit_of_a_taken_group_hangs_no_writer(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Interrupted right after taking the group, before committing it: the other
        writer and later writers still return (none sleeps on a group nobody commits)."""
        monkeypatch.setattr(group_commit, "MAX_GATHER_SECONDS", 30.0)
        _check(*_group_of_two_interrupted_at("after _take"))

    def test_an_interrupt_before_the_group_txn_tells_no_writer_stored(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Interrupted on entering the group's run, before commit_many: the other writer
        of the group is not told its write is stored before it is. Never handed to
        commit_many, it goes back to the queue and is committed by a later group (it was
        told "may or may not be stored" for a write nothing had attempted)."""
        monkeypatch.setattr(group_commit, "MAX_GATHER_SECONDS", 30.0)
        outcome, store = _group_of_two_interrupted_at("_run")
        _check(outcome, store)
        assert outcome["x"] == "ok"
        assert "y" not in store.stored  # the interrupted caller's write is withdrawn

    def test_an_interrupt_while_waking_the_group_hangs_no_writer(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Interrupted while settling or waking the group's writers after its txn: each
        still gets its outcome (x is stored and told so)."""
        monkeypatch.setattr(group_commit, "MAX_GATHER_SECONDS", 30.0)
        outcome, store = _group_of_two_interrupted_at("_signal")
        _check(outcome, store)
        assert outcome["x"] == "ok" and store.stored[:2] == ["x", "y"]


SOAK = bool(os.environ.get("CPSTORE_SOAK"))


def _refusing_store() -> tuple[Callable[[Sequence[str]], None], list[str]]:
    """A commit_many refusing (ValueError) any group holding a write ending in "!", and
    the list of what it stored."""
    stored: list[str] = []
    lock = threading.Lock()

    def commit_many(writes: Sequence[str]) -> None:
        if any(w.endswith("!") for w in writes):
            raise ValueError("refused")
        with lock:
            stored.extend(writes)

    return commit_many, stored


def _write_all(
    gc: GroupCommit[str], i: int, per: int, mine: random.Random, outcome: dict[str, str]
) -> None:
    """Writer ``i``'s ``per`` writes "i.k" (one in 10 ending in "!": refused), each
    outcome ("ok" or the exception's type) in ``outcome``."""
    for k in range(per):
        w = f"{i}.{k}" + ("!" if mine.random() < 0.1 else "")
        try:
            gc.commit(w)
            outcome[w] = "ok"
        except (ValueError, StoreError, KeyboardInterrupt) as exc:
            outcome[w] = type(exc).__name__


def _run_writers(writer: Callable[[int], None], threads: int, timeout: float) -> list[str]:
    """Run ``writer(i)`` in ``threads`` daemon threads, joining each for up to ``timeout``
    seconds in turn; those still running then, as "hang: <name>"."""
    workers = [threading.Thread(target=writer, args=(i,), daemon=True) for i in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(timeout)
    return [f"hang: {t.name}" for t in workers if t.is_alive()]


def _violations(stored: list[str], outcome: dict[str, str]) -> list[str]:
    """The contract's violations: stored twice, told stored and not stored, refused
    though not refusable."""
    problems = [f"stored twice: {w}" for w in set(stored) if stored.count(w) > 1]
    problems += [
        f"told stored, not stored: {w}" for w, v in outcome.items() if v == "ok" and w not in stored
    ]
    problems += [
        f"refused, not refusable: {w}"
        for w, v in outcome.items()
        if v == "ValueError" and not w.endswith("!")
    ]
    return problems


def _stress(seed: int, threads: int, per: int) -> list[str]:
    """``threads`` writers of ``per`` writes each, every 10th refused, KeyboardInterrupt
    raised on 2% of function entries in group_commit; returns the contract's violations."""
    rnd = random.Random(seed)
    commit_many, stored = _refusing_store()
    gc = GroupCommit[str](commit_many)
    outcome: dict[str, str] = {}

    def writer(i: int) -> None:
        mine = random.Random(rnd.random())
        with interrupts_entering_group_commit(mine, 0.02):
            _write_all(gc, i, per, mine, outcome)

    problems = _run_writers(writer, threads, 10)
    problems += _violations(stored, outcome)
    for i in range(threads):  # one thread's writes are stored in its order
        ks = [int(w.split(".")[1].rstrip("!")) for w in stored if w.startswith(f"{i}.")]
        if ks != sorted(ks):
            problems.append(f"order of thread {i}: {ks}")
    return problems


class TestInterruptStress:
    @pytest.mark.parametrize("seed", range(4))
    def test_random_interrupts_hang_no_writer_and_fake_no_success(self, seed: int) -> None:
        """6 threads x 25 writes, refused writes and interrupts on random function entries:
        every call returns, each 'stored' is stored once, each thread's order kept."""
        assert _stress(seed, 6, 25) == []

    @pytest.mark.soak
    @pytest.mark.skipif(not SOAK, reason="set CPSTORE_SOAK=1")
    def test_random_interrupts_soak(self) -> None:
        """The same for 200 seeds of 8 threads x 60 writes (CPSTORE_SOAK=1)."""
        for seed in range(200):
            assert _stress(seed, 8, 60) == [], seed


def _record_many(st: Store, run: str, steps: int, ids: dict[str, list[str]]) -> None:
    rec = st.recorder(run)
    ids[run] = [rec.checkpoint(k, {"k": k, "pad": os.urandom(1500).hex()}) for k in range(steps)]


class TestStoreGroups:
    def test_groups_that_grow_a_tiny_map_store_every_acknowledged_checkpoint(
        self, tmp_path: Path
    ) -> None:
        """Six grouping threads on a 64 KiB map: the map grows under their groups, every
        returned id is read back and each branch's history is exactly its ids."""
        with open_store(tmp_path / "s", map_size=64 * 1024) as st:
            start = st.backend.env.env.info()["map_size"]
            ids: dict[str, list[str]] = {}
            assert _run_writers(lambda i: _record_many(st, f"r{i}", 25, ids), 6, 60) == []
            assert st.backend.env.env.info()["map_size"] > start  # it did grow
            assert st.backend.group.writes > st.backend.group.groups  # and did group
            assert len(ids) == 6
            for run, got in ids.items():
                assert [m.id for m in st.history(run)] == got[::-1]
                for k, cid in enumerate(got):
                    with st.read(cid) as cp:
                        assert cp.state_part("k") == k
            assert st.verify().ok

    def test_a_child_forked_while_a_group_commits_gets_an_error_not_a_hang(
        self, tmp_path: Path
    ) -> None:
        """fork() while a parent thread holds a group in its txn: the child's checkpoint
        raises StoreError at once (it never waits on the parent's group); the parent's
        group still commits."""
        with open_store(tmp_path / "s") as st:
            rec = st.recorder("parent")
            rec.checkpoint(0, {"v": 0})
            entered, release = threading.Event(), threading.Event()
            real = st.backend.group._commit_many

            def held(ops: Sequence[Any]) -> None:
                entered.set()
                release.wait(30)
                real(ops)

            st.backend.group._commit_many = held
            done: list[str] = []
            t = threading.Thread(target=lambda: done.append(rec.checkpoint(1, {"v": 1})))
            t.start()
            assert entered.wait(30)
            raised = child_raises(lambda: st.recorder("child").checkpoint(0, {"v": 0}), StoreError)
            release.set()
            t.join(30)
            assert raised
            assert done and st.ref("parent") == done[0]


GROWING_CHILD = r"""
import os, sys, threading
from cpstore.store.facade import open as open_store
path, tag = sys.argv[1], sys.argv[2]
st = open_store(path, map_size=64 * 1024)
lock = threading.Lock()
def write(t):
    rec = st.recorder(f"{tag}-{t}")
    for step in range(100000):
        cid = rec.checkpoint(step, {"step": step, "pad": os.urandom(700).hex()})
        with lock:
            print(cid, flush=True)
for t in range(6):
    threading.Thread(target=write, args=(t,), daemon=True).start()
threading.Event().wait()
"""


class TestStoreGroupsKilled:
    def test_sigkill_of_grouping_writers_growing_the_map_loses_nothing_acknowledged(
        self, tmp_path: Path
    ) -> None:
        """Processes of six grouping threads on a tiny map (it grows mid-group), killed at
        varying points: every id a child printed (acknowledged) is stored and whole."""
        path = tmp_path / "s"
        acknowledged = killed_writers_acknowledged(
            GROWING_CHILD, path, [0.5 + 0.13 * i for i in range(4)]
        )
        with open_store(path) as st:
            assert st.verify().ok
            for cid in acknowledged:
                with st.read(cid) as cp:
                    state = cp.state()
                    assert isinstance(state, dict) and len(state["pad"]) == 1400
