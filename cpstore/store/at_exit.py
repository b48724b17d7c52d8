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
recorder holding side effects no checkpoint sealed is reported at exit with
a :class:`RuntimeWarning` (``Recorder.close`` raises instead); each step runs
on its own, so a warning turned into an error cannot skip a store's flush.
"""

from __future__ import annotations

import atexit
import os
import sys
import warnings
import weakref
from collections.abc import Callable
from typing import Protocol, TypeVar

__all__ = ["track_recorder", "track_store"]

T = TypeVar("T")


class _Flushable(Protocol):
    def flush_at_exit(self) -> None: ...


class _Closable(Protocol):
    def _warn_unsealed(self, when: str) -> None: ...


_STORES: weakref.WeakSet[_Flushable] = weakref.WeakSet()
_RECORDERS: weakref.WeakSet[_Closable] = weakref.WeakSet()


def track_store(store: _Flushable) -> None:
    """Flush ``store``'s queued checkpoints at a normal interpreter exit."""
    _STORES.add(store)


def track_recorder(recorder: _Closable) -> None:
    """Warn at a normal exit if ``recorder`` still holds unsealed effects."""
    _RECORDERS.add(recorder)


def _forget_in_child() -> None:
    _STORES.clear()
    _RECORDERS.clear()


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
