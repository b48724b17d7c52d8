"""What an interpreter exit does for stores and recorders left open.

A batched store queues checkpoints whose ids it already returned. The rule
(docs/durability.md, "What commits at exit"): whenever Python runs its exit
hooks -- the main module ends, ``sys.exit()``, or an uncaught exception ends
the process -- each open store's queue commits in one durable txn, in the
process that opened it only (after ``fork()`` the child's copy of the
registry is emptied: the parent's environment is not the child's). Every
queued checkpoint is complete, and the checkpoints just before a failure are
the ones a recovery or an incident audit needs, so an error is no reason to
lose them. ``os._exit()``, a fatal signal or a crash run no hook: the queue
is lost, as batched mode promises for a crash.

Every open store is tracked weakly (the registry never keeps one alive). A
store garbage-collected with a queue flushes it from its finalizer
(:func:`flush_collected`), unless the collecting thread might be one another
thread of this process waits on, or is inside a write (or read) txn of the same
store: a write txn nested on one thread is refused by LMDB (the queue was then
lost, reported only as an ignored exception) and waits for ever on PostgreSQL's
writer lock. That flush is handed to a helper thread, which commits it as soon as
the write ends, and which the exit hook finishes if it has not. A
recorder holding side effects no checkpoint sealed is reported at exit with
a :class:`RuntimeWarning` (``Recorder.close`` raises instead); each step runs
on its own, so a warning turned into an error cannot skip a store's flush.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import warnings
import weakref
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from cpstore.errors import CommitLostError, OutcomeUnknownError, StoreError

__all__ = [
    "EXIT_WAIT",
    "ExitGate",
    "flush_bounded",
    "flush_collected",
    "lost_message",
    "track_recorder",
    "track_store",
]

T = TypeVar("T")

#: Seconds an exit flush waits for anything another thread or process holds.
EXIT_WAIT = 5.0


class _Flushable(Protocol):
    def flush_at_exit(self) -> None: ...


class _Queued(Protocol):
    @property
    def run_id(self) -> str: ...
    @property
    def branch(self) -> str: ...
    @property
    def cid(self) -> bytes: ...
    @property
    def committed(self) -> bool: ...


class _Backend(Protocol):
    @property
    def path(self) -> str: ...
    def queued_writes(self) -> list[_Queued]: ...
    def flush(self) -> None: ...
    def try_flush_here(self) -> bool: ...
    def flush_at_exit(self, wait: float) -> None: ...


class _Closable(Protocol):
    def _warn_unsealed(self, when: str) -> None: ...


_STORES: weakref.WeakSet[_Flushable] = weakref.WeakSet()
_RECORDERS: weakref.WeakSet[_Closable] = weakref.WeakSet()
#: Backends of collected stores whose flush a helper thread owes (held until it is done).
#: No lock: a set's add, discard and copy are each one step under the GIL (identity hash).
_DEFERRED: set[_Backend] = set()


def lost_message(path: str, queued: Sequence[_Queued], exc: BaseException, when: str) -> str:
    """The warning for queued checkpoints a flush could not write (or whose commit may or
    may not have taken effect): every id, by run and branch. One the store showed committed
    by the time the flush ended is not named: it was named "NOT written" when it had been
    in another thread's commit, which landed while the exit gave up on the lock (audit53)."""
    queued = [op for op in queued if not op.committed]
    lost: dict[tuple[str, str], list[str]] = {}
    for op in queued:
        lost.setdefault((op.run_id, op.branch), []).append(bytes(op.cid).hex())
    named = "; ".join(
        f"run {run!r} branch {branch!r}: {', '.join(ids)}" for (run, branch), ids in lost.items()
    )
    # A commit that lost its connection and could not be read back may have landed.
    unknown = isinstance(exc, OutcomeUnknownError) or (
        isinstance(exc, CommitLostError) and exc.stored is None
    )
    fate = "may or may not have been" if unknown else "were NOT"
    return (
        f"cpstore store {path}: {len(queued)} queued checkpoint(s) {fate} written "
        f"{when} (batched mode acknowledged them as queued only): {named} ({exc})"
    )


_COLLECTED = "by the flush of a store garbage-collected without close()"


def flush_collected(backend: _Backend) -> bool:
    """A collected store's flush (``Store.__del__``): now when this thread may (True), else
    handed to a helper thread (False). A failed flush is a RuntimeWarning naming each
    checkpoint not written; it never raises (a finalizer's exception is only printed)."""
    queued = backend.queued_writes()
    try:
        if backend.try_flush_here():
            return True
    except Exception as exc:
        warnings.warn(lost_message(backend.path, queued, exc, _COLLECTED), RuntimeWarning, 2)
        return True
    _DEFERRED.add(backend)
    try:
        if sys.is_finalizing():  # a thread started now never runs (start() waits for ever)
            raise RuntimeError("the interpreter is shutting down")
        threading.Thread(
            target=_flush_deferred, args=(backend,), name="cpstore-collected-flush", daemon=True
        ).start()
    except RuntimeError as exc:  # no new threads (interpreter shutdown): say what is lost
        _DEFERRED.discard(backend)
        warnings.warn(lost_message(backend.path, queued, exc, _COLLECTED), RuntimeWarning, 2)
    return False


def _flush_deferred(backend: _Backend) -> None:
    """The helper thread: flush once the write that collected the store ends."""
    queued = backend.queued_writes()
    try:
        backend.flush()
    except Exception as exc:
        warnings.warn(lost_message(backend.path, queued, exc, _COLLECTED), RuntimeWarning, 1)
    finally:
        _DEFERRED.discard(backend)


def track_store(store: _Flushable) -> None:
    """Flush ``store``'s queued checkpoints at a normal interpreter exit."""
    _STORES.add(store)


def track_recorder(recorder: _Closable) -> None:
    """Warn at a normal exit if ``recorder`` still holds unsealed effects."""
    _RECORDERS.add(recorder)


class ExitGate:
    """Where the exit flush's wait for the store's writer lock ends.

    LMDB's write txn waits without bound for its writer lock, which another process may
    hold for ever (PostgreSQL's advisory lock likewise). The exit flush runs in a worker
    thread that calls :meth:`enter` once it holds the lock, before it takes the queue;
    when the wait ran out first, :meth:`cancel` makes that call raise, so the batch is
    never taken and what was queued is named "NOT written" (:func:`flush_bounded`).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._began = False
        self._cancelled = False
        self.worker: threading.Thread | None = None

    def enter(self) -> None:
        """Called by every flush holding the writer lock; only the worker's is gated."""
        if threading.current_thread() is not self.worker:
            return
        with self._lock:
            if self._cancelled:
                raise StoreError("the exit flush gave up waiting for the writer lock")
            self._began = True

    def leave(self) -> None:
        """The worker's txn took nothing (another thread's batch was in flight: it waits for
        it and flushes again, BatchOwners.take): its next wait for the lock is bounded too.
        Counted as begun from its first txn on, the exit waited without bound for a lock
        another process took between the two txns (audit53)."""
        if threading.current_thread() is self.worker:
            with self._lock:
                self._began = False

    def cancel(self) -> bool:
        """True when the worker had not begun (it never will); False when it has."""
        with self._lock:
            self._cancelled = not self._began
            return self._cancelled


def flush_bounded(flush: Callable[[], None], gate: ExitGate, wait: float, where: str) -> None:
    """``flush()`` at exit, waiting at most ``wait`` seconds for the writer lock: StoreError
    ("not written") when another process (or thread) held it that long. Once the lock is
    held the commit runs to its end (its map growth and its wait for other threads'
    commits are bounded by the same ``wait``)."""
    failed: list[BaseException] = []

    def run() -> None:
        try:
            flush()
        except BaseException as exc:  # handed to the exit hook
            failed.append(exc)

    worker = threading.Thread(target=run, name="cpstore-exit-flush", daemon=True)
    gate.worker = worker
    try:
        if sys.is_finalizing():
            raise RuntimeError("the interpreter is shutting down")
        worker.start()
    except RuntimeError:  # no new threads at this point of shutdown: wait as before
        gate.worker = threading.current_thread()
        run()
    else:
        worker.join(wait)
        while worker.is_alive():
            if gate.cancel():
                raise StoreError(
                    "the store's writer lock was held by another process (or thread) "
                    f"for {wait:g} s at exit",
                    where=where,
                    expected=f"the writer lock free within {wait:g} s",
                    got="still held",
                )
            # It holds the lock: the commit ends. Or its txn took nothing and it waits for
            # the lock again (ExitGate.leave): looked at again, never waited for unbounded
            # from a look made just before it left (audit53).
            worker.join(0.05)
    if failed:
        raise failed[0]


def _forget_in_child() -> None:
    _STORES.clear()
    _RECORDERS.clear()
    _DEFERRED.clear()  # the helper threads are the parent's


def _at_exit() -> None:
    # Each step on its own: a warning turned into an error (-W error) must not
    # skip the stores after it (left to __del__, a queue would flush even when
    # the process is dying).
    for recorder in list(_RECORDERS):
        _quietly(recorder._warn_unsealed, "at interpreter exit")
    for store in list(_STORES):
        try:
            store.flush_at_exit()
        except Exception as exc:  # an exit hook must not hide the others
            _quietly(_warn_flush_failed, exc)
    for backend in list(_DEFERRED):  # a helper thread's flush may still be owed (or under way)
        try:
            backend.flush_at_exit(EXIT_WAIT)
        except Exception as exc:
            _quietly(_warn_flush_failed, exc)


def _warn_flush_failed(exc: Exception) -> None:
    warnings.warn(
        f"cpstore could not flush queued checkpoints at exit: {exc}", RuntimeWarning, stacklevel=1
    )


def _quietly(fn: Callable[[T], None], arg: T) -> None:
    """``fn(arg)``; an exception it raises (a warning filtered into an error) is printed."""
    try:
        fn(arg)
    except Exception as exc:
        print(f"cpstore at exit: {type(exc).__name__}: {exc}", file=sys.stderr)


os.register_at_fork(after_in_child=_forget_in_child)
atexit.register(_at_exit)
