"""An LMDB environment's transactions: this process's read and write txn bookkeeping.

The base of :class:`~cpstore.store.lmdb_env.Env` (which opens the environment and its
named databases): every txn of a store begins here. Its own base,
:class:`~cpstore.store.lmdb_growth.EnvGrowth`, is the one place the map size changes.
"""

from __future__ import annotations

import os
import threading
from collections import Counter, deque
from collections.abc import Callable, Iterator
from sys import _current_frames, getrefcount
from threading import get_ident
from typing import Any, TypeVar

import lmdb

from cpstore.errors import (
    ForkError,
    StoreError,
    StoreReadOnlyError,
)
from cpstore.native.kept import kept_contextmanager, take_write_lock
from cpstore.store.backend import Txn
from cpstore.store.kept_views import kept_in, settle
from cpstore.store.lmdb_errors import translate
from cpstore.store.lmdb_growth import EnvGrowth

__all__ = ["EnvTxns", "take_write_lock"]

T = TypeVar("T")

_TWICE = (0, 1)
#: Thread ident -> each running threading thread (a lookup: no allocation, no frames), and
#: each thread threading did not start that asked for ``current_thread()`` (a raw
#: ``_thread`` one, one started from C; ``logging`` asks for every record): that one's
#: ``_DummyThread`` stays listed after its thread ended (review98), see :func:`_running`.
_THREADS: dict[int, Any] = threading._active  # type: ignore[attr-defined]
_DUMMY: type = threading._DummyThread
#: The longest a close waits for another thread's txn of the environment to end (a daemon
#: thread's read may never end): then it gives up and leaves the environment open
#: (closing it under that txn could crash the process: EnvGrowth.quiesced).
CLOSE_WAIT_SECONDS = 5.0


class EnvTxns(EnvGrowth):
    """Txn bookkeeping of an open LMDB environment (:class:`Env`'s base; map growth: its
    base, :class:`~cpstore.store.lmdb_growth.EnvGrowth`)."""

    #: A read-only open of a pre-layout-5 store: reads look for an upgrade (_legacy_read).
    _legacy_ro: bool
    #: False when a read-only open could not use the lock file (Env._open_env). Its read
    #: txns then hand out copies, not views: without a reader slot a writer may reuse
    #: the pages under a read, and a view checked against its digest could change
    #: before it is decoded; a copy cannot (what is hashed is what is decoded).
    locked: bool = True

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.write_lock = threading.RLock()
        # A thread ident per open read txn (deque ops atomic under the GIL); _gate: resizes.
        self._active: deque[int] = deque()
        self._gate = threading.Condition()
        self._resizing = False
        #: Seconds a resize waits for this process's reads (None: no bound; set at exit).
        self.resize_wait: float | None = None
        #: The last handle's close began (:meth:`quiesced`) / LMDB's environment is closed:
        #: a thread still using it is told so (:meth:`closed_error`), not a resize's
        #: refusal or LMDB's "Attempt to operate on closed/deleted/dropped object".
        self.closing = False
        self.closed = False
        #: The ``last_pgno`` at which the next write txn frees dead readers' slots
        #: (:meth:`_cover_tail`); 0: not set yet (the open has just freed them).
        self._readers_checked_at = 0
        #: Every py-lmdb txn object this environment began that may still be referenced:
        #: py-lmdb 1.x's close aborts each such txn with the GIL let go before it forgets
        #: it, and another thread freeing one meanwhile (its last reference dropped: a
        #: view's, a frame's) aborted it again or unlinked it under the close's walk: the
        #: process died of SIGSEGV/SIGBUS closing a store under threads that checkpointed
        #: inside read blocks (audit36). Held here, a txn object is freed only by
        #: :meth:`_drop_unused_txns` (never beside a close) or after the close.
        self._txns: deque[Any] = deque()
        #: (thread ident, txn: None once another aborted it) per read never exited: lost_read.
        self._lost: deque[tuple[int, Any]] = deque()
        #: (thread ident, holder) of each read a caller's views keep past its block.
        self.kept: deque[tuple[int, Any]] = deque()  # kept_views.KeptViews

    def _close_wait(self) -> float:
        """The close's bound (:meth:`quiesced`): :data:`CLOSE_WAIT_SECONDS` as it is now."""
        return CLOSE_WAIT_SECONDS

    def _legacy_read(self, txn: Txn[memoryview]) -> Txn[memoryview]:
        """``txn``, or a new read txn seeing a layout another process upgraded to (Env's)."""
        return txn

    # -- bookkeeping ---------------------------------------------------------

    def check_pid(self) -> None:
        """Raise :class:`ForkError` when used in a process other than the opener."""
        if os.getpid() != self.pid:
            raise ForkError(
                "store used after fork(); open it again in the child",
                where=self.path,
                expected=f"pid {self.pid}",
                got=f"pid {os.getpid()}",
            )

    # -- transactions -------------------------------------------------------

    def holds_read(self) -> bool:
        """True when the calling thread has a read txn of this env open (not a lost one)."""
        me, active = get_ident(), self._active
        settle(self.kept, self._lost)  # a kept read whose views are all gone: not held
        return me in active and (not self._lost or active.count(me) > self._lost_counts()[me])

    def _lost_counts(self) -> Counter[int]:
        """Thread ident -> its reads lost_read handed over, not yet ended: one copy of the
        deque (``list()``, no collection inside: tuple()'s raised, review94), no lock."""
        return Counter(who for who, _ in list(self._lost))

    def writes_here(self) -> bool:
        """True when the calling thread holds ``write_lock`` (inside a write txn or a resize).
        RLock's own ``_is_owned`` (what ``threading.Condition`` asks): one C call, no
        bookkeeping of ours that an interrupt could leave half-done."""
        owned: bool = self.write_lock._is_owned()  # type: ignore[attr-defined]
        return owned

    def reads_anywhere(self) -> bool:
        """True when any thread of this process has a read txn of this env open."""
        settle(self.kept, self._lost)  # as holds_read
        return self._reads_left(None) if self._lost else bool(self._active)

    def lost_read(self, txn: Txn[memoryview], who: int) -> None:
        """From a finalizer, any thread: thread ``who``'s read :meth:`end_read` never got (an
        interrupt as its exit began; its entry stayed: closes gave up, resizes were refused).
        Any thread's next read, write or resize aborts the txn; only ``who`` removes the entry
        (:meth:`_end_lost`: others falsified its counts), or any thread once ``who`` is gone; a
        close or resize counts it ended."""
        if os.getpid() == self.pid:  # a fork() child's: the parent's txn, never ended here
            self._lost.append((who, txn))

    def _end_lost(self) -> None:
        """Abort every lost read's txn (at any read or write: an owner never reading again
        pinned its snapshot, review93), let go of another's (py-lmdb frees its reader slot
        with it, review94; every unused txn object freed, not two: review95) and end this
        thread's, and a thread's that is gone (txns96: a kept slice's read, released after
        its thread ended, stayed listed for the process's life, and every later read of
        any thread took the gate and walked them: 1,000 such reads made a read 4.8 times
        slower), unless a resize or close runs; one a nested read ended: passed over."""
        me, lost = get_ident(), self._lost
        if not lost:
            return
        with self._gate:
            if self._resizing:
                return
            alive: set[int] | None = None  # each running thread's ident
            for item in list(lost):
                who, txn = item
                if txn is not None:
                    txn.abort()  # py-lmdb: a second abort does nothing
                if item not in lost:  # ended meanwhile: a read begun there (review94)
                    continue
                gone = who == me
                thread = None if gone else _THREADS.get(who)  # inline: walked at every read
                if not gone and (thread is None or isinstance(thread, _DUMMY)):
                    if alive is None:
                        # Not a threading thread still running: every thread running Python
                        # code, raw _thread ones too (built only here: ~30 us beside 20 idle
                        # threads); the frames let go of at once (kept, they held returned
                        # begins' txns: their slots kept).
                        alive = set(_current_frames())
                    gone = who not in alive and not _running(_THREADS.get(who))
                if gone:
                    # Its owner's, or a thread's with no Python frame (gone, or back in C):
                    # no count its frames took (before/after an append) changes under them.
                    try:
                        lost.remove(item)
                    finally:
                        self._active.remove(who)
                elif txn is not None:  # let go: py-lmdb frees its reader slot with it (_txns)
                    lost[lost.index(item)] = (who, None)
            self._drop_unused_txns(range(len(self._txns)))  # an aborted read keeps its slot

    def _reads_left(self, me: int | None) -> bool:
        """Whether a read of a thread other than ``me`` is open, lost ones not counted."""
        active = list(self._active)
        if not self._lost:
            return any(t != me for t in active)
        lost = self._lost_counts()
        return any(t != me and active.count(t) > lost[t] for t in set(active))

    def _leave_read(self) -> None:
        self._active.remove(get_ident())
        if self._resizing:
            with self._gate:
                self._gate.notify_all()

    def _enter_read(self) -> None:
        # Publish the entry, then look for a resize: the resizer sets _resizing,
        # then waits for _active to empty, so one always sees the other (GIL).
        active, me = self._active, get_ident()
        while True:
            # A thread inside a read block goes on: the resize waits for that read anyway,
            # and making this one wait would deadlock (a lost or kept one: not, review95).
            before = active.count(me)
            try:
                active.append(me)  # an interrupt on its return: removed (_unwind_begin)
                if not self._resizing or before > self._lost_counts()[me] + kept_in(self.kept, me):
                    return
            except BaseException:
                if active.count(me) > before:
                    self._leave_read()
                raise
            active.remove(me)
            with self._gate:
                self._gate.notify_all()
                while self._resizing:
                    self._gate.wait()

    @kept_contextmanager  # no landing between its yield and the with block (review87)
    def held_open(self) -> Iterator[None]:
        """A block that uses the environment outside this class's txns (LMDB's copy, which
        reads through a txn of its own with the GIL released), counted as a read: a close
        (:meth:`quiesced`) and a resize wait for it. A close beside a copy freed the
        environment under it and the process died of SIGSEGV (audit49)."""
        active, me = self._active, get_ident()
        before = active.count(me)  # an interrupt as _enter_read returns: still undone
        try:
            self._enter_read()
            if self.closed:  # closed before this block was counted
                raise self.closed_error()
            yield
        finally:
            if active.count(me) > before:
                self._leave_read()

    def _begin(self, *, write: bool) -> Txn[memoryview]:
        """Begin a txn, adopting map growth (:meth:`begin_read` inlines the common read). A
        read is entered in the bookkeeping (pair it with :meth:`_leave_read`); a write needs
        the caller to hold ``write_lock``."""

        def attempt() -> Txn[memoryview]:
            active, me = self._active, get_ident()
            before = active.count(me)
            txn: Txn[memoryview] | None = None
            try:
                if write:
                    txn = self.env.begin(None, None, True, False)  # write, copies: see write()
                else:
                    self._enter_read()
                    txn = self.env.begin(None, None, False, self.locked)  # buffers
                self._txns.append(txn)
                return txn
            except BaseException:
                self._unwind_begin(txn, counted=active.count(me) > before)
                raise

        retried_slots = False
        while True:
            try:
                return self._adopting_growth(attempt)
            except lmdb.ReadersFullError as exc:
                if retried_slots:
                    raise translate(exc, self.path) from None
                with self.held_open():  # counted: a close waits (StoreClosedError after it)
                    self.env.reader_check()
                retried_slots = True
            except lmdb.Error as exc:
                raise self.error_of(exc) from None

    def begin_read(self) -> Txn[memoryview]:
        """Begin a read txn handing out zero-copy views; pair it with :meth:`end_read`. The
        common case is inline (entry published before looking for a resize, as in
        :meth:`_enter_read`); a resize, growth to adopt, full reader slots or an error to
        translate take :meth:`_begin`."""
        if os.getpid() != self.pid:
            self.check_pid()
        if self.kept:  # kept reads whose views are all gone: handed over as lost
            settle(self.kept, self._lost)
        if self._lost:  # a read of some thread lost at its exit: this one's ended here
            self._end_lost()
        active, me = self._active, get_ident()
        before = active.count(me)  # an interrupt lands on a C call's return: see the except
        txn: Txn[memoryview] | None = None
        try:
            active.append(me)
            if not self._resizing:
                # db, parent, write, buffers: positional (a keyword: ~1k instructions more)
                txn = self.env.begin(None, None, False, self.locked)  # copies: no slot
                self._txns.append(txn)  # see _txns
                return self._legacy_read(txn) if self._legacy_ro else txn
        except BaseException as exc:
            self._unwind_begin(txn, counted=active.count(me) > before)
            if txn is not None or not isinstance(exc, lmdb.Error):
                raise
        else:
            self._leave_read()  # a resize under way: _begin waits for it
        txn = self._begin(write=False)
        return self._legacy_read(txn) if self._legacy_ro else txn

    def _unwind_begin(self, txn: Txn[memoryview] | None, *, counted: bool) -> None:
        """Undo a begin an error or an interrupt cut short (a signal handler's exception
        lands on the return of any C call: the reader entry's append, LMDB's begin, the
        append to :attr:`_txns`): the txn begun is aborted (kept in :attr:`_txns`, freed
        where no close runs) and the calling thread's reader entry, when ``counted``,
        removed. Left, the entry made every resize of this thread refuse and another
        thread's wait for it, and a close, wait in vain; a write txn left open kept LMDB's
        writer lock (tests/test_begin_interrupted.py)."""
        try:
            if txn is not None:
                if txn not in self._txns:  # a scan, on this path only
                    self._txns.append(txn)
                txn.abort()
        finally:
            if counted:
                self._leave_read()

    def end_read(self, txn: Txn[memoryview], holder: Any = None) -> None:
        """End a txn from :meth:`begin_read` (exactly once); :meth:`_leave_read` inline.
        ``holder`` (a ``_Read``, a checkpoint view): its ``_txn`` forgotten as the entry is
        removed, no landing between: its finalizer calls :meth:`lost_read` exactly before.
        In a fork() child (a read block left that the parent was in when it forked) only
        the bookkeeping is left: the txn, its reader slot in the shared lock file and the
        txn objects :attr:`_txns` holds are the parent's, and aborting or freeing them
        here reset the parent's live read (its pages unprotected) and gave its slots away
        (audit39). The entry removed there is the holder's too: the child's one thread
        ending a view another parent thread entered removed its own (ValueError, or its
        own live read's entry, txns96)."""
        if os.getpid() != self.pid:
            if holder is None:
                self._active.remove(get_ident())
            else:
                holder._txn = None
                self._active.remove(holder._who)
            return
        try:
            txn.abort()
            self._drop_unused_txns()  # before this read leaves: no close runs meanwhile
        finally:
            if holder is None:
                self._active.remove(get_ident())
            else:
                holder._txn = None
                self._active.remove(holder._who)
            if self._resizing:
                with self._gate:
                    self._gate.notify_all()

    def read(self) -> _Read:
        """A read txn (its zero-copy views die with it) for a ``with`` block; an LMDB error
        raised in the block is translated (lmdb_errors)."""
        return _Read(self)

    def write(self, fn: Callable[[Txn[memoryview]], T]) -> T:
        """Run ``fn`` in one write txn and commit; retried after growing the map.

        ``fn`` must depend only on the txn (it may run more than once). What it reads are
        bytes copies, not views (put86): every value a commit reads is small (an index row,
        a heap entry's head, a ref, a record), and py-lmdb's view (~1 k instructions made
        and freed, more per slice) costs more than copying it; a copy outlives the put."""
        self.check_pid()
        if self.options.readonly:
            raise StoreReadOnlyError("the store was opened read-only", where=self.path)
        lock = self.write_lock
        held = lock._recursion_count()  # type: ignore[attr-defined]  # take_write_lock's
        try:
            if not lock.acquire(False):  # _lock_writes' first try, inline (not blocking)
                self._lock_writes()
        except BaseException:
            # A signal handler's exception landing on an acquire's return (here or in
            # _lock_writes): the hold this call took is let go, else it stayed this
            # thread's and every other thread's write waited forever (review78); an
            # outer hold of this thread is kept (the count says which: take_write_lock).
            if lock._recursion_count() > held:  # type: ignore[attr-defined]
                lock.release()
            raise
        try:
            if self.kept:  # a writer may never read: kept reads settle and lost txns
                settle(self.kept, self._lost)  # end here too (review93)
            if self._lost:
                self._end_lost()
            while True:
                try:
                    with self._begin_write() as txn:
                        # Under LMDB's writer lock: no commit of any process runs while
                        # the tail is filled (zeros past the end must not race a commit).
                        self._cover_tail()
                        return fn(txn)
                except lmdb.MapFullError:
                    # Grown, and tried again, with the write lock still held: no other
                    # thread's write comes in between (a batched flush that had taken the
                    # queue saw a later batch commit ahead of it: ConflictError, audit34).
                    if not self._clear_dead_readers():
                        self.grow()
                except lmdb.Error as exc:
                    raise self.error_of(exc) from None
        finally:
            try:
                self._drop_unused_txns()  # the write lock still held: no close meanwhile
            finally:
                self.write_lock.release()

    def _begin_write(self) -> Txn[memoryview]:
        """A write txn (``write_lock`` held); on an LMDB error :meth:`_begin` names it."""
        txn: Txn[memoryview] | None = None
        try:
            txn = self.env.begin(None, None, True, False)  # db, parent, write, copies: py-lmdb's
            self._txns.append(txn)  # see _txns
            return txn
        except BaseException as exc:
            self._unwind_begin(txn, counted=False)  # else LMDB's writer lock stays held
            if txn is not None or not isinstance(exc, lmdb.Error):
                raise
        return self._begin(write=True)

    def _drop_unused_txns(self, rounds: range | tuple[int, ...] = _TWICE) -> None:
        """Let go of up to two (``rounds``) txn objects :attr:`_txns` holds that nobody else
        does (oldest first), where no close can run beside: inside a read of this environment,
        holding its write lock (EnvTxns.quiesced waits for both) or the gate (_end_lost)."""
        txns = self._txns
        for _ in rounds:
            if len(txns) < 2:  # the newest is the caller's own, alive: left for later
                return
            try:
                txn = txns.popleft()
            except IndexError:  # another thread took the last meanwhile
                return
            if getrefcount(txn) > 2:  # held beyond this local (and getrefcount's argument)
                txns.append(txn)
            del txn  # the last reference: py-lmdb frees it here


def _running(thread: Any) -> bool:
    """Whether ``thread`` (:data:`_THREADS`' entry of an ident, or None) is a running
    ``threading`` thread: not a ``_DummyThread``, which stays listed once its thread ended
    (judged by its frames, as a raw thread: review98; taken for alive, its lost reads
    stayed for good)."""
    return thread is not None and not isinstance(thread, _DUMMY)


class _Read:
    """``EnvTxns.read()``: :meth:`EnvTxns.begin_read` on entry; on exit an LMDB error
    raised in the block is translated and the txn ended (:meth:`EnvTxns.end_read`),
    whatever happened. A class, not ``@contextmanager``: no generator and no wrapper per
    read (~10k of a ~350k instruction LangGraph ``get_tuple``)."""

    __slots__ = ("_env", "_txn", "_who")

    def __init__(self, env: EnvTxns) -> None:
        self._env = env
        self._txn: Txn[memoryview] | None = None

    def __enter__(self) -> Txn[memoryview]:
        if self._txn is not None:
            raise StoreError("a read txn block is entered once", where=self._env.path)
        self._who = get_ident()  # first: set before any read is begun (__del__)
        txn = self._txn = self._env.begin_read()
        return txn

    def __del__(self) -> None:
        # The txn still here: the read's entry is too (an interrupt landed at __exit__'s
        # start, or in end_read before the removal): handed over (EnvTxns.lost_read), and
        # forgotten, so an exit run after this (a cycle's finalizers, PEP 442: any order,
        # any thread) leaves it to its owner's _end_lost, which may have ended it already.
        txn = self._txn
        if txn is not None:
            self._txn = None
            self._env.lost_read(txn, self._who)

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        txn = self._txn  # forgotten by end_read as the read's entry is removed
        try:
            if isinstance(exc, lmdb.Error):
                raise self._env.error_of(exc) from None
        finally:
            if txn is not None:
                self._env.end_read(txn, self)
