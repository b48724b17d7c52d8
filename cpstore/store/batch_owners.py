"""Batched mode's queue owners: who queued each write; what another thread's commit dropped.

A batched handle has one queue for every thread of the process, and a flush
commits all of it. Without this, thread B's ``flush()`` found the queue empty
(thread A's flush had taken B's checkpoints) and returned at once: before A's
commit was durable, and even when A's commit failed and dropped B's
checkpoints, so B acknowledged checkpoints the store never held. Now a
flush returns only once every write its thread queued is settled, and raises
when another thread's failed commit dropped one of them (docs/durability.md,
"batched").
"""

from __future__ import annotations

import threading
import time
from _thread import LockType
from collections import Counter
from collections.abc import Callable
from contextlib import suppress
from threading import get_ident
from typing import Generic, TypeVar

from cpstore.errors import ConflictError, CpstoreError, OutcomeUnknownError
from cpstore.store.at_exit import ExitGate
from cpstore.store.batch_fates import dropped_error, foreign, not_stored
from cpstore.store.reentry import reentrant_write

__all__ = ["BatchOwners", "Owner"]

W = TypeVar("W")
#: ``head(run_id, branch)``: that branch's head checkpoint id, read in the taking write txn.
Head = Callable[[str, str], "bytes | None"]

#: Seconds between looks at ``BatchOwners.blocked`` while a flush waits.
_POLL = 0.05
#: A close's wait for other threads' commits once the main thread has ended (as
#: at_exit.EXIT_WAIT, and the environment's close wait, lmdb_txns.CLOSE_WAIT_SECONDS).
_EXIT_WAIT = 5.0


class Owner:
    """One thread, as long as it lives. Not its ident: the OS hands a dead thread's ident to
    the next thread it starts, which was then handed the dead thread's drop error (a false
    "not stored") or made to wait for its writes (issue batchdoubt-2)."""

    __slots__ = ("name",)

    def __init__(self) -> None:
        self.name = threading.current_thread().name


class BatchOwners(Generic[W]):
    """The owners of queued and in-flight writes; what each thread is owed.

    Interrupt-safe where CPython lands one (entering a Python function, a loop's back
    edge, after a C call): the lock is taken and left through ``RLock``'s own C methods
    (``Condition.__exit__`` is a Python function: an interrupt entering it left the lock
    held and every other thread's flush waiting for ever), and each change of state is one
    store at the end of the method, after every step that can be interrupted, so a batch
    is either wholly in flight or not, settled or not (batchdoubt-4).
    """

    def __init__(self, where: str) -> None:
        self._where = where
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)  # waits only; entered by ``_lock``
        self._local = threading.local()  # this thread's Owner: a new thread gets a new one
        self._owner: dict[int, Owner] = {}  # id(op) -> its thread, while queued or in flight
        self._dropped: dict[Owner, CpstoreError] = {}
        #: id(owners list) -> (that list, its batch), while a commit of it is under way.
        self._flying: dict[int, tuple[list[Owner], list[W]]] = {}
        #: id(owners list) -> the ident of the thread committing it (a flush re-entered on
        #: that thread, from a signal handler, must not wait for itself).
        self._committer: dict[int, int] = {}
        #: Owners whose writes an interrupted flush put back on the queue (:meth:`requeued`):
        #: their own flush commits them (:meth:`wait_mine` returns True).
        self._again: set[Owner] = set()
        #: Ids of checkpoints a settled batch dropped, not stored, and of queued ones taken off
        #: for extending one; ``_doubt``: those a batch whose outcome is unknown held. A
        #: queued checkpoint whose ``expected_ref`` is one of them has its compare-and-set
        #: simulated at the next take, and is taken off when it cannot succeed (:meth:`_cut`,
        #: inflight102).
        self._gone: set[bytes] = set()
        self._doubt: set[bytes] = set()
        self.exit_wait: float | None = None  # set by the exit flush: it never hangs
        self.gate: ExitGate | None = None  # the exit flush's: a take of nothing leaves it
        #: The backend's "the commit this thread waits for waits on this thread" (LMDB: a
        #: map growth waiting for this thread's open read view); the wait raises instead.
        self.blocked: Callable[[], bool] | None = None

    def me(self) -> Owner:
        """The calling thread's :class:`Owner` (made on its first call)."""
        owner: Owner | None = getattr(self._local, "owner", None)
        if owner is None:
            owner = self._local.owner = Owner()
        return owner

    def act_as(self, owner: Owner) -> None:
        """Make the calling thread ``owner`` (the exit flush's worker acts for the exiting
        thread: its drops are that thread's own, named by the exit warning, never owed)."""
        self._local.owner = owner

    def queued(self, op: W) -> None:
        """Note that this thread queued ``op`` (call under the queue's lock, after queuing
        it: interrupted before, the op is the flusher's, never a stale entry's)."""
        me = self.me()
        with self._lock:
            self._owner[id(op)] = me

    def take(
        self,
        pending: list[W],
        lock: threading.Lock,
        owners: list[Owner],
        batch: list[W],
        head: Head | None = None,
    ) -> tuple[int, ...]:
        """:meth:`taken` under the queue's ``lock`` (the caller holds the writer lock) once the
        batches in flight have settled, waited for at most ``_POLL`` s: most settle at once
        (else an empty txn and a wait: 90 of 240 flushes of 4 PostgreSQL threads). Not longer:
        a read back waits for the writer lock (the caller lets it go, then :meth:`wait_mine`).
        Polled by sleeps: an interrupt in ``Condition.wait`` was RuntimeError (audit53)."""
        deadline = time.monotonic() + _POLL
        while self._flying and time.monotonic() < deadline:  # a read: no lock needed
            time.sleep(0.002)
        with lock:
            behind = self.taken(pending, owners, batch, head)
        if behind and self.gate is not None:
            self.gate.leave()  # nothing taken: the exit may give up on the next txn's lock
        return behind

    def taken(
        self, pending: list[W], owners: list[Owner], batch: list[W], head: Head | None = None
    ) -> tuple[int, ...]:
        """Move the queue ``pending`` into ``batch`` and its owners into ``owners`` (both
        empty lists the caller made; call under the queue's lock and the writer lock): in
        flight until :meth:`settled` is given ``owners``. Interrupted anywhere, the queue is
        whole and nothing is in flight, or all of it is in flight and the caller's
        ``finally`` settles it: the four stores at the end have no point where an interrupt
        lands.

        Nothing is taken while another batch is in flight: under the writer lock, its txn
        has ended and its fate is not settled yet (an interrupt in or after its commit
        reads the store back, then requeues it in front of the queue). Taken, what was
        queued after it committed first: a checkpoint extending one of it failed
        ConflictError and was dropped, though acknowledged as queued (audit44). The keys
        of those batches are returned, for :meth:`wait_mine` once the caller's txn has
        ended (the read-back waits for the writer lock); the caller then flushes again.
        Queued checkpoints extending one a failed batch dropped are taken off (:meth:`_cut`;
        ``head(run, branch)`` reads a branch's head in the caller's txn)."""
        me = self.me()
        key = id(owners)
        with self._lock:
            if self._flying:
                return tuple(self._flying)
            ops = self._cut(pending[:], head) if self._gone or self._doubt else pending[:]
            got = [self._owner.get(id(op), me) for op in ops]
            owners[:] = got
            batch[:] = ops
            self._committer[key] = get_ident()
            self._flying[key] = (owners, batch)
            del pending[:]
        return ()

    def settled(self, owners: list[Owner], exc: BaseException | None) -> None:
        """A taken batch committed (``exc`` None) or was dropped: wake the threads waiting on it.

        Idempotent, and its one change that counts (the batch leaves the flight) comes last:
        a caller interrupted in it calls it again, which finishes it (else the threads
        waiting on the batch waited forever: audit20)."""
        me = self.me()
        key = id(owners)
        with self._lock:
            flying = self._flying.get(key)
            if flying is None:
                return  # settled already: a call again after an interrupt changes nothing
            # Still in flight with an exception, the batch is never committed again: a
            # requeued one (an interrupt before its txn wrote) has left the flight. Its own
            # failure: not stored, or its outcome unknown, which the recorder settles by
            # reading its head (review101). A foreign one (an interrupt, a handler's) whose
            # read-back could not tell is marked too: its recorder went on from a head that
            # may not be stored (inflight102); its txn has ended, so the head read is exact.
            for op in flying[1]:
                self._owner.pop(id(op), None)
                if exc is None or getattr(op, "committed", False):
                    continue
                marks = getattr(op, "dropped", None)  # CheckpointWrite.dropped: its recorder's
                if marks is not None:
                    marks.append(exc)  # that recorder refuses to extend it (hunt100)
                cid = getattr(op, "cid", None)
                if cid is not None:  # what extends it is taken off the queue (_cut)
                    (self._gone if not_stored(exc) else self._doubt).add(bytes(cid))
            if exc is not None:
                for t, n in Counter(t for t in owners if t is not me).items():
                    self._dropped[t] = dropped_error(exc, n, self._where)
            self._committer.pop(key, None)
            del self._flying[key]
            self._cond.notify_all()  # interrupted here, the waiters see it on their next poll

    def _cut(self, ops: list[W], head: Head | None) -> list[W]:
        """``ops`` (the queue, under its lock and this lock) but those whose compare-and-set
        cannot succeed because they extend a checkpoint a failed batch dropped: queued while
        that batch was in flight, each one failed the next batch, and every other recorder's
        checkpoint in it was dropped with it (inflight102). Only an op whose
        ``expected_ref`` is in :attr:`_gone` or :attr:`_doubt` is looked at, and its CAS is
        simulated: the branch head ``head`` reads in the taking txn (under the writer lock:
        exact), or the id of the last op kept on that branch in this batch. Equal, it is
        kept (the dropped batch landed, or a retry stored the same content-addressed id:
        cut by the id alone, every later checkpoint on the branch was refused); else it is
        taken off, in a chain too (C3 on C2 on the dropped C1), and told to its recorder
        (it refuses after) and its thread (its flush raises; a note when it is owed an error
        already). Without ``head``: taken off when in :attr:`_gone`, kept when in doubt.
        Every read comes first: one that raises (a lost connection, a damaged ref) leaves
        the queue, the marks and the sets as they were. Interrupted after, the queue is
        untouched and the next take cuts again (idempotent but for a repeated mark or note,
        and the thread told: the taking one, for an op whose owner entry this call had
        already popped)."""
        me, gone, doubt = self.me(), self._gone, self._doubt
        kept: list[W] = []
        dead: set[bytes] = set()  # the ids taken off in this walk (of ``off``)
        off: list[W] = []
        found: list[bytes] = []  # on the head after all: forgotten
        moved: dict[tuple[str, str], bytes] = {}  # branch -> the last op kept on it here
        for op in ops:
            parent = getattr(op, "expected_ref", None)
            ref = (getattr(op, "run_id", ""), getattr(op, "branch", ""))
            if parent in gone or parent in doubt or parent in dead:
                if parent in dead or head is None:
                    stays = parent not in dead and parent not in gone
                else:
                    stays = (moved[ref] if ref in moved else head(*ref)) == parent
                if not stays:
                    dead.add(bytes(getattr(op, "cid", b"")))
                    off.append(op)
                    continue
                found.append(parent)  # the head: stored, or kept before it here
            kept.append(op)
            moved[ref] = bytes(getattr(op, "cid", b""))
        gone.difference_update(found)
        doubt.difference_update(found)
        gone.update(dead)
        cut: dict[Owner, list[W]] = {}
        for op in off:
            marks = getattr(op, "dropped", None)
            if marks is not None:
                marks.append(_extends_gone(op, 1))
            cut.setdefault(self._owner.pop(id(op), me), []).append(op)
        for owner, mine in cut.items():
            err = _extends_gone(mine[0], len(mine))
            owed = self._dropped.get(owner)
            if owed is None:
                self._dropped[owner] = err
            else:
                owed.add_note(f"cpstore: also {err}")
        return kept

    def requeued(self, owners: list[Owner], batch: list[W], pending: list[W]) -> None:
        """A taken batch whose txn wrote nothing (its flush was interrupted while applying
        it: a KeyboardInterrupt, a signal handler's ``sys.exit()``) goes back to the head of
        the queue ``pending`` (call under the queue's lock), before what was queued since,
        with its owners: the next flush, or the exit flush, commits it (it was dropped:
        complete checkpoints the exit flush promises to commit were lost without a word).
        Every other owner's flush commits it again itself (:meth:`wait_mine`). Interrupted
        before its last store, the caller's fallback :meth:`settled` drops the flight: its
        other owners are told "may or may not", and the batch is queued all the same."""
        me = self.me()
        key = id(owners)
        skip = getattr(self._local, "withdraw", None)  # this thread's commit() op (flush_for)
        with self._lock:
            if key not in self._flying:
                return
            back = [(op, t) for op, t in zip(batch, owners, strict=True) if op is not skip]
            for op, t in back:
                self._owner[id(op)] = t
            if len(back) < len(batch):  # left out: no longer queued or in flight
                self._owner.pop(id(skip), None)
            self._again.update(t for _, t in back if t is not me)
            ops = [op for op, _ in back]
            # The one step that is not idempotent, the queue's, and the flight's end: two
            # stores with no landing point between (no call). A call between them (the
            # committer's pop) let a second interrupt land after the batch was queued
            # again and before it left the flight: the flush's fallback requeued it a
            # second time, and the next flush failed ConflictError on the copies and
            # dropped the whole queue (audit44).
            pending[:0] = ops
            del self._flying[key]
            self._committer.pop(key, None)
            self._cond.notify_all()

    def applying(
        self,
        apply: Callable[[], None],
        taken: tuple[list[Owner], list[W]],
        queue: tuple[list[W], threading.Lock],
        engine: tuple[type[BaseException], ...] = (),
    ) -> None:
        """``apply()`` of a taken batch, in its write txn. A :func:`foreign` exception (not
        ``engine``'s: LMDB grows a full map and applies again) requeues the batch here,
        under the writer lock: requeued once the txn had ended, another thread's flush
        could take what was queued since and commit it first, and a checkpoint extending
        one of the batch failed ConflictError though no other writer moved the branch
        (audit42). The flush's own requeue is then a no-op (:meth:`requeued`)."""
        try:
            apply()
        except BaseException as exc:
            if foreign(exc) and not isinstance(exc, engine):
                with queue[1]:
                    self.requeued(*taken, queue[0])
            raise

    def flush_for(
        self, flush: Callable[[], None], op: W, pending: list[W], lock: threading.Lock
    ) -> None:
        """``flush()`` for a commit() whose ``op`` filled the batch. Raising with ``op``
        queued again (an interrupt requeued the batch), ``op`` leaves the queue: its call
        raised, so its recorder never follows it, and committed later it made the
        recorder's next checkpoint conflict, which dropped that whole batch (audit42). It
        is left out of the requeue itself (:meth:`requeued`): put back, another thread's
        flush could commit it as soon as the txn ended; taken off here only as a fallback."""
        self._local.withdraw = op
        try:
            flush()
        except BaseException:
            with lock:
                at = next((i for i, queued in enumerate(pending) if queued is op), None)
                if at is not None:
                    del pending[at]
                    with self._lock:
                        self._owner.pop(id(op), None)
            raise
        finally:
            self._local.withdraw = None

    def drain(self, flush: Callable[[], None], pending: list[W]) -> None:
        """A close's flush: ``flush()``, then until no batch of any thread is in flight and
        nothing is queued (``pending``): else a close on thread C let the main thread's
        interrupted flush requeue into the closed handle, lost unsaid (audit44). A
        ``flush()`` that raises waits too, then raises (audit47; the caller keeps the handle
        open when something is queued again); not when interrupted itself (a second Ctrl-C
        would be needed to leave a long commit). Once the main thread has ended, the wait
        for this thread's writes in another thread's commit is bounded (audit48)."""
        try:  # set inside: an interrupt before the try never leaves it set (Reentry.run)
            self._local.bound = self._bound()
            try:
                flush()
            except BaseException as exc:
                if not foreign(exc):
                    with suppress(OutcomeUnknownError):  # the flush's own error is raised
                        self._landed_all(self._deadline())
                raise
            deadline = self._deadline()
            while True:
                self._landed_all(deadline)
                if not pending:
                    return
                flush()  # requeued by another thread's interrupted flush
        finally:
            self._local.bound = None

    def wait_closed(self, done: LockType) -> None:
        """A second close's wait for the close another thread has under way (``done``, a
        lock that close holds until it ends); raises instead of waiting when a map growth
        waits for this thread's open read view: that close waits for the growth's commit
        (:meth:`drain`), which waits for this thread. The three waited on each other for
        ever: a close inside ``store.read()`` while another thread's close waited for a
        third thread's growing flush (audit47)."""
        while True:
            # Taken and given back with no point between where an interrupt (a signal
            # handler's exception) lands (map calls acquire, the loop's step and the
            # release's call follow with no call between): one landing while it was held
            # here left every other waiter waiting for good.
            for got in map(done.acquire, (True,), (_POLL,)):
                if got:
                    done.release()
                    return
            if self.blocked is not None and self.blocked():
                raise OutcomeUnknownError(
                    "another thread's close waits for a batch commit that grows the map and "
                    "waits for this thread's open read view to end; this close cannot wait "
                    "for it",
                    where=self._where,
                    expected="no open store.read() in a thread that closes the store",
                )

    def after_other_close(self, closed: Callable[[], bool], close: Callable[[], None]) -> None:
        """A second close, once the close it waited for (another thread's) has ended: when
        that one kept the handle open (an interrupt requeued its batch), ``close()`` again
        here, which commits the queue (it returned with this thread's checkpoints queued,
        told durable); else raise what this thread is owed (its checkpoints another
        thread's failed commit dropped: alone, its close's flush raised it; here it returned
        ok) or, its checkpoints still in a commit the close stopped waiting for, that they
        may or may not be stored (audit48)."""
        if not closed():
            close()
            return
        me = self.me()
        with self._lock:
            err = self._dropped.pop(me, None)
            if err is None and self._mine_in_flight(me):
                err = OutcomeUnknownError(
                    "checkpoints this thread queued are in another thread's batch commit, "
                    "still under way when the store closed; they may or may not be stored",
                    where=self._where,
                )
        if err is not None:
            raise err

    def _deadline(self) -> float | None:
        """When :meth:`drain` stops waiting: never, but at exit (as wait_mine), which is also
        once the main thread has ended (threading's shutdown: an atexit close run before
        the exit flush, a non-daemon thread's close the interpreter waits for). Unbounded
        there, a close waiting on a commit that never ends (a daemon's growth waiting on a
        daemon's read) kept the process from exiting; before audit44 it gave up after 5 s
        (audit47)."""
        bound = self._bound()
        return None if bound is None else time.monotonic() + bound

    def _bound(self) -> float | None:
        """Seconds a close waits for other threads' commits (:meth:`_deadline`); None: no end."""
        bound = self.exit_wait
        if bound is None and not threading.main_thread().is_alive():
            bound = _EXIT_WAIT
        return bound

    def _landed_all(self, deadline: float | None) -> None:
        """:meth:`drain`'s wait until no batch of any thread is in flight."""
        with self._lock:
            while self._flying:
                if self.blocked is not None and self.blocked():
                    raise OutcomeUnknownError(
                        "another thread's batch commit grows the map and waits for this "
                        "thread's open read view to end; the close cannot wait for it",
                        where=self._where,
                        expected="no open store.read() in a thread that closes the store",
                    )
                if deadline is not None and time.monotonic() >= deadline:
                    raise OutcomeUnknownError(
                        "another thread's batch commit is still under way at exit (or the "
                        "main thread has ended); "
                        "what it holds may or may not be stored",
                        where=self._where,
                    )
                self._wait(_POLL)

    def _mine_in_flight(self, me: Owner) -> bool:
        return any(me in owners for owners, _ in self._flying.values())

    def _wait(self, timeout: float) -> None:
        """``_cond.wait`` (the lock held once), the lock held again whatever lands in it (an
        interrupt as its ``_release_save`` returned: RuntimeError in its place, audit53)."""
        try:
            self._cond.wait(timeout)
        finally:
            if not self._lock._is_owned():  # type: ignore[attr-defined]
                self._lock.acquire()

    def wait_mine(self, behind: tuple[int, ...] = ()) -> bool:
        """Block until no write of this thread is in a commit under way, nor the batches
        ``behind`` names (:meth:`taken` took nothing because of them); raise if one of
        this thread's writes was lost; True when an interrupted flush put this thread's
        writes back on the queue, or ``behind`` names any (the caller flushes again).

        A flush re-entered on the thread committing a batch with this thread's writes (a
        signal handler's, inside that commit) raises ReentrantWriteError: it waited for
        itself for ever. Never waits on a commit that waits on this thread (``blocked``): a
        flush inside ``store.read()`` while another thread's commit of this thread's writes
        grows the map, which waits for that read to end, raises OutcomeUnknownError.
        """
        me = self.me()
        bound = self.exit_wait
        if bound is None:  # a close's drain once the main thread has ended (drain)
            bound = getattr(self._local, "bound", None)
        deadline = None if bound is None else time.monotonic() + bound
        with self._lock:
            while self._mine_in_flight(me) or any(key in self._flying for key in behind):
                if self._committing_here(me, behind):
                    raise reentrant_write(self._where)
                if self.blocked is not None and self.blocked():
                    raise OutcomeUnknownError(
                        "checkpoints this thread queued are in (or behind) another thread's "
                        "batch commit, which grows the map and waits for this thread's open read "
                        "view to end; they may or may not be stored (read the branch heads)",
                        where=self._where,
                        expected="no open store.read() in a thread that flushes while the "
                        "map grows",
                    )
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise OutcomeUnknownError(
                        "checkpoints this thread queued are still in another thread's batch "
                        "commit at exit, or queued behind it; they may or may not be stored",
                        where=self._where,
                    )
                self._wait(_POLL if left is None else min(left, _POLL))
            err = self._dropped.pop(me, None)
            again = me in self._again or bool(behind)
            self._again.discard(me)
        if err is not None:
            raise err
        return again

    def _committing_here(self, me: Owner, behind: tuple[int, ...] = ()) -> bool:
        here = get_ident()
        return any(
            self._committer.get(key) == here and (me in owners or key in behind)
            for key, (owners, _) in self._flying.items()
        )

    def flying(self) -> list[W]:
        """The writes in commits under way (any thread's)."""
        with self._lock:
            return [op for _, ops in self._flying.values() for op in ops]

    def wait_all(self) -> None:
        """At exit: block (at most ``exit_wait``) until no commit is under way; raise when one
        is still under way, or dropped writes of a thread that was never told.

        The main thread's exit flush finds the queue empty when a daemon thread's flush
        (a background flusher) took it; the interpreter then ended that commit half-way
        and the checkpoints were lost without a word (audit20).
        """
        with self._lock:
            if not self._cond.wait_for(lambda: not self._flying, self.exit_wait):
                raise OutcomeUnknownError(
                    f"{sum(len(ops) for _, ops in self._flying.values())} checkpoint(s) are "
                    "still in a batch commit of another thread at exit; they may or may not "
                    "be stored",
                    where=self._where,
                )
            dropped, self._dropped = list(self._dropped.values()), {}
        if dropped:
            raise dropped[0]


def _extends_gone(op: object, count: int) -> ConflictError:
    """The error of ``count`` queued checkpoints (``op`` the first) taken off the queue for
    extending one a failed batch dropped (:meth:`BatchOwners._cut`). At refs/RUN/BRANCH,
    as the compare-and-set's failure it replaces (the chaos checker reads it)."""
    run, branch = getattr(op, "run_id", "?"), getattr(op, "branch", "?")
    parent = getattr(op, "expected_ref", None)
    return ConflictError(
        f"{count} checkpoint(s) this thread queued extend a checkpoint a failed batch commit "
        "dropped (not stored, or not known to be): taken off the queue, not stored, so that "
        "they fail no later batch; their recorder refuses its next checkpoint (open a new "
        "recorder on the branch)",
        where=f"refs/{run}/{branch}",
        expected=None if not isinstance(parent, bytes) else parent.hex(),
        got=bytes(getattr(op, "cid", b"")).hex(),
    )
