"""Writes from inside a write: a signal handler (or a finalizer) writing a store on a thread
already inside one of that store's commits or flushes is ReentrantWriteError, never a wait
for itself (:class:`Reentry`, one per LMDB environment: :func:`shared_reentry`). Opens from
inside an open or close: :class:`ReentrantOpenError` (lmdb_registry refuses them).
"""

from __future__ import annotations

import _thread
import threading
import weakref
from collections.abc import Callable

from cpstore.errors import ReentrantOpenError, ReentrantWriteError

__all__ = [
    "OwnedLock",
    "ReentrantOpenError",
    "Reentry",
    "reentrant_open",
    "reentrant_write",
    "shared_reentry",
]


def reentrant_write(where: str) -> ReentrantWriteError:
    """The error of a store write begun on a thread already inside one of the store's writes."""
    return ReentrantWriteError(
        "a write of this store began on a thread already inside one of its writes (a "
        "signal handler or a finalizer running inside it): it would wait for itself",
        where=where,
        expected="no checkpoint or flush of a store from a signal handler of a thread "
        "that writes it (set a flag there; flush and exit in the main code)",
        got="a nested write",
    )


class OwnedLock(_thread.RLock):  # type: ignore[misc]  # final in typeshed only
    """A lock that can tell its owner (``_is_owned``; lmdb_registry's): C's re-entrant lock
    (acquire, release and ``with`` are its own C calls: no Python frame, so no landing for
    a signal's handler, between taking it and the block), with a plain Lock's ``locked()``
    (held by some thread; a waiter that has the lock but not yet the GIL counts as not
    holding it, as a Lock's flag)."""

    def __init__(self) -> None:
        super().__init__()
        #: Thread ident -> whether it holds (or waits for) a lock an open takes without
        #: this one (the creation lock acquire_env waits for): a nested open would wait for
        #: it. Set and cleared by subscript (no call, so no landing after either).
        self.beside: dict[int, bool] = {}

    def locked(self) -> bool:
        """Whether some thread holds the lock (its count, which C's repr shows first)."""
        return _thread.RLock.__repr__(self).startswith("<locked")

    def after_fork(self) -> None:
        """In a fork() child: free (the holder is not in the child: made free outright, as
        threading's own locks), and no other thread's entry in :attr:`beside` (gone; a
        new thread given its ident would be refused every open)."""
        self._at_fork_reinit()  # type: ignore[attr-defined]
        me = threading.get_ident()
        mine = self.beside.get(me, False)  # the forking thread's own open may be under way
        self.beside.clear()
        self.beside[me] = mine

    def refuse(self, where: str) -> None:
        """ReentrantOpenError when this thread holds the lock, or one beside it: a signal
        handler or a finaliser inside its open or close (taken again, the lock would show
        it the registry mid-update: the env of a path half-made, or closing yet registered)."""
        if self._is_owned() or self.beside.get(threading.get_ident()):  # type: ignore[attr-defined]
            raise reentrant_open(where)


def reentrant_open(where: str) -> ReentrantOpenError:
    """The error of an open (or compact, or registry look) nested in its thread's open or
    close."""
    return ReentrantOpenError(
        "a store was opened on a thread already inside an open or close of a store (a "
        "signal handler or a finaliser running inside it): it would wait for itself",
        where=where,
        expected="no open or compact of a store from a signal handler or finaliser "
        "(set a flag there; open in the main code)",
        got="an open nested in an open or close",
    )


class Reentry:
    """Whether this thread is inside a commit or flush of one store (a signal handler's
    write runs inside the write it interrupted: refused, never waiting for itself)."""

    def __init__(self, where: str) -> None:
        self._where = where
        self._local = threading.local()

    def inside(self) -> bool:
        """Whether this thread is inside :meth:`run` (a finalizer's flush then waits)."""
        return bool(getattr(self._local, "on", False))

    def refuse(self) -> None:
        """ReentrantWriteError when this thread is inside :meth:`run` already."""
        if getattr(self._local, "on", False):
            raise reentrant_write(self._where)

    def run(self, fn: Callable[..., None], *args: object) -> None:
        """``fn(*args)`` as this thread's write, refused when it is inside one already."""
        local = self._local
        if getattr(local, "on", False):  # refuse(), inline: once per write
            raise reentrant_write(self._where)
        try:  # set inside: an interrupt before the try leaves it unset, never stuck on
            local.on = True
            fn(*args)
        finally:
            local.on = False


#: One :class:`Reentry` per shared environment (every handle of one LMDB path): a handler
#: writing through another handle of the path is nested in the same LMDB write txn.
_SHARED: weakref.WeakKeyDictionary[object, Reentry] = weakref.WeakKeyDictionary()


def shared_reentry(env: object, where: str) -> Reentry:
    """The :class:`Reentry` of every handle on ``env``. Per handle, a signal handler's
    write through handle B inside a write of handle A on its thread met LMDB's raw "A
    write transaction is already active" (a plain StoreError: B's batch dropped as
    failed, its checkpoints with it) instead of ReentrantWriteError (audit42)."""
    reentry = _SHARED.get(env)
    if reentry is None:
        reentry = _SHARED[env] = Reentry(where)
    return reentry
