"""PostgreSQL ``durability="sync"`` and ``"none"``: a signal handler's exception (a SIGTERM
handler that raises, calls ``sys.exit()`` or raises KeyboardInterrupt) landing in a
checkpoint's commit. The LMDB cases are tests/test_sync_handler_exception.py.

Real signals on a real server: the test sends SIGTERM to the main thread at a chosen point
of the commit and the handler raises there. Where it lands:

* after the COMMIT (``PgTxn.commit`` returned), or after the COMMIT's round trip but
  before the txn handed its connection back: the checkpoint is stored; the call raises
  the handler's exception, its type unchanged, a note naming the stored id, and the
  recorder follows it (its next checkpoint chains on). Before: the exception was raised
  but the checkpoint was not marked stored, the recorder kept its old head, and its next
  checkpoint failed ConflictError though nothing else had moved the branch;
* before the apply, or after it but before the COMMIT was sent: nothing is stored, the
  call raises the handler's exception, the recorder's head is unchanged and its next
  checkpoint works.

An interrupt inside psycopg's own frames while the COMMIT is on the wire (stored or not,
as the server decided) is swept last: the recorder follows exactly when the store holds
its checkpoint.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import pytest
from handler_signals import HOW, arm, raised_by, sigterm_restored
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures
from trace_interrupts import in_psycopg, interrupting

import cpstore
from cpstore.store.facade import Store
from cpstore.store.lmdb_backend import Durability
from cpstore.store.pg_backend import PgBackend
from cpstore.store.pg_txn import PgTxn
from cpstore.store.recorder import Recorder

_MODES: list[Durability] = ["sync", "none"]
#: The psycopg entries swept: every one under CPSTORE_SOAK, else every third.
STRIDE = 1 if os.environ.get("CPSTORE_SOAK") else 3


@pytest.fixture
def handled() -> Iterator[list[threading.Event]]:
    """The SIGTERM handler put back after the test."""
    with sigterm_restored() as events:
        yield events


def _term_main_and_run_it() -> None:
    """SIGTERM to the main thread (this one); its handler runs at a bytecode of the loop."""
    main = threading.main_thread().ident
    assert main is not None and threading.current_thread() is threading.main_thread()
    signal.pthread_kill(main, signal.SIGTERM)
    for _ in range(100_000):  # the handler raises here, long before the loop ends
        pass
    raise AssertionError("the SIGTERM handler never ran")


def _once(fn: Callable[[], None]) -> Callable[[], bool]:
    """A trigger that fires ``fn`` the first time it is asked, on the main thread only."""
    armed = [True]

    def fire() -> bool:
        if armed[0] and threading.current_thread() is threading.main_thread():
            armed[0] = False
            fn()
            return True
        return False

    return fire


def _after_the_commit(monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGTERM handled right after the next write txn's ``commit()`` returned."""
    fire = _once(_term_main_and_run_it)
    real = PgTxn.commit

    def commit(self: PgTxn) -> None:
        real(self)
        if self.write:
            fire()

    monkeypatch.setattr(PgTxn, "commit", commit)


def _after_the_commits_round_trip(monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGTERM handled once the next write txn's COMMIT came back, before the txn ended
    (its connection not yet handed back: the abort then closes it)."""
    fire = _once(_term_main_and_run_it)
    real = PgTxn._finish

    def finish(self: PgTxn, *, broken: bool) -> None:
        if self.write and self._wire and not broken:  # commit()'s success path only
            fire()
        real(self, broken=broken)

    monkeypatch.setattr(PgTxn, "_finish", finish)


def _before_the_commit(monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGTERM handled once the next write txn was applied, before its COMMIT was sent."""
    fire = _once(_term_main_and_run_it)
    real = PgTxn.commit

    def commit(self: PgTxn) -> None:
        if self.write:
            fire()
        real(self)

    monkeypatch.setattr(PgTxn, "commit", commit)


def _before_the_apply(monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGTERM handled as the next checkpoint's apply begins (its txn wrote nothing)."""
    fire = _once(_term_main_and_run_it)
    real = PgBackend._apply_all

    def apply_all(self: PgBackend, txn: Any, ops: Any) -> None:
        fire()
        real(self, txn, ops)

    monkeypatch.setattr(PgBackend, "_apply_all", apply_all)


def _checkpoint_1_raises(
    st: Store,
    how: str,
    handled: list[threading.Event],
    monkeypatch: pytest.MonkeyPatch,
    where: Callable[[pytest.MonkeyPatch], None],
) -> tuple[Recorder, str, BaseException]:
    """Branch m's checkpoint 0, then its checkpoint 1 with SIGTERM handled ``where`` says,
    the handler armed ``how``: the call raised the handler's own exception, its type
    unchanged. The recorder, checkpoint 0's id and that exception; the commits after it
    run unpatched."""
    rec = st.recorder("m")
    first = rec.checkpoint(0, {"m": 0})
    ran = arm(how, handled)
    where(monkeypatch)
    with pytest.raises(raised_by(how)) as raised:
        rec.checkpoint(1, {"m": 1})
    monkeypatch.undo()  # the next commits run unpatched
    assert ran.is_set()
    assert type(raised.value) is raised_by(how)  # the handler's own exception
    return rec, first, raised.value


_STORED = {"after-commit": _after_the_commit, "after-round-trip": _after_the_commits_round_trip}
_NOT_STORED = {"before-apply": _before_the_apply, "before-commit": _before_the_commit}


@pytest.fixture(params=_MODES)
def st(pg_url: str, request: pytest.FixtureRequest) -> Iterator[Store]:  # noqa: F811
    """The cluster's store opened with each durability of ``_MODES``, closed after."""
    store = cpstore.open(pg_url, durability=request.param)
    try:
        yield store
    finally:
        store.close()


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("where", list(_STORED))
def test_a_handlers_exception_after_the_commit_is_raised_and_the_recorder_follows(
    st: Store, how: str, where: str, handled: list[threading.Event], monkeypatch: pytest.MonkeyPatch
) -> None:
    rec, first, raised = _checkpoint_1_raises(st, how, handled, monkeypatch, _STORED[where])
    head = st.ref("m")
    assert head is not None and head != first  # stored
    followed = rec.head == head  # the recorder follows its stored checkpoint
    nxt = rec.checkpoint(2, {"m": 2})  # before: ConflictError
    assert followed
    assert [m.id for m in st.history("m")] == [nxt, head, first]
    assert [m.step for m in st.history("m")] == [2, 1, 0]
    assert any(head in note for note in getattr(raised, "__notes__", []))


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("where", list(_NOT_STORED))
def test_a_handlers_exception_before_the_commit_stores_nothing_and_the_recorder_stays(
    st: Store, how: str, where: str, handled: list[threading.Event], monkeypatch: pytest.MonkeyPatch
) -> None:
    rec, first, raised = _checkpoint_1_raises(st, how, handled, monkeypatch, _NOT_STORED[where])
    assert not getattr(raised, "__notes__", [])  # never said stored
    assert st.ref("m") == first  # not stored
    assert rec.head == first  # the recorder stays where it was
    nxt = rec.checkpoint(1, {"m": 1})
    assert [m.id for m in st.history("m")] == [nxt, first]


def _trace_the_next_commit(monkeypatch: pytest.MonkeyPatch, trace: Callable[..., Any]) -> None:
    """The next write txn's ``commit()`` on the main thread runs under ``sys.settrace(trace)``."""
    armed = [True]
    real = PgTxn.commit

    def commit(self: PgTxn) -> None:
        if not (armed[0] and self.write and threading.current_thread() is threading.main_thread()):
            real(self)
            return
        armed[0] = False
        gc.disable()  # collector off while hooked: tests/trace_interrupts.py
        sys.settrace(trace)
        try:
            real(self)
        finally:
            sys.settrace(None)
            gc.enable()

    monkeypatch.setattr(PgTxn, "commit", commit)


def _interrupt_in_the_commit(monkeypatch: pytest.MonkeyPatch, k: int) -> list[str]:
    """KeyboardInterrupt on the k-th function entry with psycopg on the stack inside the
    next write txn's ``commit()`` (the statements and COMMIT in one pipeline, its reply,
    the connection handed back); where it landed (empty: the commit ran through)."""
    trace, landed = interrupting(k, in_psycopg)
    _trace_the_next_commit(monkeypatch, trace)
    return landed


@pytest.mark.parametrize("mode", _MODES)
def test_an_interrupt_anywhere_in_the_commits_round_trip_leaves_the_recorder_on_the_store(
    pg_url: str,  # noqa: F811 - the fixture
    mode: Durability,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every ``STRIDE``-th psycopg function entry of the COMMIT's round trip: the call
    raises KeyboardInterrupt, and the recorder's head is the branch's head whichever way
    the server decided (followed when stored, kept when not); its next checkpoint
    chains on. Before: stored, it was not followed, and the next one failed ConflictError."""
    st = cpstore.open(pg_url, durability=mode)
    problems: list[str] = []
    stored_n = kept_n = swallowed_n = 0
    try:
        rec = st.recorder("m")
        rec.checkpoint(0, {"m": 0})
        step = 1
        for k in range(1, 10_000, STRIDE):
            before = st.ref("m")
            landed = _interrupt_in_the_commit(monkeypatch, k)
            raised: BaseException | None = None
            try:
                rec.checkpoint(step, {"m": step})
            except KeyboardInterrupt as exc:
                raised = exc
            monkeypatch.undo()
            step += 1
            if not landed:
                break  # the commit ran through: every entry was tried
            if raised is None:  # psycopg's error took its place (fixed: see below)
                swallowed_n += 1
                problems.append(f"k={k} {landed}: the interrupt was swallowed")
            head = st.ref("m")
            stored_n += head != before
            kept_n += head == before
            if rec.head != head:
                problems.append(f"k={k} {landed}: recorder at {rec.head}, branch at {head}")
                rec = st.recorder("m")  # go on with the sweep
            try:
                rec.checkpoint(step, {"m": step})
            except cpstore.CpstoreError as exc:
                problems.append(f"k={k} {landed}: next checkpoint {exc!r}"[:300])
                rec = st.recorder("m")
            step += 1
        else:
            pytest.fail("the commit never ran through")
    finally:
        st.close()
    print(f"interrupts landed: {stored_n} stored, {kept_n} not stored, {swallowed_n} swallowed")
    assert not problems, problems[:10]
    assert stored_n and kept_n  # both sides of the COMMIT were reached


def _interrupt_entering(monkeypatch: pytest.MonkeyPatch, name: str) -> list[str]:
    """KeyboardInterrupt on the first entry of a psycopg function called ``name`` inside
    the next write txn's ``commit()``; where it landed."""
    landed: list[str] = []

    def trace(frame: FrameType, event: str, arg: object) -> Any:
        if event == "call" and frame.f_code.co_name == name and in_psycopg(frame):
            landed.append(name)
            raise KeyboardInterrupt(name)
        return None

    _trace_the_next_commit(monkeypatch, trace)
    return landed


def test_an_interrupt_waiting_for_the_commits_reply_israised_by(
    pg_url: str,  # noqa: F811 - the fixture
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    st = cpstore.open(pg_url, durability="sync")
    try:
        rec = st.recorder("m")
        rec.checkpoint(0, {"m": 0})
        landed = _interrupt_entering(monkeypatch, "_exit_gen")  # the pipeline's end
        raised: BaseException | None = None
        try:
            rec.checkpoint(1, {"m": 1})
        except KeyboardInterrupt as exc:
            raised = exc
        monkeypatch.undo()
        assert landed == ["_exit_gen"]
        assert rec.head == st.ref("m")  # holds either way: the recorder is on the store
        # Before: psycopg's OperationalError took its place, read as a lost COMMIT found
        # stored, and the call returned (the interrupt swallowed).
        assert isinstance(raised, KeyboardInterrupt)
    finally:
        st.close()
