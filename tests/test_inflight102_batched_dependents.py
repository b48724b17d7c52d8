"""inflight102: two holes hunt100 and review101 left in the batched recorder.

1. A checkpoint queued while the batch holding its parent is IN FLIGHT (taken by another
   thread's flush, not yet settled) extends that parent; the batch then fails and drops
   the parent, and the queued checkpoint's compare-and-set failed the NEXT batch, which
   was dropped whole, a bystander recorder's checkpoint with it. Now the next flush takes
   such a checkpoint off the queue (ConflictError "not stored", told to its thread and its
   recorder, which refuses after) and commits the rest.
2. A handler's exception (or an interrupt) landing in a flush once the batch was applied,
   the read-back unable to tell whether it landed: the batch is not queued again (only one
   whose txn wrote nothing is), yet its recorders went on from a checkpoint that may not be
   stored, and the next batch failed ConflictError with a bystander's checkpoint. Now such a
   batch's recorders read their branch's head at their next checkpoint (review101's check):
   not their head, they refuse; their head (it landed), they go on.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures

import cpstore
from cpstore.errors import (
    ConflictError,
    CpstoreError,
    OutcomeUnknownError,
    StoreError,
    StoreFullError,
)
from cpstore.store import lmdb_backend, pg_backend
from cpstore.store.batch_owners import BatchOwners, Owner
from cpstore.store.commit import apply_writes
from cpstore.store.content import tail_committed
from cpstore.store.lmdb_backend import LmdbBackend
from cpstore.store.pg_backend import PgBackend

_WAIT = 60.0


def _move_elsewhere(store: str, run: str) -> None:
    """Another process commits a checkpoint on ``run``: a batch holding one there conflicts."""
    code = (
        f"import cpstore\nwith cpstore.open({store!r}) as s:\n"
        f"    s.recorder({run!r}).checkpoint(9, {{'other': 1}})\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def _stored(st: cpstore.Store, cid: str) -> bool:
    try:
        st.manifest(cid)
    except CpstoreError:
        return False
    return True


def _held_apply(
    real: Callable[..., None], taken: threading.Event, go: threading.Event
) -> Callable[..., None]:
    """``real`` (a batch's apply), first held between the take and the commit until ``go``."""
    first = [True]

    def apply(*args: Any, **kwargs: Any) -> None:
        if first[0]:
            first[0] = False
            taken.set()
            if not go.wait(_WAIT):
                raise TimeoutError("the test never let the held flush go")
        real(*args, **kwargs)

    return apply


@contextmanager
def _flush_held(
    st: cpstore.Store, m: pytest.MonkeyPatch, real: Callable[..., None] = apply_writes
) -> Iterator[list[BaseException]]:
    """A flush of ``st`` on another thread, held between its take and its commit (its apply:
    ``real`` on LMDB, the backend's own on PostgreSQL) for the block; let go and joined at
    its end. Yields the list the flush's error, if any, lands in."""
    taken, go = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def flusher() -> None:
        try:
            st.flush()
        except BaseException as exc:
            errors.append(exc)

    m.setattr(lmdb_backend, "apply_writes", _held_apply(real, taken, go))
    m.setattr(PgBackend, "_apply_all", _held_apply(PgBackend._apply_all, taken, go))
    t = threading.Thread(target=flusher)
    t.start()
    try:
        assert taken.wait(_WAIT), "the flusher never took the batch"
        yield errors
    finally:
        go.set()
        t.join(_WAIT)
    assert not t.is_alive()


def check_queued_while_in_flight(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with cpstore.open(url, durability="batched", batch_size=1000) as st:
        rec = st.recorder("a")
        first = rec.checkpoint(0, {"a": 0})
        st.flush()
        lost = rec.checkpoint(1, {"a": 1})  # C1, in the batch that fails
        bystander = st.recorder("bystander")
        _move_elsewhere(url, "a")  # the held batch's compare-and-set on refs/a/main fails
        with monkeypatch.context() as m, _flush_held(st, m) as errors:
            # C1's batch is in flight: C2 extends it, the bystander's checkpoint is innocent.
            dependent = rec.checkpoint(2, {"a": 2})
            innocent = bystander.checkpoint(0, {"b": 0})
        assert len(errors) == 1 and isinstance(errors[0], ConflictError)  # C1's batch
        with pytest.raises(ConflictError, match="not stored") as told:
            st.flush()  # C2 taken off the queue; dropped the bystander's checkpoint before
        said = "\n".join([str(told.value), *getattr(told.value, "__notes__", [])])
        assert "refs/a/main" in said and "taken off the queue" in said  # C1's, then C2's
        assert st.ref("bystander") == innocent
        assert not _stored(st, lost) and not _stored(st, dependent)
        with pytest.raises(ConflictError, match="not stored"):
            rec.checkpoint(3, {"a": 3})  # its head C2 is not stored: refused, nothing queued
        assert st.pending == 0
        again = st.recorder("a")
        assert again.head == st.ref("a") != first  # the other process's checkpoint
        nxt = again.checkpoint(10, {"a": 10})  # the other process's is step 9
        st.flush()
        assert st.ref("a") == nxt
        assert st.verify().ok


def test_a_checkpoint_queued_on_one_in_flight_that_is_dropped_spares_the_next_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    check_queued_while_in_flight(str(tmp_path / "s"), monkeypatch)


def test_a_checkpoint_queued_on_one_in_flight_that_is_dropped_on_postgres(
    pg_url: str,  # noqa: F811 - the fixture
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    check_queued_while_in_flight(pg_url, monkeypatch)


def test_a_chain_queued_in_flight_is_taken_off_whole_and_other_threads_are_told(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """C2 and C3 (on C2) queued by another thread while C1's batch is in flight: both are
    taken off by the main thread's flush, which commits its own checkpoint; the queuing
    thread's flush raises "not stored"; C1's recorder refuses."""
    url = str(tmp_path / "s")
    with cpstore.open(url, durability="batched", batch_size=1000) as st:
        rec = st.recorder("a")
        rec.checkpoint(0, {"a": 0})
        st.flush()
        rec.checkpoint(1, {"a": 1})
        mine = st.recorder("mine")
        _move_elsewhere(url, "a")
        queued, told = threading.Event(), threading.Event()
        errors: dict[str, BaseException] = {}

        def writer() -> None:
            rec.checkpoint(2, {"a": 2})
            rec.checkpoint(3, {"a": 3})
            queued.set()
            if not told.wait(_WAIT):
                return
            try:
                st.flush()
            except BaseException as exc:
                errors["writer"] = exc

        with monkeypatch.context() as m, _flush_held(st, m) as flushed:
            w = threading.Thread(target=writer)
            w.start()
            assert queued.wait(_WAIT)
        own = mine.checkpoint(0, {"m": 0})
        with pytest.raises(ConflictError, match="not stored"):  # C1, this thread's, only
            st.flush()  # takes C2, C3 off (the writer thread's), commits ``own``
        told.set()
        w.join(_WAIT)
        assert not w.is_alive()
        assert len(flushed) == 1 and isinstance(flushed[0], ConflictError)
        assert isinstance(errors.get("writer"), ConflictError)
        assert "2 checkpoint(s)" in str(errors["writer"])
        assert st.ref("mine") == own
        with pytest.raises(ConflictError, match="not stored"):
            rec.checkpoint(4, {"a": 4})
        assert st.verify().ok


class _HandlerError(Exception):
    """A signal handler's exception (a watchdog's), not cpstore's: foreign to the batch."""


def _after_apply(real: Callable[..., Any], landed: bool) -> Callable[..., Any]:
    """``write_txn`` whose batch apply is followed by a handler's exception: in the txn
    (nothing committed) or, ``landed``, once it committed."""

    def write_txn(self: Any, fn: Callable[[Any], Any]) -> Any:
        def then_raise(txn: Any) -> Any:
            got = fn(txn)
            if not landed:
                raise _HandlerError("a watchdog fired once the batch was applied")
            return got

        got = real(self, then_raise)
        if landed:
            raise _HandlerError("a watchdog fired once the batch committed")
        return got

    return write_txn


def check_untold_handler_exception(
    url: str, monkeypatch: pytest.MonkeyPatch, backend: type[Any], landed: bool
) -> None:
    with cpstore.open(url, durability="batched", batch_size=1000) as st:
        rec = st.recorder("a")
        first = rec.checkpoint(0, {"a": 0})
        st.flush()
        head = rec.checkpoint(1, {"a": 1})
        with monkeypatch.context() as m:
            m.setattr(backend, "write_txn", _after_apply(backend.write_txn, landed))
            cannot_tell: Callable[..., None] = lambda *args: None  # noqa: E731
            m.setattr(lmdb_backend, "interrupted", cannot_tell)
            m.setattr(pg_backend, "interrupted", cannot_tell)
            with pytest.raises(_HandlerError):
                st.flush()
        assert st.pending == 0  # applied: never queued again
        bystander = st.recorder("b").checkpoint(0, {"b": 0})
        if landed:
            assert st.ref("a") == head
            nxt = rec.checkpoint(2, {"a": 2})  # its head is stored: it goes on
            st.flush()
            assert st.ref("a") == nxt and st.manifest(nxt).parent == head
        else:
            assert st.ref("a") == first
            with pytest.raises(ConflictError, match="not stored") as refused:
                rec.checkpoint(2, {"a": 2})  # went on before, and failed the next batch
            assert head in str(refused.value)
            st.flush()
        assert st.ref("b") == bystander
        assert st.verify().ok


@pytest.mark.parametrize("landed", [False, True], ids=["not-landed", "landed"])
def test_a_handler_exception_in_a_flush_that_cannot_be_told_makes_the_recorder_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, landed: bool
) -> None:
    check_untold_handler_exception(str(tmp_path / "s"), monkeypatch, LmdbBackend, landed)


@pytest.mark.parametrize("landed", [False, True], ids=["not-landed", "landed"])
def test_a_handler_exception_in_a_flush_that_cannot_be_told_on_postgres(
    pg_url: str,  # noqa: F811 - the fixture
    monkeypatch: pytest.MonkeyPatch,
    landed: bool,
) -> None:
    check_untold_handler_exception(pg_url, monkeypatch, PgBackend, landed)


def _unknown(*args: Any, **kwargs: Any) -> None:
    raise OutcomeUnknownError("injected: the batch may or may not be stored")


@pytest.mark.parametrize("landed", [False, True], ids=["not-landed", "landed"])
def test_a_checkpoint_queued_on_one_in_flight_whose_outcome_is_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, landed: bool
) -> None:
    """The held batch fails with its outcome unknown: the next flush reads C1's branch head
    in its own txn, under the writer lock. C1 not the head (never landed): C2 is taken off
    and the bystander's checkpoint commits; C1 the head (landed after all): C2 is kept and
    commits with it (taken off, it would be a refusal of a checkpoint that commits)."""

    def after(*args: Any) -> None:
        tail_committed(*args)
        raise OutcomeUnknownError("injected after the commit")

    def unsettled(backend: Any, batch: Any, exc: BaseException) -> None:
        raise exc  # not read back: may or may not be stored

    with cpstore.open(str(tmp_path / "s"), durability="batched", batch_size=1000) as st:
        rec = st.recorder("a")
        first = rec.checkpoint(0, {"a": 0})
        st.flush()
        head = rec.checkpoint(1, {"a": 1})
        bystander = st.recorder("bystander")
        with monkeypatch.context() as m:
            m.setattr(lmdb_backend, "tail_committed", after)
            m.setattr(lmdb_backend, "commit_failed", unsettled)
            with _flush_held(st, m, apply_writes if landed else _unknown) as errors:
                dependent = rec.checkpoint(2, {"a": 2})
                innocent = bystander.checkpoint(0, {"b": 0})
        assert len(errors) == 1 and isinstance(errors[0], OutcomeUnknownError)
        with pytest.raises(OutcomeUnknownError):  # C1's fate, owed to this thread
            st.flush()
        assert st.ref("bystander") == innocent
        if landed:
            assert st.ref("a") == dependent and st.manifest(dependent).parent == head
            nxt = rec.checkpoint(3, {"a": 3})
            st.flush()
            assert st.ref("a") == nxt
        else:
            assert st.ref("a") == first and not _stored(st, dependent)
            with pytest.raises(ConflictError, match="not stored"):
                rec.checkpoint(3, {"a": 3})
        assert st.verify().ok


def _full(*args: Any, **kwargs: Any) -> None:
    raise StoreFullError("injected: the map is full")


@pytest.mark.parametrize("together", [True, False], ids=["same-batch", "own-batches"])
def test_a_retry_that_writes_the_dropped_checkpoint_again_is_not_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, together: bool
) -> None:
    """A new recorder on the branch retries the dropped step with the same state: its
    checkpoint has the dropped one's id (content-addressed), and the next one extends that
    id. Cut by the id alone, every later checkpoint on the branch was refused, reopened or
    not (a control for the cut: it must simulate the compare-and-set, never guess)."""
    with cpstore.open(str(tmp_path / "s"), durability="batched", batch_size=1000) as st:
        rec = st.recorder("a")
        first = rec.checkpoint(0, {"a": 0})
        st.flush()
        lost = rec.checkpoint(1, {"a": 1})
        with monkeypatch.context() as m:
            m.setattr(lmdb_backend, "apply_writes", _full)
            with pytest.raises(StoreFullError):
                st.flush()
        assert st.ref("a") == first
        again = st.recorder("a")
        assert again.checkpoint(1, {"a": 1}) == lost  # the same id, stored this time
        if not together:
            st.flush()
            assert st.ref("a") == lost
        nxt = again.checkpoint(2, {"a": 2})
        st.flush()
        assert st.ref("a") == nxt and st.manifest(nxt).parent == lost
        last = again.checkpoint(3, {"a": 3})
        st.flush()
        assert st.ref("a") == last
        assert st.verify().ok


def _op(cid: bytes, parent: bytes | None, run: str = "a") -> SimpleNamespace:
    return SimpleNamespace(
        cid=cid, expected_ref=parent, run_id=run, branch="main", dropped=[], committed=False
    )


def test_the_cut_reads_before_it_changes_anything_and_never_loses_a_duplicate() -> None:
    """BatchOwners alone: a head read that raises leaves the queue and every mark as they
    were; two queued ops with the same id that cannot succeed are both taken off and told
    (keyed by id, one of them left the queue untold)."""
    owners: BatchOwners[SimpleNamespace] = BatchOwners("test")
    c0, c1, c2 = b"0" * 16, b"1" * 16, b"2" * 16
    who: list[Owner] = []
    flying: list[SimpleNamespace] = []
    first = _op(c1, c0)
    assert owners.taken([first], who, flying) == ()
    owners.settled(who, StoreFullError("injected"))  # c1 dropped, not stored
    assert first.dropped
    dependent, twin, bystander = _op(c2, c1), _op(c2, c1), _op(b"b" * 16, None, "b")
    late = _op(b"3" * 16, c1, "x")  # its branch's head read fails, after the others' reads
    queue = [dependent, twin, late, bystander]

    def unreadable(run: str, branch: str) -> bytes | None:
        if run == "x":
            raise StoreError("injected: the head cannot be read")
        return c0

    with pytest.raises(StoreError):
        owners.taken(queue, [], [], unreadable)
    assert queue == [dependent, twin, late, bystander]
    assert not dependent.dropped and not twin.dropped  # marked, then kept queued: refused
    batch: list[SimpleNamespace] = []
    last: list[Owner] = []
    assert owners.taken(queue, last, batch, lambda run, branch: c0) == ()
    assert batch == [bystander] and queue == []
    assert dependent.dropped and twin.dropped and late.dropped
    owners.settled(last, None)  # the bystander's batch committed
    with pytest.raises(ConflictError, match="3 checkpoint"):
        owners.wait_mine()
