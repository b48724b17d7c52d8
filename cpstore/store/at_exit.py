"""What a normal interpreter exit does for stores and recorders left open.

A batched store queues checkpoints whose ids it already returned; an exit
without ``close()`` would drop them. Every open store is tracked weakly (the
registry never keeps one alive) and flushed by an ``atexit`` hook, in the
process that opened it only: after ``fork()`` the child's copy of the
registry is emptied, since the parent's environment is not the child's.
A recorder holding side effects no checkpoint sealed is reported at exit
with a :class:`RuntimeWarning` (``Recorder.close`` raises instead).
"""

from __future__ import annotations

import atexit
import os
import warnings
import weakref
from typing import Protocol

__all__ = ["track_recorder", "track_store"]


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
    for recorder in list(_RECORDERS):
        recorder._warn_unsealed("at interpreter exit")
    for store in list(_STORES):
        try:
            store.flush_at_exit()
        except Exception as exc:  # an exit hook must not hide the others
            warnings.warn(
                f"cpstore could not flush queued checkpoints at exit: {exc}",
                RuntimeWarning,
                stacklevel=1,
            )


os.register_at_fork(after_in_child=_forget_in_child)
atexit.register(_at_exit)
