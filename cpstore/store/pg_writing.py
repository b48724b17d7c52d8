"""PostgreSQL: which stores' writer locks this thread holds (or is waiting for).

A write txn takes its store's advisory writer lock on its own pooled connection.
The same thread cannot wait for that lock again on another connection while the
outer txn waits for the thread: the server sees no deadlock, only two sessions
(one waiting for ever, or until ``statement_timeout``). :class:`PgBackend
<cpstore.store.pg_backend.PgBackend>` marks a thread for the length of each write
txn (and of a lost commit's read-back, which holds the lock shared), refuses a
write nested on a marked thread, and sends a finalizer's flush on a marked thread
to a helper thread instead (``try_flush_here``).
"""

from __future__ import annotations

import threading

from cpstore.errors import ReentrantWriteError

__all__ = ["not_nested", "writing", "writing_here"]

#: Per thread: (identity, writer lock key) of the stores it is inside a write txn of; the
#: identity is the store's id and database (pg_open.write_identity), the same for every
#: spelling of its URL.
_WRITING = threading.local()


def writing() -> list[tuple[str, int]]:
    """This thread's held writes, as (identity, lock key); the caller appends and removes."""
    held: list[tuple[str, int]] = _WRITING.__dict__.setdefault("keys", [])
    return held


def writing_here(key: int) -> bool:
    """True when this thread holds the writer lock ``key`` (any store of that schema
    name: an alias URL of the same store too)."""
    return any(k == key for _, k in getattr(_WRITING, "keys", ()))


def not_nested(identity: str, key: int, where: str) -> list[tuple[str, int]]:
    """This thread's held writes; ReentrantWriteError when one is of the store ``(identity, key)``.

    The outer txn's connection holds (or takes at its next round trip) the store's
    writer lock: a write txn (or a writable open, which takes the lock to check the
    schema) nested on the same thread would wait for it on another connection while the
    outer waits for this thread, a deadlock the server cannot see. It waited for ever
    (or until ``statement_timeout``); refused at once, as LMDB refuses it.
    """
    held = writing()
    if (identity, key) in held:
        raise ReentrantWriteError(
            "a write transaction nested inside a write transaction of the same store "
            "on one thread would wait for ever on the store's writer lock; refused "
            "(write after the outer one commits, or on another thread)",
            where=where,
        )
    return held
