"""Group commit: the checkpoint writes of several threads in one durable txn.

In ``durability="sync"`` every checkpoint is fsynced before its call returns,
and the fsync, not the CPU, bounds how many a store takes per second. When
several threads of one process commit at once, their writes queue, and one of
the writing threads takes the whole queue and commits it in one txn (one
fsync); the others wait. Every caller still returns only after its own write
is committed and fsynced, so nothing is acknowledged earlier than without
grouping.

Who commits a group: while no group is committing, the queue is taken as soon
as it holds as many writes as the last group saw (its own writes and those that
queued while it committed), by the thread whose write completes it (no other
thread is woken for it); the first thread to queue waits at most as long as the
last group took (:data:`MAX_GATHER_SECONDS` at most) and then takes what queued.
Writes that queue while a group commits are handed on when it ends: its first
waiting writer is woken to take or time the next group. Each waiting thread
sleeps on a lock of its own, released exactly when there is something for it
to do (its outcome is final, or it is first in the queue), never on a shared
condition that wakes every waiter on each arrival: under the GIL every
needless wake-up is a thread switch between the writers that are preparing
the next group.

A write that fails inside a group (a ref conflict, a pruned parent) must fail
alone: when the group txn raises, it is rolled back whole and each of its
writes is committed again in a txn of its own, in queue order, so each caller
gets exactly the result it would have had committing alone (the second of two
writes racing for one branch gets its ``ConflictError``; the first is stored).
A commit that reports an error may have committed all the same: ``commit_many``
settles that itself (it returns when the store shows the txn committed, raises
its error when it shows it did not) or raises :class:`OutcomeUnknownError`, which
every writer of the group gets as it is (committed again, each write would
conflict with its own stored result).

Interrupts (KeyboardInterrupt, any number, wherever they land): the interrupted
caller re-raises; what its thread was to do for the others (commit or end a
group it took, time the queue) is done by its handlers, and what a second
interrupt stops them doing is done by the waiting writers, which also wake every
:data:`POLL_SECONDS` and finish the part of a writer that left its call
(:meth:`GroupCommit._rescue`). Nobody waits forever, and nobody is told "stored"
for a write whose outcome nobody settled.

A signal handler's exception (a SIGTERM handler's ``sys.exit()``, a watchdog's
TimeoutError: :meth:`Readback.foreign`) is an interrupt too, never the group's own
failure: it is raised in its thread, never settled onto the others nor a reason to
commit the group again one write per txn. What its group's run left unsettled is
settled by reading the store back (:class:`Readback`): stored; not written (another
thread's write goes back to the queue for the next group); or "may or may not". A
waiting thread it lands in raises it once its group settled its write, and a write
stored under a raising call is told to the store (``Readback.stored``: its recorder
follows it). Outside the main thread, where no signal handler runs, such an exception of
class Exception whose txn the store shows wrote nothing is the writes' own failure (a bug
in one write's apply fails that write alone: :meth:`_foreign`); written or cannot tell,
it is raised as a handler's is (never swallowed).
Before, a handler's exception was swallowed when it landed after the commit (settled
by reading back as a failed commit), and told the others "may or may not" for a stored
group.

It knows nothing of LMDB: ``commit_many`` is any function that applies a list
of writes in one durable txn (all or nothing). Processes are not grouped:
LMDB has one writer at a time across processes, and each process's group
commits under it in turn (docs/durability.md, "Group commit").
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Generic, Protocol, TypeVar

from cpstore.errors import OutcomeUnknownError, StoreError

__all__ = ["GroupCommit", "Readback"]

W = TypeVar("W")
W_contra = TypeVar("W_contra", contravariant=True)

#: The longest the first queued writer waits for the writers of the last group to queue again.
MAX_GATHER_SECONDS = 0.002

#: How often a waiting writer looks whether a writer it waits on left its call without
#: finishing its part (:meth:`GroupCommit._rescue`).
POLL_SECONDS = 0.5

_monotonic = time.monotonic


class Readback(Protocol[W_contra]):
    """What the store tells a group whose commit a signal handler's exception interrupted."""

    def foreign(self, exc: BaseException) -> bool:
        """Whether ``exc``, raised by ``commit_many``, is not the writes' own failure (a
        signal handler's exception, an interrupt): raised to its thread, never settled as
        every write's outcome nor taken as a reason to commit them one per txn."""

    def landed(self, writes: Sequence[W_contra]) -> bool | None:
        """Whether the store shows the one txn of ``writes`` committed (None: cannot tell)."""

    def stored(self, write: W_contra) -> None:
        """``write`` is stored, and its caller gets an exception all the same."""


class _Slot(Generic[W]):
    """One caller's write, its outcome once its group ran, and its thread's wake-up."""

    __slots__ = ("done", "error", "inside", "signalled", "wake", "write")

    def __init__(self, write: W) -> None:
        self.write = write
        self.done = False
        self.error: BaseException | None = None
        # Held from the start: its thread sleeps in wake.acquire() until another
        # thread releases it (under GroupCommit._mutex, at most once per sleep).
        self.wake = threading.Lock()
        self.wake.acquire()
        self.signalled = False
        # Held by its thread while it is in GroupCommit.commit (a with block:
        # released however it leaves): how the others tell it left (_rescue).
        self.inside = threading.Lock()


class GroupCommit(Generic[W]):
    """A queue of writes in front of a one-txn ``commit_many``, committed by the writers."""

    def __init__(
        self, commit_many: Callable[[Sequence[W]], None], readback: Readback[W] | None = None
    ) -> None:
        self._commit_many = commit_many
        # Reads the store after a handler's exception in a group's commit (None: every
        # write whose outcome nobody settled may or may not be stored).
        self._readback = readback
        self._mutex = threading.Lock()
        self._queue: list[_Slot[W]] = []
        #: True from a group being taken until its outcomes are settled.
        self._committing = False
        # The group being committed (what its _end checks it ends), or None; the
        # slot of the thread that took it, and whether it was handed to commit_many.
        self._group: list[_Slot[W]] | None = None
        self._owner: _Slot[W] | None = None
        self._handed = False
        # Whether the group taken is being committed one write per txn (its txn failed).
        self._alone = False
        # The queued slot whose thread waits with a deadline for the queue to
        # fill (None: nobody times the queue yet), and that deadline.
        self._timer: _Slot[W] | None = None
        self._deadline = 0.0
        # How many writers the last group saw (its writes and those that queued
        # while it committed) and how long it took: the queue waits (at most that
        # long) for as many, see _next().
        self._last_size = 1
        self._last_seconds = 0.0
        #: Txns committed and writes they carried (what the tests and benchmarks read).
        self.groups = 0
        self.writes = 0

    def commit(self, write: W) -> None:
        """Commit ``write`` durably, grouped with the writes of other threads; raise its error."""
        slot = _Slot(write)
        try:
            with slot.inside:
                self._commit(slot)
        except BaseException:
            # A signal handler's exception (or an interrupt) raised once its write is
            # stored: its caller is told so (a recorder follows it), then gets the exception.
            if slot.done and slot.error is None and self._readback is not None:
                self._readback.stored(write)
            raise

    def _commit(self, slot: _Slot[W]) -> None:
        taken: list[_Slot[W]] | None = None
        try:
            with self._mutex:
                self._queue.append(slot)
                taken, timeout = self._next(slot)
            while taken is None:
                # Woken when there is something to do, and every POLL_SECONDS to look
                # whether a writer left the others waiting on it (a second interrupt).
                polled = timeout is None or timeout > POLL_SECONDS
                wait = POLL_SECONDS if timeout is None or polled else max(timeout, 0.0)
                got = slot.wake.acquire(timeout=wait)
                with self._mutex:
                    if got:
                        slot.signalled = False
                    elif polled:
                        self._rescue()
                    if slot.done:
                        break
                    taken, timeout = self._next(slot)
        except BaseException:
            # Interrupted (KeyboardInterrupt, a signal handler's exception) before this
            # write's group ran: withdraw it, so it is not stored behind its caller's back,
            # and hand on whatever this thread was to do for the others. Already in a group
            # another thread commits: raised once that group settles it.
            if self._abandon(slot, taken):
                self._await(slot)
            raise
        if taken is None:
            return _outcome(slot)
        # Commit the group taken, wake each other writer to its outcome and hand
        # the queue on. Inline, not a method: an interrupt lands on entering a
        # function, and one entered between taking the group and this try left
        # it taken with nobody committing it (every writer slept for good).
        started: float | None = None
        try:
            now = _monotonic()
            self._run(taken)
            started = now
        finally:
            try:
                self._end(taken, slot, started)
            except BaseException:
                self._end(taken, slot, started)  # interrupted half-way: all again, then raise
                raise
        return _outcome(slot)

    def _next(self, slot: _Slot[W]) -> tuple[list[_Slot[W]] | None, float | None]:
        """Under the mutex, for ``slot``'s thread (its write queued, not done): the group it
        commits now, or None and how long it sleeps (None: until woken).

        The queue is taken once it holds as many writes as the last group saw
        (its own and those that queued while it committed: so the writers of
        one group all share the next fsync instead of alternating groups of 1
        and n-1, as they return at once and queue again one by one), or once
        its first writer waited as long as the last group took (at most
        :data:`MAX_GATHER_SECONDS`). A lone writer (last group of 1, nothing
        queued behind it) never waits. While a group commits nobody takes the queue: its
        committer hands it on when it ends.
        """
        if self._committing:
            return None, None
        queue = self._queue
        if len(queue) >= self._last_size:
            return self._take(slot), None
        timer = self._timer
        if timer is None:
            self._timer = slot
            self._deadline = _monotonic() + min(self._last_seconds, MAX_GATHER_SECONDS)
        elif timer is not slot:
            return None, None
        left = self._deadline - _monotonic()
        if left <= 0:
            return self._take(slot), None
        return None, left

    def _take(self, owner: _Slot[W] | None = None) -> list[_Slot[W]]:
        """Under the mutex: the whole queue, as the group ``owner``'s thread commits."""
        group, self._queue = self._queue, []
        self._timer = None
        self._committing = True
        self._group = group
        self._owner = owner
        self._handed = False
        self._alone = False
        return group

    def _abandon(self, slot: _Slot[W], taken: list[_Slot[W]] | None) -> bool:
        """Withdraw an interrupted ``slot``; a group it took but never ran goes back queued.
        True when another thread's group holds it (its outcome is that group's)."""
        held = False
        with self._mutex:
            queue = self._queue
            if taken is None and self._owner is slot:
                taken = self._group  # taken in _next, interrupted before it was returned
            if taken is not None:  # never handed to commit_many: its writes are unattempted
                # Back in the queue before the group is let go: interrupted in between,
                # _rescue must find them queued or still in the group, never neither.
                queue[:0] = [s for s in taken if s is not slot and s not in queue]
                if self._group is taken:
                    self._committing = False
                    self._group = None
                    self._owner = None
            elif slot in queue:
                queue.remove(slot)
            else:  # a running group holds it (or settled it already)
                held = not slot.done
            if self._timer is slot:
                self._timer = None
            if queue and not self._committing:
                _signal(queue[0])  # whoever is first takes or times the queue
        return held

    def _await(self, slot: _Slot[W]) -> None:
        """Until ``slot``, whose thread was interrupted while another thread's group held
        it, is settled: its caller's exception is raised once it is known stored or not
        (a recorder then follows a stored checkpoint). Interrupted again, it is left to that
        group: its caller's checkpoint may or may not be stored."""
        while True:
            got = slot.wake.acquire(timeout=POLL_SECONDS)
            with self._mutex:
                if got:
                    slot.signalled = False
                else:
                    self._rescue()
                if slot.done:
                    return
                if slot in self._queue:  # its group wrote nothing (_end): withdrawn
                    self._queue.remove(slot)
                    if self._timer is slot:
                        self._timer = None
                    if self._queue and not self._committing:
                        _signal(self._queue[0])
                    return

    def _end(self, group: list[_Slot[W]], mine: _Slot[W], started: float | None) -> None:
        """After ``group`` ran (from ``started``; None: it raised): settle what its run did
        not (it never started, or was interrupted), wake each other writer to its outcome,
        hand the queue on. Idempotent: an interrupted call is made again.

        What its run did not settle is settled as the store shows it (:meth:`_fates`):
        stored; not written (the write of another thread goes back to the queue, ahead of
        what queued since, and is committed by the next group); else "may or may not be
        stored". A signal handler's exception landing just after the group's commit was
        swallowed (read back as a failed commit, found stored), or told every other
        thread of the group "may or may not" for a stored checkpoint."""
        fates = self._fates(group) if started is None else None  # reads: not under the mutex
        with self._mutex:
            if self._group is group:  # not ended yet (a second call must not end another)
                back: list[_Slot[W]] = []
                for s in group:  # settled or queued before the group is let go (_rescue)
                    if s.done:
                        continue
                    fate = None if fates is None else fates.get(id(s))
                    if fate is False and s is not mine and s.inside.locked():
                        back.append(s)
                    else:  # woken unsettled, it would take the queue and return "stored"
                        _settle(s, None if fate else _unknown())
                self._queue[:0] = [s for s in back if s not in self._queue]
                if started is not None:
                    # Every writer seen: this group and what queued while it committed.
                    # (This group's size alone locks in: were one writer of four late
                    # once, it queues during the commit of the other three, and every
                    # later group would be taken at three, one writer always left out.)
                    self._last_size = len(group) + len(self._queue)
                    self._last_seconds = _monotonic() - started
                self._committing = False
                self._group = None
                self._owner = None
            for s in group:
                if s is not mine:
                    _signal(s)
            if self._queue and not self._committing:
                _signal(self._queue[0])  # queued meanwhile: it takes or times the next group

    def _fates(self, group: list[_Slot[W]]) -> dict[int, bool | None] | None:
        """By the thread whose run of ``group`` raised (a signal handler's exception, an
        interrupt), before the group is let go: id(slot) -> whether the store shows the
        write of each slot not settled stored (True), not written (False) or cannot tell
        (None). None: every such write may or may not be stored (no :class:`Readback`)."""
        if self._group is not group:
            return None  # ended already (a call again after an interrupt)
        open_ = [s for s in group if not s.done]
        if not open_:
            return None
        if not self._handed:  # never handed to commit_many: nothing of it written
            return dict.fromkeys(map(id, open_), False)
        readback = self._readback
        if readback is None:
            return None
        try:
            if self._alone:  # one txn per write, in order: the first open one ran, or
                # was running; the rest were never tried (read back, a branch another
                # writer moved since would say "cannot tell")
                first = readback.landed([open_[0].write])
                self._count(int(bool(first)), int(bool(first)))
                return {id(s): first if s is open_[0] else False for s in open_}
            found = readback.landed([s.write for s in group])  # one txn: all or nothing
        except Exception:  # unreadable: may or may not
            return None
        if found and len(open_) == len(group):  # stored, and _run counted none of it
            self._count(1, len(group))
        return dict.fromkeys(map(id, open_), found)

    def _rescue(self) -> None:
        """Under the mutex, by a waiting writer on its poll: do what a writer that left its
        call undone left (interrupted again while it handled an interrupt; the first one is
        handled by :meth:`_end` and :meth:`_abandon`). Idempotent, safe to interrupt: each
        step leaves a state the next poll of any waiter finishes.

        The group of a thread that left: writes handed to ``commit_many`` may or may not be
        stored (StoreError); writes never handed go back queued (but not those of threads that
        left). A timer or queued write of a thread that left is withdrawn."""
        group, owner, queue = self._group, self._owner, self._queue
        if group is not None and owner is not None and not owner.inside.locked():
            if self._handed:
                for s in group:
                    if not s.done:
                        _settle(s, _unknown())
            else:
                back = [s for s in group if not s.done and s.inside.locked() and s not in queue]
                queue[:0] = back
            self._committing = False
            self._group = None
            self._owner = None
            for s in group:
                _signal(s)
        timer = self._timer
        if timer is not None and not timer.inside.locked():
            self._timer = None
        if any(not s.inside.locked() for s in queue):
            queue[:] = [s for s in queue if s.inside.locked()]
        if queue and not self._committing:
            _signal(queue[0])

    def _run(self, group: list[_Slot[W]]) -> None:
        """Commit ``group``: in one txn, or one txn per write when that fails. An
        interrupt (KeyboardInterrupt; a signal handler's exception: Readback.foreign)
        propagates, never settled as the group's failure; :meth:`_end` then settles every
        write whose outcome nobody settled as the store shows it."""
        self._handed = True  # from here its writes may be stored (see _rescue)
        try:
            self._commit_many([s.write for s in group])
        except OutcomeUnknownError as exc:
            for s in group:  # one error per thread: raising it extends its traceback
                _settle(s, _again(exc))
        except Exception as exc:
            if self._foreign(exc, group):
                raise  # a signal handler's, not the group's: _end reads the store
            if len(group) == 1:
                _settle(group[0], exc)
                return
            # Rolled back whole: each write again alone, for its own outcome.
            self._alone = True
            for s in group:
                try:
                    self._commit_many([s.write])
                except Exception as alone:
                    if self._foreign(alone, [s]):
                        raise  # settled by _end, never given to another thread
                    _settle(s, alone)
                else:
                    self._count(1, 1)
                    _settle(s, None)
        else:
            self._count(1, len(group))
            for s in group:
                _settle(s, None)

    def _foreign(self, exc: Exception, slots: list[_Slot[W]]) -> bool:
        """Whether ``exc``, raised by the txn of ``slots``, is raised in this thread and
        settled by :meth:`_end` reading the store (Readback.foreign: it may be a signal
        handler's), not the writes' own failure.

        Python runs signal handlers in the main thread only. In any other thread such an
        exception (a bug, a MemoryError in one write's apply) is the writes' own failure
        when the store shows nothing of them written: were it raised as a handler's, the
        leader of every group holding that write would raise it and requeue the others
        (audit46). Written, or cannot tell: raised all the same (never swallowed), the
        writes settled as the store shows them."""
        readback = self._readback
        if readback is None or not readback.foreign(exc):
            return False
        if _in_main():
            return True
        try:
            return readback.landed([s.write for s in slots]) is not False
        except Exception:  # unreadable: may or may not (_end)
            return True

    def _count(self, groups: int, writes: int) -> None:
        self.groups += groups
        self.writes += writes


def _in_main() -> bool:
    """Whether this is the main thread (the only one a signal handler's exception lands in)."""
    return threading.current_thread() is threading.main_thread()


def _signal(slot: _Slot[W]) -> None:
    """Wake ``slot``'s thread (under the mutex; a second wake before it ran is a no-op)."""
    if not slot.signalled:
        slot.signalled = True
        slot.wake.release()


def _again(exc: OutcomeUnknownError) -> OutcomeUnknownError:
    copy = OutcomeUnknownError(exc.what, where=exc.where, expected=exc.expected, got=exc.got)
    copy.__cause__ = exc.__cause__
    return copy


def _unknown() -> StoreError:
    return StoreError(
        "interrupted while committing this checkpoint's group; "
        "it may or may not be stored (read the branch head)",
        where="group commit",
    )


def _settle(slot: _Slot[W], error: BaseException | None) -> None:
    slot.error = error
    slot.done = True  # after the error: a woken waiter reads a final outcome


def _outcome(slot: _Slot[W]) -> None:
    if not slot.done:  # never "stored" for a write whose outcome nobody settled
        raise _unknown()
    if slot.error is not None:
        raise slot.error
