"""What an interpreter exit does for stores and recorders left open.

A batched store queues checkpoints whose ids it already returned. The rule
(docs/durability.md, "What commits at exit"):

* a **normal exit** (the main module ends, ``sys.exit()`` with any code)
  commits each open store's queue in one durable txn, in the process that
  opened it only: after ``fork()`` the child's copy of the registry is
  emptied, since the parent's environment is not the child's;
* an exit on an **uncaught exception** (``KeyboardInterrupt`` included: one
  raised mid-checkpoint may leave that checkpoint queued though its call
  never returned an id) commits **nothing**: the queue is lost as in a
  crash, and a RuntimeWarning names every checkpoint not written;
* ``os._exit()``, a fatal signal (SIGTERM, SIGKILL) or a crash run no hook:
  the queue is lost.

Every open store is tracked weakly (the registry never keeps one alive). A
recorder holding side effects no checkpoint sealed is reported at exit with
a :class:`RuntimeWarning` (``Recorder.close`` raises instead).
"""

from __future__ import annotations

import atexit
import os
import sys
import warnings
import weakref
from collections.abc import Callable
from typing import Protocol, TypeVar

__all__ = ["died_of", "drop_on_error", "track_recorder", "track_store"]

T = TypeVar("T")


class _Flushable(Protocol):
    def flush_at_exit(self, *, died_of: str | None = None) -> None: ...


class _Droppable(Protocol):
    def drop_queue(self, when: str, why: str) -> None: ...


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


def drop_on_error(backend: _Droppable, exc_type: type[BaseException] | None) -> None:
    """Leaving ``with store:``: an error drops the queue, named; SystemExit and GeneratorExit
    (a generator closed early) are no errors: the store's close() flushes it."""
    if exc_type is not None and not issubclass(exc_type, (SystemExit, GeneratorExit)):
        backend.drop_queue("leaving the store's with-block", exc_type.__name__)


def died_of() -> str | None:
    """The uncaught exception this interpreter is exiting on (its type name), or None.

    The interpreter stores an exception that ends the main module in
    ``sys.last_value`` (``sys.last_exc`` from 3.12) before the exit hooks run;
    ``SystemExit`` ends it without (a deliberate exit). Consoles set them too
    for an error they show and carry on (``code.InteractiveInterpreter``, a
    test runner), so only an exception that unwound the whole stack counts:
    its outermost frame has no caller. A ``-i`` session, and a line typed at
    the interactive prompt (``<stdin>`` with ``sys.ps1`` set), never count.
    """
    if sys.flags.interactive or sys.flags.inspect:
        return None
    exc = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    if not isinstance(exc, BaseException) or isinstance(exc, SystemExit):
        return None
    tb = exc.__traceback__
    if tb is None or tb.tb_frame.f_back is not None:
        return None  # caught and shown by code that carried on: a leftover
    if hasattr(sys, "ps1") and tb.tb_frame.f_code.co_filename == "<stdin>":
        return None  # the interactive prompt shows every error and carries on
    return type(exc).__name__


def _forget_in_child() -> None:
    _STORES.clear()
    _RECORDERS.clear()


def _at_exit() -> None:
    # Each step on its own: a warning turned into an error (-W error) must not
    # skip the stores after it (left to __del__, a queue would flush even when
    # the process is dying).
    for recorder in list(_RECORDERS):
        _quietly(recorder._warn_unsealed, "at interpreter exit")
    dying = died_of()
    for store in list(_STORES):
        try:
            store.flush_at_exit(died_of=dying)
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
