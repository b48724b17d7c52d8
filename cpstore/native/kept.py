"""Context managers an interrupt cannot leave holding what they took.

``contextlib.contextmanager``'s ``__enter__`` returns ``next()``'s value; CPython runs a
pending signal handler on that C call's return, so an interrupt (a signal handler's
exception: Ctrl-C, a watchdog's alarm) landing there raised before the ``with`` block
began. No ``__exit__`` ran, and the suspended generator, kept by the exception's
traceback, let go of what it held (a lock, a txn, a reservation) only when that was
freed: while a caller kept the exception (a REPL's ``sys.last_value``, a runtime logging
it), every other user waited or was refused (review87). :func:`kept_contextmanager` is a
drop-in with no landing there; :func:`take_write_lock` an RLock acquire that lets go of
the hold an interrupt on its return left. Imports nothing of cpstore: every layer may use
them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import _GeneratorContextManager
from functools import wraps
from typing import Any, ParamSpec, TypeVar, cast

__all__ = ["kept_contextmanager", "take_write_lock"]

T = TypeVar("T")
P = ParamSpec("P")


class _KeptGeneratorContextManager(_GeneratorContextManager[T]):
    """contextlib's, entered with no landing between the generator's ``yield`` and the
    ``with`` block (:func:`kept_contextmanager`)."""

    def __enter__(self) -> T:
        del self.args, self.kwds, self.func
        # map calls next(), the loop's step stores and returns: no call, so no landing,
        # between (a bare ``next()``'s return is one: see kept_contextmanager).
        for value in map(next, (self.gen,)):
            return value
        raise RuntimeError("generator didn't yield") from None


def kept_contextmanager(
    func: Callable[P, Iterator[T]],
) -> Callable[P, _GeneratorContextManager[T]]:
    """``contextlib.contextmanager``, but an interrupt (a signal handler's exception) never
    lands between the generator's ``yield`` and the ``with`` block: contextlib's
    ``__enter__`` returns ``next()``'s value, and one landing on that C call's return ran
    no ``__exit__``, so what the generator held stayed held until the exception's
    traceback was freed (review87: a compaction's reservation refused every open of the
    store in this process while the caller kept the exception)."""

    @wraps(func)
    def helper(*args: P.args, **kwds: P.kwargs) -> _GeneratorContextManager[T]:
        return _KeptGeneratorContextManager(cast(Any, func), args, kwds)

    return helper


def take_write_lock(lock: Any, *, blocking: bool = True, timeout: float = -1) -> bool:
    """``lock.acquire(blocking, timeout)`` on an RLock, letting go of the hold it took
    when an interrupt (a signal handler's exception) lands on the acquire's return: the
    caller's ``try`` that releases it was not entered yet, so the lock stayed this
    thread's for good and every other thread's write waited forever (review78 found it
    in ``write``; ``try_flush_here``, ``quiesced`` and the registry's close of an
    environment left open had the same window). Whether this call took a hold is told
    by the RLock's own recursion count, before and after, so a thread that already held
    the lock keeps its outer hold whatever the interrupt lands on (``write``'s inline
    copy asked only whether the lock was owned, and kept a second hold for good)."""
    before: int = lock._recursion_count()
    try:
        got: bool = lock.acquire(blocking, timeout)
    except BaseException:
        if lock._recursion_count() > before:
            lock.release()
        raise
    return got
