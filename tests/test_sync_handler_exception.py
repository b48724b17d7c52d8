"""``durability="sync"``: a signal handler's exception (a SIGTERM handler that raises, calls
``sys.exit()`` or raises KeyboardInterrupt) landing in a checkpoint's commit (LMDB).

Real signals: the test sends SIGTERM to the main thread at a chosen point of the commit
(while its txn is applied, or just after LMDB's commit returned) and the handler raises.

Before (docs/durability.md, audit42's "not fixed"):

- after the commit, a handler's exception of class Exception (a watchdog's TimeoutError)
  was swallowed: the commit was settled by reading it back, as a commit that reported an
  error is, found stored, and the call returned;
- after the commit, ``sys.exit()`` / KeyboardInterrupt was raised, but every other thread
  of the group was told "may or may not be stored" for a stored checkpoint, and the
  recorder whose call raised did not follow its stored checkpoint: its next checkpoint
  failed ConflictError;
- while a group of several threads was applied, a handler's TimeoutError failed the group
  txn, which was committed again one checkpoint per txn: the leader's own checkpoint was
  stored and the exception swallowed; ``sys.exit()`` there told the other threads "may or
  may not be stored" though nothing of theirs was written;
- a handler's exception landing in a thread that waited for a group another thread
  committed was raised at once, and its recorder never followed its stored checkpoint.

The same holds for ``durability="none"`` and a sync checkpoint committed alone inside a
read view; and batched mode's recorder now follows a stored checkpoint whose call raised
the handler's exception, as sync mode's does.
"""

from __future__ import annotations

import random
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from handler_signals import HOW, arm, raised_by, sigterm_restored
from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures
from test_group_commit_audit import _run_writers, _violations, interrupts_entering_group_commit

import cpstore
from cpstore.store import group_commit
from cpstore.store.facade import Store
from cpstore.store.group_commit import GroupCommit
from cpstore.store.lmdb_backend import LmdbBackend
from cpstore.store.lmdb_txns import EnvTxns
from cpstore.store.model import CheckpointWrite
from cpstore.store.pg_txn import PgTxn


@pytest.fixture
def handled() -> Iterator[list[threading.Event]]:
    """The SIGTERM handler put back after the test."""
    with sigterm_restored() as events:
        yield events


def _term_main() -> None:
    """SIGTERM to the main thread (its handler runs there, at its next bytecode)."""
    main = threading.main_thread().ident
    assert main is not None
    signal.pthread_kill(main, signal.SIGTERM)


def _after_the_commit(
    monkeypatch: pytest.MonkeyPatch, when: Callable[[], bool], then: Callable[[], None]
) -> None:
    """The next write txn for which ``when()`` holds: ``then()`` right after LMDB's commit
    (env.write's ``finally``, the write lock still held)."""
    armed = [True]
    real = EnvTxns._drop_unused_txns

    def drop(self: Any) -> None:
        real(self)
        if armed[0] and sys._getframe(1).f_code.co_name == "write" and when():
            armed[0] = False
            then()

    monkeypatch.setattr(EnvTxns, "_drop_unused_txns", drop)


def _while_applied(monkeypatch: pytest.MonkeyPatch, when: Callable[[], bool]) -> None:
    """The next apply for which ``when()`` holds: SIGTERM to itself, handled inside it."""
    armed = [True]
    real = LmdbBackend._apply

    def apply(self: Any, txn: Any, ops: Sequence[CheckpointWrite]) -> None:
        if armed[0] and when():
            armed[0] = False
            group = self.group
            group._last_size = 1  # what goes back to the queue is taken at once
            _term_main()
            for _ in range(1000):  # the handler runs here, before the txn is written
                pass
        real(self, txn, ops)

    monkeypatch.setattr(LmdbBackend, "_apply", apply)


def _on_main() -> bool:
    return threading.current_thread() is threading.main_thread()


def _group_of(st: Store, size: int, monkeypatch: pytest.MonkeyPatch) -> GroupCommit[Any]:
    """The store's group commit set to take its queue once it holds ``size`` writes, by
    the thread whose write completes it (the first waits up to 30 s, never that long)."""
    backend = st._backend
    assert isinstance(backend, LmdbBackend)
    monkeypatch.setattr(group_commit, "MAX_GATHER_SECONDS", 30.0)
    gc = backend.group
    gc._last_size, gc._last_seconds = size, 30.0
    return gc


def _until(cond: Callable[[], bool]) -> None:
    done = threading.Event()
    for _ in range(6000):
        if cond():
            return
        done.wait(0.01)
    raise AssertionError("never happened")


class _Workers:
    """Threads that each checkpoint step 0 of their own branch once, and what they got."""

    def __init__(self, st: Store, names: Sequence[str], after: int = 0) -> None:
        self.got: dict[str, str | BaseException] = {}
        self.threads = [
            threading.Thread(target=self._run, args=(st, name, after)) for name in names
        ]

    def _run(self, st: Store, name: str, after: int) -> None:
        gc = st._backend.group  # type: ignore[union-attr]
        _until(lambda: len(gc._queue) >= after)
        try:
            self.got[name] = st.recorder(name).checkpoint(0, {name: 0})
        except BaseException as exc:  # what it was told is the point
            self.got[name] = exc

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def join(self) -> None:
        for t in self.threads:
            t.join(60)
            assert not t.is_alive()


def _chains_on(st: Store, rec: Any, branch: str) -> None:
    """The recorder follows what the store holds: its next checkpoint extends it."""
    st._backend.group._last_size = 1  # type: ignore[union-attr]  # a lone writer: no gather
    head = st.ref(branch)
    assert rec.head == head
    nxt = rec.checkpoint(1, {"next": 1})
    assert st.ref(branch) == nxt
    assert [m.step for m in st.history(branch)] == ([1, 0] if head is not None else [1])


def _main_completes_a_group(
    st: Store, names: Sequence[str], monkeypatch: pytest.MonkeyPatch
) -> tuple[GroupCommit[Any], _Workers]:
    """A group of ``len(names) + 1`` that the main thread's next write completes and so
    commits: a worker thread per name has queued its checkpoint."""
    gc = _group_of(st, len(names) + 1, monkeypatch)
    workers = _Workers(st, names)
    workers.start()
    _until(lambda: len(gc._queue) == len(names))
    return gc, workers


def _main_raises(st: Store, how: str, ran: threading.Event, workers: _Workers) -> Any:
    """The main thread's checkpoint 0 of branch m raises the handler's exception (armed
    ``how``, its handler ran); the workers have ended. Its recorder."""
    rec = st.recorder("m")
    with pytest.raises(raised_by(how)):
        rec.checkpoint(0, {"m": 0})
    workers.join()
    assert ran.is_set()
    return rec


@pytest.fixture
def st(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    """A sync store, closed after the test (before its monkeypatches are undone)."""
    store = cpstore.open(str(tmp_path / "s"), durability="sync")
    try:
        yield store
    finally:
        store.close()


@pytest.mark.parametrize("how", HOW)
def test_the_leaders_handler_exception_after_the_groups_commit(
    st: Store, how: str, handled: list[threading.Event], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The main thread leads a group of three; SIGTERM right after its commit. Its call
    raises the handler's exception; all three checkpoints are stored, and each thread is
    told so (the main thread's recorder follows its own)."""
    gc, workers = _main_completes_a_group(st, ["a", "b"], monkeypatch)
    ran = arm(how, handled)
    _after_the_commit(monkeypatch, _on_main, _term_main)
    rec = _main_raises(st, how, ran, workers)
    assert gc.groups == 1 and gc.writes == 3  # one group txn: its writes not retried
    assert workers.got == {"a": st.ref("a"), "b": st.ref("b")}, workers.got
    assert st.ref("m") is not None
    _chains_on(st, rec, "m")


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("where", ["alone", "in-a-read-view", "none"])
def test_a_lone_writers_handler_exception_after_the_commit(
    tmp_path: Path,
    how: str,
    where: str,
    handled: list[threading.Event],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One writer: a group of one; with a read txn open, as inside a ``store.read()`` view
    (it commits without the group); or ``durability="none"``. Its call raises the
    handler's exception and its recorder follows the stored checkpoint."""
    reading = where == "in-a-read-view"
    st = cpstore.open(str(tmp_path / "s"), durability="none" if where == "none" else "sync")
    try:
        rec = st.recorder("m")
        first = rec.checkpoint(0, {"m": 0})
        ran = arm(how, handled)
        _after_the_commit(monkeypatch, _on_main, _term_main)
        with pytest.raises(raised_by(how)):
            if reading:
                with st._backend.read_txn():  # what a store.read() view holds
                    rec.checkpoint(1, {"m": 1})
            else:
                rec.checkpoint(1, {"m": 1})
        assert ran.is_set()
        head = st.ref("m")
        assert head is not None and head != first
        assert rec.head == head
        nxt = rec.checkpoint(2, {"m": 2})
        assert [m.id for m in st.history("m")] == [nxt, head, first]
    finally:
        st.close()


@pytest.mark.parametrize("how", HOW)
def test_the_leaders_handler_exception_while_the_group_is_applied(
    st: Store, how: str, handled: list[threading.Event], monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM while the main thread's group of three is applied (before its commit): its
    call raises the handler's exception and its checkpoint is not stored; the other two
    are stored (committed without it), and their threads are told so."""
    _, workers = _main_completes_a_group(st, ["a", "b"], monkeypatch)
    ran = arm(how, handled)
    _while_applied(monkeypatch, _on_main)
    rec = _main_raises(st, how, ran, workers)
    assert st.ref("m") is None
    assert workers.got == {"a": st.ref("a"), "b": st.ref("b")}, workers.got
    assert st.ref("a") is not None and st.ref("b") is not None
    _chains_on(st, rec, "m")


@pytest.mark.parametrize("how", HOW)
def test_a_waiters_handler_exception_while_another_thread_commits_its_group(
    st: Store, how: str, handled: list[threading.Event], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The main thread's checkpoint waits in a group of two that thread W leads; SIGTERM
    reaches the main thread just after W's commit. The main thread's call raises the
    handler's exception once its checkpoint is settled stored, and its recorder follows."""
    gc = _group_of(st, 2, monkeypatch)
    workers = _Workers(st, ["w"], after=1)  # queues once the main thread's write did
    ran = arm(how, handled)

    def term_and_wait() -> None:  # W, after its commit: the handler runs in main first
        _term_main()
        ran.wait(60)

    _after_the_commit(monkeypatch, lambda: not _on_main(), term_and_wait)
    workers.start()
    rec = _main_raises(st, how, ran, workers)
    assert gc.groups == 1 and gc.writes == 2
    assert workers.got == {"w": st.ref("w")}, workers.got
    assert st.ref("m") is not None
    _chains_on(st, rec, "m")


@pytest.mark.parametrize("how", HOW)
def test_batched_a_checkpoint_whose_flush_commits_then_raises_is_followed(
    url: str, how: str, handled: list[threading.Event], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batched mode behaves as sync (both backends): checkpoint(1) fills the batch, its
    flush commits and SIGTERM lands; the call raises the handler's exception and its
    recorder follows the stored checkpoint. Before: it did not (docs said so), and its
    next checkpoint's flush failed ConflictError, dropping that batch."""
    st = cpstore.open(url, durability="batched", batch_size=2)
    try:
        rec = st.recorder("m")
        first = rec.checkpoint(0, {"m": 0})
        ran = arm(how, handled)
        _after_the_commit(monkeypatch, _on_main, _term_main)
        armed = [True]
        real_commit = PgTxn.commit

        def commit(self: Any) -> None:
            real_commit(self)
            if armed[0] and _on_main():
                armed[0] = False
                _term_main()

        monkeypatch.setattr(PgTxn, "commit", commit)
        with pytest.raises(raised_by(how)) as raised:
            rec.checkpoint(1, {"m": 1})
        assert ran.is_set()
        head = st.ref("m")
        assert head is not None and head != first
        assert rec.head == head
        assert any(head in note for note in getattr(raised.value, "__notes__", []))
        nxt = rec.checkpoint(2, {"m": 2})
        st.flush()
        assert [m.id for m in st.history("m")] == [nxt, head, first]
    finally:
        st.close()


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("at", [2, 4], ids=["after-a", "after-its-own"])
def test_the_leaders_handler_exception_while_its_group_commits_one_write_per_txn(
    st: Store,
    how: str,
    at: int,
    handled: list[threading.Event],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A group [a, c, m] whose txn fails (c's branch moved: ConflictError) is committed
    again one write per txn by the main thread; SIGTERM lands just after a's txn, or
    after m's own. The main thread's call raises the handler's exception, its checkpoint
    stored and followed when its txn ran (else not stored); a is stored and told so, c
    gets its ConflictError (never the handler's exception; after a's, c goes back to the
    queue and fails in its next group)."""
    stale = st.recorder("c")  # expects no head
    st.recorder("c").checkpoint(0, {"other": 0})  # another writer moves the branch
    gc = _group_of(st, 3, monkeypatch)
    got: dict[str, str | BaseException] = {}

    def one(name: str, rec: Any) -> None:
        try:
            got[name] = rec.checkpoint(1, {name: 1})
        except BaseException as exc:  # what it was told is the point
            got[name] = exc

    a = threading.Thread(target=one, args=("a", st.recorder("a")))
    a.start()
    _until(lambda: len(gc._queue) == 1)
    c = threading.Thread(target=one, args=("c", stale))
    c.start()
    _until(lambda: len(gc._queue) == 2)
    ran = arm(how, handled)
    txns = [0]

    def mine() -> bool:  # the main thread's txns: the group's, then a's, c's, its own
        txns[0] += _on_main()
        if txns[0] == at:
            gc._last_size = 1  # what goes back to the queue is taken at once
        return txns[0] == at

    rec = st.recorder("m")
    _after_the_commit(monkeypatch, mine, _term_main)
    with pytest.raises(raised_by(how)):
        rec.checkpoint(0, {"m": 0})
    a.join(60)
    c.join(60)
    assert ran.is_set() and txns[0] == at
    assert got["a"] == st.ref("a") and st.ref("a") is not None
    assert isinstance(got["c"], cpstore.ConflictError), got
    assert (st.ref("m") is not None) == (at == 4)
    _chains_on(st, rec, "m")


class _StrReadback:
    """group_commit.Readback of a list-backed store: a group landed when all its writes
    are stored, not when none is; KeyboardInterrupt and TimeoutError are a handler's."""

    def __init__(self, stored: list[str]) -> None:
        self._stored = stored
        self.told: list[str] = []

    def foreign(self, exc: BaseException) -> bool:
        return isinstance(exc, (KeyboardInterrupt, TimeoutError))

    def landed(self, writes: Sequence[str]) -> bool | None:
        got = [w in self._stored for w in writes]
        return True if all(got) else False if not any(got) else None

    def stored(self, write: str) -> None:
        self.told.append(write)


def _handler_stress(seed: int, threads: int, per: int) -> list[str]:
    """Writers of a GroupCommit[str] whose commit_many raises a handler's exception before
    or after storing (2% each) and refuses groups with a write ending in "!"; interrupts
    also land on 1% of the entries into group_commit's functions. Returns the contract's
    violations: a hang, "stored" (returned, or told through Readback.stored) for a write
    not stored, a write stored twice, a thread's writes stored out of its order."""
    rnd = random.Random(seed)
    stored: list[str] = []
    lock = threading.Lock()
    chance = random.Random(rnd.random())

    def commit_many(writes: Sequence[str]) -> None:
        if chance.random() < 0.02:
            raise TimeoutError("before")
        if any(w.endswith("!") for w in writes):
            raise ValueError("refused")
        with lock:
            stored.extend(writes)
        if chance.random() < 0.02:
            raise KeyboardInterrupt("after") if chance.random() < 0.5 else TimeoutError("after")

    readback = _StrReadback(stored)
    gc = GroupCommit[str](commit_many, readback)
    outcome: dict[str, str] = {}

    def writer(i: int) -> None:
        mine = random.Random(rnd.random())
        with interrupts_entering_group_commit(mine, 0.01):
            for k in range(per):
                w = f"{i}.{k}" + ("!" if mine.random() < 0.1 else "")
                try:
                    gc.commit(w)
                    outcome[w] = "ok"
                except (ValueError, TimeoutError, cpstore.StoreError, KeyboardInterrupt) as exc:
                    outcome[w] = type(exc).__name__

    problems = _run_writers(writer, threads, 30)
    problems += _violations(stored, outcome)
    problems += [f"told stored, not stored: {w}" for w in readback.told if w not in stored]
    problems += [
        f"refused, stored: {w}" for w, v in outcome.items() if v == "ValueError" and w in stored
    ]
    problems += [  # the handler's exception alone: its write is stored exactly when told so
        f"handler's exception, told {w in readback.told}, stored {w in stored}: {w}"
        for w, v in outcome.items()
        if v == "TimeoutError" and (w in stored) != (w in readback.told)
    ]
    for i in range(threads):
        ks = [int(w.split(".")[1].rstrip("!")) for w in stored if w.startswith(f"{i}.")]
        if ks != sorted(ks):
            problems.append(f"order of thread {i}: {ks}")
    return problems


@pytest.mark.parametrize("seed", range(4))
def test_handler_exceptions_and_interrupts_anywhere_hang_no_writer_and_fake_no_success(
    seed: int,
) -> None:
    """6 threads x 25 writes; handler exceptions before and after the commit, refused
    groups, interrupts on entering group_commit's functions: every call returns, each
    write told stored is stored once, each thread's writes in its order."""
    assert _handler_stress(seed, 6, 25) == []
