"""PostgreSQL: reading the store back to settle a write whose COMMIT lost its connection.

:meth:`PgBackend.commit` (a single put) and :meth:`PgBackend.flush` (a batch) hand
:func:`cpstore.store.commit.settle_by_reading` this read: committed, the write returns;
absent, "not stored"; unreadable, the outcome stays open (``CommitLostError``).

The read first waits for the store's writer lock (shared; at most :data:`SETTLE_WAIT`
seconds, else the outcome stays open). The lost txn's session may still be alive on the
server, holding that lock: its COMMIT not arrived yet (still on the wire), or under way
(a synchronous standby's acknowledgement awaited, the commit invisible to other sessions
until then). Read at once, the store showed such a txn absent and it committed after
the "not stored": a false "not stored", and a retry met its own result as a conflict.
Once the lock is granted the lost txn has ended, committed or rolled back, and no COMMIT
can reach it later. The read runs READ COMMITTED: a REPEATABLE READ snapshot would be
taken as the lock statement begins, before the wait; the shared lock keeps every writer
(each takes it exclusively) out while the read runs, so its reads see one state.
The caller marks its thread as holding the lock meanwhile (PgBackend._landed): a write
of the same store run on that thread inside the read (a finalizer's flush) would wait
for the read's own lock for ever.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cpstore.store.backend import Txn
from cpstore.store.commit import landed
from cpstore.store.content import records_of
from cpstore.store.model import CheckpointWrite
from cpstore.store.pg_table import PgTable
from cpstore.store.pg_txn import PgTxn

__all__ = ["SETTLE_WAIT", "landed_on_server", "read_back_begin"]

#: Seconds the read-back waits for the store's writer lock (the lost txn's end).
SETTLE_WAIT = 10.0


def read_back_begin(lock_key: int, wait: float) -> list[tuple[str, tuple[Any, ...]]]:
    """The statements that open the read-back txn: it holds the store's writer lock,
    shared, once they ran (``lock_timeout`` ``wait`` seconds: StoreError after it)."""
    return [
        ("BEGIN ISOLATION LEVEL READ COMMITTED READ ONLY", ()),
        (f"SET LOCAL lock_timeout = {max(1, int(wait * 1000))}", ()),
        ("SELECT pg_advisory_xact_lock_shared(%s)", (lock_key,)),
    ]


def landed_on_server(
    txn: PgTxn,
    tables: Mapping[str, PgTable],
    ops: Sequence[CheckpointWrite],
    head: Callable[[Txn[memoryview], bytes], bytes | None],
) -> bool | None:
    """Whether the txn of ``ops`` committed (commit.landed), read in ``txn``, a txn opened
    by :func:`read_back_begin`'s statements, which this ends."""
    try:
        txn.begin_now()  # the lock first: nothing is read before the lost txn has ended
        records, tombs = records_of(tables), tables["tombstones"]
        return landed(
            ops,
            lambda key: head(txn, key),
            lambda cid: records.stored(txn, cid),
            lambda cid: txn.get(cid, db=tombs) is not None,
        )
    finally:
        txn.abort()
