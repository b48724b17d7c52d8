"""The PostgreSQL backend: :class:`~cpstore.store.backend.Backend` over psycopg 3 and a pool.

``cpstore.open("postgresql://...")`` builds it. The tables hold the same bytes
under the same keys as LMDB's named databases (:mod:`cpstore.store.pg_open`);
transactions are :class:`~cpstore.store.pg_txn.PgTxn`. Writers serialize on
one advisory lock per store (LMDB's one-writer model, across hosts), so a
ref's compare-and-set, the objects and checkpoint it points to, and the audit
log's tip all move in one serial order; a commit is durable when the server
acknowledges it (``synchronous_commit`` as the server sets it; off for the
checkpoints of ``durability="none"``).
"""

from __future__ import annotations

import os
import threading
from _thread import LockType
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Any, TypeVar

import psycopg
from psycopg_pool import PoolClosed, PoolTimeout

from cpstore.errors import (
    CommitLostError,
    CpstoreError,
    ForkError,
    StoreClosedError,
    StoreError,
    StoreReadOnlyError,
)
from cpstore.native.canonical import encode_value
from cpstore.native.records import Digest
from cpstore.store.at_exit import ExitGate
from cpstore.store.audit_mac import check_key
from cpstore.store.backend import StoreSpace, Txn
from cpstore.store.backend_base import FORK_MARKED, BackendBase
from cpstore.store.batch_fates import interrupted
from cpstore.store.batch_owners import BatchOwners, Owner
from cpstore.store.commit import settle_by_reading
from cpstore.store.content import objects_of
from cpstore.store.entries import read_entry, read_head
from cpstore.store.keyed_audit import adopt_key
from cpstore.store.lmdb_backend import Durability
from cpstore.store.lmdb_env import DB_NAMES
from cpstore.store.lmdb_open import FORMAT_KEY, PG_FORMAT, check_format
from cpstore.store.manifest import manifest_references
from cpstore.store.model import BARE_REF_LAYOUTS, PG_STORE_VERSION, CheckpointWrite, ref_key
from cpstore.store.objects import get_object, put_object
from cpstore.store.pg_apply import abort_again, apply_batch
from cpstore.store.pg_count import COUNTED, counts_kept, counts_table
from cpstore.store.pg_errors import ENGINE_ERRORS, failed, translate
from cpstore.store.pg_interrupted import commit_alone
from cpstore.store.pg_open import lock_key, parse_url, prepare_schema, write_identity
from cpstore.store.pg_pool import connect, end_lost_for_waiters, make_pool, take
from cpstore.store.pg_settle import SETTLE_WAIT, landed_on_server, read_back_begin
from cpstore.store.pg_table import PgTable, settled
from cpstore.store.pg_txn import PgTxn
from cpstore.store.pg_writing import not_nested, writing, writing_here
from cpstore.store.reentry import Reentry
from cpstore.store.refs import upgrade_refs_v1

__all__ = ["PgBackend"]

T = TypeVar("T")

#: Seconds a txn waits for a pooled connection before StoreConnectionError.
POOL_WAIT = 30.0


class PgBackend(BackendBase):
    """One open store on PostgreSQL (see :class:`~cpstore.store.backend.Backend`)."""

    def __init__(
        self,
        url: str,
        *,
        durability: Durability,
        readonly: bool,
        create: bool,
        batch_size: int,
        audit_key: bytes | None,
    ) -> None:
        self._url = parse_url(url)
        self._path = self._url.shown
        self.durability: Durability = durability
        self._readonly = bool(readonly)
        self._batch_size = batch_size
        self._pending: list[CheckpointWrite] = []
        self._pending_lock = threading.Lock()
        # Whose writes a batch holds (batch_owners.py).
        self._owners: BatchOwners[CheckpointWrite] = BatchOwners(self._path)
        # A signal handler's write inside commit() or flush() on its thread: refused (it
        # waited for ever on the queue's lock its thread held, or closed the pool: audit44).
        self._reentry = Reentry(self._path)
        self._exit_gate: ExitGate | None = None  # the exit flush's bound on the writer lock
        self._exit_ran = False  # what it left queued it named: no flush from __del__ after it
        self._pid = os.getpid()
        FORK_MARKED.add(self)  # 0 in a fork() child (backend_base)
        self._closed = True
        # The close under way (its thread, a lock it holds until done): released by close.
        self._closer: tuple[int, LockType] | None = None
        #: Read txns whose holder was freed before its exit ended them (lost_read).
        self._lost: deque[Txn[memoryview]] = deque()
        self._close_claim = threading.Lock()
        key = None if audit_key is None else check_key(audit_key)
        self._audit_key = key
        self._lock_key = lock_key(self._url.schema)
        self._tables = {name: PgTable.of(self._url.schema, name) for name in DB_NAMES}
        self._extra: list[str] = []  # the counts table (pg_count), when the store has it
        self._ident = self._url.conninfo  # a write's identity on its thread (pg_writing)
        try:
            with connect(self._url.conninfo, self._path) as conn:
                ident = self._ident
                if not self._readonly:  # the open locks too; by the store's id, not its URL
                    ident = write_identity(conn, self._url)
                    not_nested(ident, self._lock_key, self._path)
                self._layout, counted = prepare_schema(
                    conn, self._url, readonly=self._readonly, create=create
                )
                if counted:  # the refs count the server keeps (pg_count), not a count(*)
                    self._tables.update(
                        (name, PgTable.of(self._url.schema, name, counted=True)) for name in COUNTED
                    )
                elif counts_kept(conn, self._url.schema):  # not reinstalled by this role:
                    # its creates count(*), verify() compares the kept count (review73)
                    self._tables.update(
                        (name, PgTable.of(self._url.schema, name, kept=True)) for name in COUNTED
                    )
                self._extra = [counts_table(self._url.schema)] if counted else []
                if ident == self._url.conninfo and not self._readonly:  # no id before the lock
                    ident = write_identity(conn, self._url)  # made by prepare_schema, if it may
                self._ident = ident
        except psycopg.Error as exc:
            raise translate(exc, self._path) from None
        self._pool = make_pool(
            self._url.conninfo,
            max_size=self._url.pool_max,
            name=f"cpstore-{self._url.schema}",
            wait=POOL_WAIT,
        )
        self._pool.open(wait=False)
        self._closed = False
        try:
            if self._layout < PG_STORE_VERSION and not self._readonly:
                self.write_txn(self._upgrade)
            if key is None or self._readonly:
                with self.read_txn() as txn:
                    self._audit_keyed = adopt_key(txn, self._tables, key, write=False)
            else:
                self._audit_keyed = bool(
                    self.write_txn(lambda txn: adopt_key(txn, self._tables, key))
                )
        except BaseException:
            self._closed = True
            self._pool.close()
            raise

    def _upgrade(self, txn: Txn[memoryview]) -> None:
        # The layout is read again under the writers' lock: another process may
        # have upgraded since prepare_schema read it, and only a layout-1 store's
        # refs are bare ids (rewriting checked refs would reset the refs digest).
        meta = self._tables["meta"]
        version = check_format(txn.get(FORMAT_KEY, None, meta), self._path)
        if version < PG_STORE_VERSION:
            if version in BARE_REF_LAYOUTS:
                upgrade_refs_v1(txn, self._tables)
            txn.put(FORMAT_KEY, encode_value(PG_FORMAT), db=meta)
        self._layout = max(version, PG_STORE_VERSION)

    # -- what it is ------------------------------------------------------------

    @property
    def schema(self) -> str:
        """The database schema that holds the store's tables."""
        return self._url.schema

    @property
    def readonly(self) -> bool:
        """True when opened read-only."""
        return self._readonly

    @property
    def layout(self) -> int:
        """The store layout read from the format record."""
        return self._layout

    def layout_in(self, txn: Txn[memoryview]) -> int:
        """The layout (a PostgreSQL store is made at the current one, upgraded on open)."""
        return self._layout

    @property
    def dbs(self) -> Mapping[str, Any]:
        """Named table -> its :class:`PgTable` handle."""
        return self._tables

    @property
    def engine_error(self) -> type[Exception]:
        """``psycopg.Error`` (txns translate it themselves; this is for the reader's guard)."""
        return psycopg.Error

    def translate(self, exc: Exception) -> CpstoreError:
        """The cpstore error for a psycopg failure."""
        return translate(exc, self._path)

    # -- lifecycle ---------------------------------------------------------------

    def close(self) -> None:
        """Flush queued checkpoints (batched mode) and close the pool: once when two threads
        close at once, the later waiting for the earlier's (as LmdbBackend.close)."""
        if os.getpid() != self._pid:  # a fork child: never waits for the parent's close (the
            self._closed = True  # claim's lock no thread of it lets go: it hung, audit48) and
            return  # closes nothing of the parent's (the pool's connections)
        self._reentry.refuse()  # a signal handler's close: never under a write under way
        # Held until this close ends, released in its last ``finally`` by a C call: an
        # Event's ``set`` is Python, and an interrupt (a signal handler's exception)
        # landing at its start skipped it, so every other thread's close waited for good
        # (review89). Taken before the claim: nobody waits on it until then.
        done = threading.Lock()
        done.acquire()
        mine = (threading.get_ident(), done)
        kept = False
        # The claim is taken inside the try whose finally ends it (as LmdbBackend.close):
        # an interrupt landing on the claim lock's release left it set (intr88).
        try:
            with self._close_claim:
                closer = self._closer
                if closer is None and not self._closed:
                    self._closer = mine
            if closer is not None or self._closed:
                if closer is not None and closer[0] != mine[0]:
                    with closer[1]:  # never waits for itself; free once that close ended
                        pass  # taken and given back with no point between where one lands
                    self._owners.after_other_close(lambda: self._closed, self.close)  # kept open
                return
            if self.durability == "batched" and os.getpid() == self._pid:
                self._owners.drain(self.flush, self._pending)  # raises as flush()
        except BaseException:
            kept = True  # kept open if its batch is queued again (no call here)
            raise
        finally:
            if self._closer is mine:
                try:  # kept open: the next close or the exit flush commits it (lmdb_backend)
                    if kept and self._pending:
                        self._closer = None
                    else:
                        self._closed = True
                        # Tried again while an interrupt (a signal handler's exception)
                        # lands before the pool is closed: one landing on ``os.getpid()``'s
                        # return or at the pool close's start left it open, with its server
                        # connections, for the process's life, ``_closed`` set so no later
                        # close closed it (review89).
                        # Its own error ends the loop too: the pool sets ``closed`` first.
                        late: BaseException | None = None
                        while True:
                            try:
                                if os.getpid() != self._pid or self._pool.closed:
                                    break
                                self._pool.close()
                            except BaseException as exc:
                                late = exc
                        try:  # lost reads: their sessions end (the pool closes what comes back)
                            self._end_lost()
                        except BaseException as exc:
                            late = late or exc
                        if late is not None:
                            raise late
                finally:
                    done.release()

    def _here(self) -> bool:
        return not self._closed and os.getpid() == self._pid

    def try_flush_here(self) -> bool:
        """A finalizer's flush (at_exit.flush_collected): False, nothing done, inside a write
        txn of this store on this thread (it waits for ever on its own lock); else True."""
        if writing_here(self._lock_key) or self._reentry.inside():  # in commit(): its queue
            return False  # lock may be held (a helper thread flushes once it is let go)
        self.flush()
        return True

    def live(self) -> None:
        """Raise StoreError when closed, ForkError in a forked child."""
        if self._closed:
            raise StoreClosedError(where=self._path)
        if os.getpid() != self._pid:
            raise ForkError(
                "store used after fork(); open it again in the child",
                where=self._path,
                expected=f"pid {self._pid}",
                got=f"pid {os.getpid()}",
            )

    def disk_bytes(self) -> int:
        """Bytes the store's tables take on the server, indexes and TOAST included."""
        self.live()
        with self.read_txn() as txn:
            assert isinstance(txn, PgTxn)
            return txn.relation_bytes([t.qualified for t in self._tables.values()] + self._extra)

    def space(self) -> StoreSpace:
        """The tables' bytes on the server; ``reusable_bytes`` is 0 (not measured: space of
        deleted rows is the server's business, reused after (auto)vacuum)."""
        used = self.disk_bytes()
        return StoreSpace(file_bytes=used, used_bytes=used, reusable_bytes=0)

    def copy_to(self, dest: str, *, compact: bool) -> None:
        """Refused: copy a PostgreSQL store with ``cpstore pull`` (verified) or pg_dump."""
        raise StoreError(
            "a PostgreSQL store is not copied into a folder by copy; "
            "use `cpstore pull SOURCE --store DEST` (every object verified) or pg_dump",
            where=dest,
        )

    # -- connections and transactions ------------------------------------------------

    def _acquire(self, wait: float = POOL_WAIT) -> psycopg.Connection[Any]:
        try:  # lost reads' connections back first, and while it waits (pg_pool.take)
            return take(self._pool, wait, self._end_lost)
        except PoolTimeout as exc:
            raise failed(
                f"no connection to the server within {wait:.0f} s", self._path, exc
            ) from None
        except PoolClosed:  # closed while it waited: not "the next operation reconnects"
            raise StoreClosedError(where=self._path) from None

    def _release(self, conn: psycopg.Connection[Any], broken: bool) -> None:
        broken = broken or not settled(conn)  # busy (an interrupted round trip): never pooled
        if broken and not conn.closed:
            conn.close()
        self._pool.putconn(conn)
        if broken:
            # The server restarted or dropped us: the idle ones are likely dead too.
            self._pool.check()

    def _txn(self, *, write: bool, synchronous: bool = True) -> PgTxn:
        if write:
            begin: list[tuple[str, tuple[Any, ...]]] = [
                ("BEGIN ISOLATION LEVEL READ COMMITTED", ()),
                ("SELECT pg_advisory_xact_lock(%s)", (self._lock_key,)),
            ]
            if not synchronous:
                begin.append(("SET LOCAL synchronous_commit = off", ()))
        else:
            begin = [("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", ())]
        return PgTxn(self._acquire, self._release, begin, write=write, where=self._path)

    def db(self, name: str) -> Any:
        """The handle of table ``name``."""
        return self._tables[name]

    @contextmanager
    def _read(self) -> Iterator[Txn[memoryview]]:
        txn = self.begin_read()
        try:
            yield txn
        finally:
            self.end_read(txn)

    def read_txn(self) -> AbstractContextManager[Txn[memoryview]]:
        """A REPEATABLE READ snapshot for a ``with`` block."""
        self.live()
        return self._read()

    def begin_read(self) -> Txn[memoryview]:
        """A read txn held by an object; end it with :meth:`end_read`."""
        self.live()
        return self._txn(write=False)

    def end_read(self, txn: Txn[memoryview], holder: Any = None) -> None:
        """End a txn from :meth:`begin_read` (``holder``: nothing to tell); a fork() child's is
        left: its ROLLBACK, on the parent's session, ended the parent's snapshot (review93)."""
        if os.getpid() == self._pid:
            txn.abort()

    def lost_read(self, txn: Txn[memoryview], who: int) -> None:
        """From a finalizer, any thread (Backend's): ``txn`` is ended by the next connection
        taken from the pool, a thread started for a wait under way (pg_pool) or the close
        (:meth:`_end_lost`), not here (a round trip, the pool's lock). Before, its connection
        stayed checked out: ``pool_max`` lost reads failed every later use after 30 s (review90)."""
        if os.getpid() == self._pid:  # a fork() child's: the parent's connection
            self._lost.append(txn)
            end_lost_for_waiters(self._pool, self._end_lost)

    def _end_lost(self) -> None:
        """Abort each lost read (lost_read): its connection goes back to the pool."""
        lost = self._lost
        while lost and os.getpid() == self._pid:
            taken: list[Txn[memoryview]] = []
            try:
                # Kept as it is taken (map: no bytecode between, so no landing of an
                # interrupt), inside the try that puts it back if its abort is cut short.
                taken.extend(map(deque.popleft, (lost,)))
                taken[0].abort()
            except BaseException as exc:
                if not taken and isinstance(exc, IndexError):
                    return  # another thread took the last one
                lost.extend(taken)  # tried again by the next acquire (abort: once)
                raise

    def write_txn(self, fn: Callable[[Txn[memoryview]], T]) -> T:
        """Run ``fn`` in one write txn under the store's writer lock and commit."""
        return self._write(fn, synchronous=True)

    def _write(self, fn: Callable[[Txn[memoryview]], T], *, synchronous: bool) -> T:
        self.live()
        if self._readonly:
            raise StoreReadOnlyError("the store was opened read-only", where=self._path)
        held = not_nested(self._ident, self._lock_key, self._path)
        mine = (self._ident, self._lock_key)
        held.append(mine)  # try_flush_here: no write nested on this thread
        try:
            txn = self._txn(write=True, synchronous=synchronous)
            try:
                result = fn(txn)
                txn.commit()
            except BaseException:
                try:
                    txn.abort()  # a no-op after a commit that ended the txn; else it returns
                except BaseException:  # a second interrupt: never left holding the lock
                    abort_again(txn, self._release)
                    raise
                raise
        finally:
            held.remove(mine)
        return result

    # -- objects -------------------------------------------------------------------

    def put_objects(self, objects: Mapping[bytes, bytes]) -> None:
        """Write-once put of every object, in one txn (one round trip to look, one to write)."""
        handle = self._tables["objects"]

        def put(txn: Txn[memoryview]) -> None:
            assert isinstance(txn, PgTxn)
            txn.prefetch({handle: list(objects)})
            direct = objects_of(self._tables)  # no heap on PostgreSQL: the objects table
            for key, data in objects.items():
                put_object(txn, direct, key, data)

        self.write_txn(put)

    def get_objects(self, keys: list[Digest], *, verify: bool) -> list[bytes]:
        """The bytes under each key, in one read txn and one round trip."""
        handle = self._tables["objects"]
        with self.read_txn() as txn:
            assert isinstance(txn, PgTxn)
            txn.prefetch({handle: keys})
            direct = objects_of(self._tables)
            return [
                bytes(get_object(txn, direct, key, verify=verify, where=f"objects/{key.hex()}"))
                for key in keys
            ]

    # -- checkpoints -------------------------------------------------------------
    # load_raw / head: the shared read rule (entries.py) plus this engine's prefetch.

    def load_raw(
        self,
        txn: Txn[memoryview],
        cid: bytes,
        *,
        verify: bool,
        full: bool = True,
        hints: list[bytes] | None = None,
    ) -> tuple[dict[str, Any], bytes]:
        """(manifest map, 16-byte entry header) of a checkpoint (entries.read_entry);
        no location hints here (the direct tables: content.py)."""
        raw, header = read_entry(txn, self._tables, cid, verify=verify, full=full, hints=hints)
        if not full and isinstance(txn, PgTxn) and not txn.write:
            # The reader's path (only the state checked): its next reads are the state's
            # objects, fetched here in one round trip rather than one each.
            # The parent's entry comes along: a history walk reads it next.
            state = [k for _, k in manifest_references({"state": raw["state"]})]
            parent = raw.get("parent")
            parents = [parent] if isinstance(parent, bytes) and len(parent) == len(cid) else []
            txn.prefetch({self._tables["objects"]: state, self._tables["checkpoints"]: parents})
        return raw, header

    def head(self, txn: Txn[memoryview], key: bytes) -> bytes | None:
        """The checkpoint ref ``key`` names, or None; its check and target are verified."""
        return read_head(txn, self._tables, key, layout=self._layout, load_raw=self.load_raw)

    def commit(self, op: CheckpointWrite) -> None:
        """Commit ``op`` now (sync, none) or queue it (batched, flushed every ``batch_size``);
        ReentrantWriteError inside a commit or flush of this store on this thread (a signal
        handler's: it waited for ever on the queue's lock its thread held)."""
        self._reentry.run(self._commit, op)

    def _commit(self, op: CheckpointWrite) -> None:
        if self.durability != "batched":  # a handler's exception after the apply: the
            sync = self.durability == "sync"  # store read back, op marked if stored
            commit_alone(
                op, lambda fn: self._write(fn, synchronous=sync), self._apply_all, self._landed
            )
            return
        self.live()
        with self._pending_lock:
            if self._closer is not None:  # never queued behind the close's flush (closing)
                raise StoreClosedError("the store is closing", where=self._path)
            self._pending.append(op)
            self._owners.queued(op)
            full = len(self._pending) >= self._batch_size
        if full:  # interrupted with op queued again: op leaves the queue (batch_owners)
            self._owners.flush_for(self._flush, op, self._pending, self._pending_lock)

    def _landed(self, ops: list[CheckpointWrite]) -> bool | None:
        """Whether the txn of ``ops`` committed, read back once it has ended (pg_settle; at
        exit, waits bounded). It holds the writer lock (shared), so it is a write txn on this
        thread (pg_writing): a finalizer's flush in it goes to a helper thread (no hang)."""
        self.live()
        bound = self._owners.exit_wait  # None but at exit
        wait = POOL_WAIT if bound is None else min(POOL_WAIT, bound)
        begin = read_back_begin(self._lock_key, min(SETTLE_WAIT, wait))
        txn = PgTxn(
            lambda: self._acquire(wait), self._release, begin, write=False, where=self._path
        )
        held = writing()
        mine = (self._ident, self._lock_key)
        held.append(mine)
        try:
            return landed_on_server(txn, self._tables, ops, self.head)
        finally:
            held.remove(mine)

    def flush(self) -> None:
        """Commit every queued checkpoint in one txn (batched mode); a no-op otherwise.

        On failure (e.g. a ref conflict) the whole batch is rolled back and dropped; an
        interrupt is settled as lmdb_backend.flush's. A lost COMMIT is settled by reading
        the store back, as in :meth:`commit`. The batch is taken under the writer lock.
        ReentrantWriteError inside a commit or flush of this store on this thread."""
        self._reentry.run(self._flush)

    def _flush(self) -> None:
        if os.getpid() != self._pid and self.durability == "batched":
            self.live()  # ForkError: a fork child never waits for the parent's batches (audit20)
        while self._flush_once():  # another thread's interrupted flush requeued ours
            pass

    def _flush_once(self) -> bool:
        if not self._pending:
            return self._owners.wait_mine()  # another thread's flush may hold our writes
        batch: list[CheckpointWrite] = []  # filled with the owners in one step (taken)
        owners: list[Owner] = []
        applied = requeue = False
        behind: tuple[int, ...] = ()  # batches in flight: nothing taken (BatchOwners.taken)

        def apply_all(txn: Txn[memoryview]) -> None:
            nonlocal applied, behind
            if not isinstance(txn, PgTxn):
                raise TypeError(f"a PostgreSQL write needs a PgTxn, got {type(txn).__name__}")
            txn.begin_now()  # BEGIN and the advisory writer lock, before the batch is taken
            if self._exit_gate is not None:
                self._exit_gate.enter()  # the exit flush gave up on the lock: not taken
            # The queue and its owners go in flight together or not at all (lmdb_backend).
            head = lambda run, branch: self.head(txn, ref_key(run, branch))  # noqa: E731
            behind = self._owners.take(self._pending, self._pending_lock, owners, batch, head)
            if batch:  # interrupted: requeued in the txn, under the writer lock (batch_owners)
                taken, queue = (owners, batch), (self._pending, self._pending_lock)
                self._owners.applying(lambda: self._apply_all(txn, batch), taken, queue)
            applied = True

        failed: BaseException | None = None
        try:
            try:
                self.write_txn(apply_all)
            except CommitLostError as exc:  # settled as a single put is (commit()): every
                landed = lambda: self._landed(batch)  # noqa: E731
                if not batch or not settle_by_reading(exc, landed, ENGINE_ERRORS):
                    raise  # owner gets the verdict (a "not stored" one raised here too)
            for op in batch:  # before settled() wakes their threads
                op.committed = True
        except BaseException as exc:
            failed = exc  # dropped: the other threads' flushes must say so (False: it landed)
            fate = interrupted(exc, applied, lambda: self._landed(batch), batch) if batch else None
            requeue, failed = fate is True, None if fate is False else exc
            raise
        finally:  # an interrupt must not leave a taken batch unsettled (lmdb_backend)
            try:
                if requeue:  # an interrupt before the commit: queued again (lmdb_backend)
                    with self._pending_lock:
                        self._owners.requeued(owners, batch, self._pending)
                self._owners.settled(owners, failed)
            except BaseException:
                self._owners.settled(owners, failed)
                raise
        return self._owners.wait_mine(behind)

    def _apply_all(self, txn: Txn[memoryview], ops: list[CheckpointWrite]) -> None:
        """Prefetch what every op reads (one round trip), then apply them in order."""
        if not isinstance(txn, PgTxn):
            raise TypeError(f"a PostgreSQL write needs a PgTxn, got {type(txn).__name__}")
        apply_batch(txn, self._tables, ops, self._layout)
