"""The LMDB backend: the first implementation of :class:`~cpstore.store.backend.Backend`.

It owns the environment handle (shared per data file per process: lmdb_env.py), the audit
key, and the checkpoint write queue of batched durability. Everything the upper modules do
to LMDB goes through it; :class:`~cpstore.store.facade.Store` composes it with them.
"""

from __future__ import annotations

import os
import threading
from _thread import LockType
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Literal, TypeVar

import lmdb

from cpstore.errors import (
    CpstoreError,
    OutcomeUnknownError,
    StoreClosedError,
    StoreError,
    StoreFatalError,
    StoreFullError,
    StoreReadOnlyError,
)
from cpstore.native.records import Digest
from cpstore.store.at_exit import ExitGate
from cpstore.store.audit_mac import check_key
from cpstore.store.backend import StoreSpace, Txn
from cpstore.store.backend_base import BackendBase
from cpstore.store.batch_fates import foreign, interrupted
from cpstore.store.batch_owners import BatchOwners, Owner
from cpstore.store.commit import apply_writes
from cpstore.store.content import objects_of, tail_committed
from cpstore.store.entries import read_entry, read_head
from cpstore.store.fast_read import contents
from cpstore.store.group_commit import GroupCommit
from cpstore.store.keyed_audit import adopt_key
from cpstore.store.lmdb_copy import copy_open, space_of
from cpstore.store.lmdb_env import Env
from cpstore.store.lmdb_errors import translate
from cpstore.store.lmdb_interrupted import GroupFates, commit_raised
from cpstore.store.lmdb_open import EnvOptions
from cpstore.store.lmdb_registry import acquire_env, release_env
from cpstore.store.lmdb_settle import batch_landed, commit_failed, growth_failed
from cpstore.store.lmdb_txns import take_write_lock
from cpstore.store.model import CheckpointWrite, ref_key
from cpstore.store.objects import get_object, put_object
from cpstore.store.reentry import shared_reentry

__all__ = ["DURABILITY_MODES", "Durability", "LmdbBackend"]

T = TypeVar("T")
_FULL = lmdb.MapFullError  # lmdb_settle.growth_failed: only this module imports lmdb

#: ``"sync"``: every checkpoint is fsynced before the call returns.
#: ``"batched"``: checkpoints are queued and committed ``batch_size`` at a time.
#: ``"none"``: every checkpoint is committed at once but never fsynced by cpstore
#: (a process crash loses nothing, an OS crash may lose the last commits).
Durability = Literal["sync", "batched", "none"]

#: Every durability mode, in the order errors list them.
DURABILITY_MODES: tuple[Durability, ...] = ("sync", "batched", "none")


class LmdbBackend(BackendBase):
    """One open store on LMDB (see :class:`~cpstore.store.backend.Backend`)."""

    def __init__(
        self,
        path: str,
        *,
        durability: Durability,
        readonly: bool,
        create: bool,
        map_size: int,
        max_map_size: int,
        batch_size: int,
        audit_key: bytes | None,
    ) -> None:
        self._path = path
        self.durability: Durability = durability
        self._batch_size = batch_size
        self._pending: list[CheckpointWrite] = []
        self._pending_lock = threading.Lock()
        # Whose writes a batch holds (batch_owners.py).
        self._owners: BatchOwners[CheckpointWrite] = BatchOwners(path)
        # sync mode: concurrent threads' checkpoints share one txn and fsync. Not
        # GroupCommit[CheckpointWrite](...): ~50 us on first use, in every fresh open.
        self.group: GroupCommit[CheckpointWrite] = GroupCommit(self._commit_many, GroupFates(self))
        key = None if audit_key is None else check_key(audit_key)
        self._exit_gate: ExitGate | None = None  # the exit flush's bound on the writer lock
        self._exit_ran = False  # what it left queued it named: no flush from __del__ after it
        self._closed = False
        # The close under way (its thread, and a lock it holds until done): one close
        # releases (close).
        self._closer: tuple[int, LockType] | None = None
        self._close_claim = threading.Lock()
        self._audit_key = key
        self.env = acquire_env(
            path,
            EnvOptions(
                bool(readonly),
                map_size,
                max_map_size,
                bool(create),
                # A read-only open commits nothing: it never asks for no-sync.
                sync=durability != "none" or bool(readonly),
            ),
        )
        # From here the handle is released on every way out: an interrupt (a signal
        # handler's exception) landing at shared_reentry's start, before the try, left the
        # environment registered with a handle nobody held (left86's leftover: another
        # mode's open and a compaction refused for the process's life). Released, not
        # closed: no batch can be queued yet, and close() needs what is set here.
        try:
            # Never wait for a commit whose map growth waits for this thread's read.
            # A signal handler's write inside commit() or flush() of any handle of the env.
            self._reentry = shared_reentry(self.env, path)
            self._owners.blocked = self.env.read_blocks_resize
            if key is None or readonly:
                txn = self.env.begin_read()  # not read_txn(): no generator on the open path
                try:
                    self._audit_keyed = adopt_key(txn, self.env.dbs, key, write=False)
                except lmdb.Error as exc:
                    raise translate(exc, self.env.path) from None
                finally:
                    self.env.end_read(txn)
            else:
                self._audit_keyed = bool(
                    self.write_txn(lambda txn: adopt_key(txn, self.env.dbs, key))
                )
        except BaseException:
            self._closed = True
            release_env(self.env)
            raise

    # -- what it is ------------------------------------------------------------

    @property
    def readonly(self) -> bool:
        """True when opened read-only."""
        return bool(self.env.options.readonly)

    @property
    def layout(self) -> int:
        """The store layout read from the format record."""
        return self.env.layout

    def layout_in(self, txn: Txn[memoryview]) -> int:
        """The layout as ``txn`` sees it (another process may have upgraded the store)."""
        return self.env.layout_in(txn)

    @property
    def dbs(self) -> Mapping[str, Any]:
        """Named database -> its LMDB handle."""
        return self.env.dbs

    @property
    def engine_error(self) -> type[Exception]:
        """``lmdb.Error``: what :meth:`translate` maps."""
        error: type[Exception] = lmdb.Error
        return error

    def translate(self, exc: Exception) -> CpstoreError:
        """The cpstore error for an LMDB failure (StoreClosedError once closed, audit39)."""
        return (
            self.env.closed_error()
            if self.env.closed
            else translate(exc, self._path, readonly=self.readonly)
        )

    def close(self) -> None:
        """Flush queued checkpoints (batched mode) and release the environment: once when two
        threads close at once (the later waits, audit39, and closes itself what the earlier,
        interrupted in its flush, kept open with its batch queued: audit42, audit48). A fork()
        child's close never waits for its parent's (audit41) and closes nothing (release_env)."""
        if os.getpid() != self.env.pid:
            if not self._closed:  # else the parent's closer released it before the fork
                self._closed = True
                # Its handle dropped, tried again while an interrupt lands before the drop
                # (as below): one at release_env's start kept it, ``_closed`` set, and the
                # child was refused the store (ForkError) for life (left93). One past the
                # drop leaves the environment noted: the child's next open forgets it.
                held: list[Env | None] = [self.env]
                landed: BaseException | None = None
                while held[0] is not None:
                    try:
                        release_env(self.env, taken=held)
                    except BaseException as exc:
                        if held[0] is None:
                            raise
                        landed = exc
                if landed is not None:
                    raise landed
            return
        self._reentry.refuse()  # a signal handler's close: never under a write under way
        # Held until this close ends, released in its last ``finally`` by a C call: an
        # Event's ``set`` is Python, and an interrupt (a signal handler's exception)
        # landing at its start skipped it, so every other thread's close waited for good
        # (review89). Taken before the claim: nobody waits on it until then.
        done = threading.Lock()
        done.acquire()
        mine = (threading.get_ident(), done)
        failed: BaseException | None = None
        # The claim is taken inside the try whose finally ends it: an interrupt (a signal
        # handler's exception) landing on the claim lock's release (a C call's return) left
        # it set, so every later close returned at once, clean, the store open for the
        # process's life (and a batched store refused every put: "closing"; intr88).
        try:
            with self._close_claim:
                closer = self._closer
                if closer is None:
                    self._closer = mine
            if closer is not None:
                if closer[0] != mine[0]:  # never waits for itself
                    self._owners.wait_closed(closer[1])  # raises if it would wait on this one
                    self._owners.after_other_close(lambda: self._closed, self.close)  # kept open
                return
            if self.durability == "batched":
                self._owners.drain(self.flush, self._pending)  # raises as flush()
        except BaseException as exc:
            failed = exc  # kept open if its batch is queued again (no call here)
            raise
        finally:
            if self._closer is mine:
                try:  # kept open: the next close or the exit flush commits it (closed, lost)
                    if failed is not None and self._pending:
                        self._closer = None
                    else:
                        self._closed = True
                        # ``release_env`` (left open: raised, or a note on ``failed``), tried
                        # again while an interrupt (a signal handler's exception) lands
                        # before it dropped the handle (``taken`` cleared as it drops it):
                        # one landing at its start kept the handle with ``_closed`` set, so
                        # no later close released it, and the environment stayed open for
                        # the process's life (left86's leftover). Inline, not a method: a
                        # landing at such a method's start did the same (review89).
                        taken: list[Env | None] = [self.env]
                        late: BaseException | None = None
                        while taken[0] is not None:
                            try:
                                release_env(self.env, failed, taken=taken)
                            except BaseException as exc:
                                if taken[0] is None:  # dropped: the close's own error, or
                                    raise  # a later landing
                                late = exc
                        if late is not None:
                            raise late
                finally:
                    done.release()

    def _here(self) -> bool:
        return not self._closed and os.getpid() == self.env.pid

    def try_flush_here(self) -> bool:
        """A finalizer's flush (at_exit.flush_collected): done now (True) only when no thread
        of this process could be waiting on this one: this thread holds no write or read txn
        of the environment (a write txn nested on one thread is refused) and no other thread
        writes or reads it (it may wait for a lock the collecting thread holds); else False,
        nothing done. The write lock is held from that look to the end of the flush."""
        env = self.env
        if env.writes_here() or env.holds_read() or self._reentry.inside():  # another handle's
            return False  # write on this thread (shared_reentry): refused as nested; helper
        if not take_write_lock(env.write_lock, blocking=False):
            return False
        try:
            if env.reads_anywhere():
                return False
            self.flush()
        finally:
            env.write_lock.release()
        return True

    def _exit_bound(self, wait: float) -> None:
        self.env.resize_wait = wait  # a map growth's wait for other threads' reads

    def live(self) -> None:
        """Raise StoreError when closed, or used from a forked child."""
        if self._closed:
            raise StoreClosedError(where=self._path)
        self.env.check_pid()

    def disk_bytes(self) -> int:
        """Bytes of the data file that hold pages (what a copy would need)."""
        self.live()
        with self.env.held_open():  # a close meanwhile: StoreClosedError, never lmdb's own
            info = self.env.env.info()
            return int((info["last_pgno"] + 1) * self.env.env.stat()["psize"])

    def space(self) -> StoreSpace:
        """File size, bytes in pages in use, bytes in free pages (lmdb_copy.space_of)."""
        self.live()
        with self.read_txn() as txn:
            # The data file LMDB opened, by its held descriptor (a rename leaves it).
            return StoreSpace(*space_of(self.env.env, txn, self.env.dbs, self.env.data_at))

    def copy_to(self, dest: str, *, compact: bool) -> None:
        """LMDB's environment copy of one read snapshot (queued checkpoints flushed first)."""
        self.live()
        if self.pending:
            self.flush()
        copy_open(self.env, dest, compact=compact)  # a close waits for it

    def last_txnid(self) -> int:
        """The id of the last txn a read begun now sees (any process's commits).

        A read txn's own id, not ``info()["last_txnid"]`` (the newest meta page): a
        commit writes its meta page before it publishes its id in lock.mdb, so a read
        begun in between sees the txn before it. compact_store compares this id with
        the one it copies; the meta page's id made it compare a verify of txn N with a
        copy of N + 1 (a false "does not hold what the store holds", chaos test)."""
        txn = self.env.begin_read()
        try:
            return int(txn.id())  # type: ignore[attr-defined]
        finally:
            self.env.end_read(txn)

    # -- transactions ------------------------------------------------------------

    def db(self, name: str) -> Any:
        """The LMDB handle of database ``name``."""
        return self.env.dbs[name]

    def read_txn(self) -> AbstractContextManager[Txn[memoryview]]:
        """A read txn for a ``with`` block (the pid is checked)."""
        if self._closed:
            raise StoreClosedError(where=self._path)
        return self.env.read()

    def begin_read(self) -> Txn[memoryview]:
        """A read txn held by an object; end it with :meth:`end_read`."""
        if self._closed:
            raise StoreClosedError(where=self._path)
        return self.env.begin_read()

    def end_read(self, txn: Txn[memoryview], holder: Any = None) -> None:
        """End a txn from :meth:`begin_read` (``holder``: EnvTxns.end_read)."""
        self.env.end_read(txn, holder)

    def lost_read(self, txn: Txn[memoryview], who: int) -> None:
        """A txn :meth:`end_read` never got (Backend's; EnvTxns.lost_read)."""
        self.env.lost_read(txn, who)

    def kept_reads(self) -> deque[tuple[int, Any]]:
        """Reads a caller's zero-copy views keep past their block (EnvTxns.kept)."""
        return self.env.kept

    def write_txn(self, fn: Callable[[Txn[memoryview]], T]) -> T:
        """Run ``fn`` in one write txn and commit (retried after the map grows).

        Durable on return in every mode: with ``durability="none"`` (whose
        environment does not sync commits) the data file is fsynced after the
        commit. Only checkpoint commits skip it (:meth:`commit`). An LMDB
        failure once ``fn`` returned (the commit's, or the sync's) is
        OutcomeUnknownError: what ``fn`` wrote may or may not be stored (LMDB
        can report an error from a commit that took effect).
        """
        applied = False

        def run(txn: Txn[memoryview]) -> T:
            nonlocal applied
            applied = False  # a retried txn (map growth) runs fn again
            result = fn(txn)
            applied = True
            return result

        try:
            return self._write(run)
        except StoreError as exc:
            if not applied or growth_failed(exc, _FULL):
                raise  # refused or failed before the commit: not written
            if type(exc) not in (StoreError, StoreFatalError) and not (
                isinstance(exc, (StoreFullError, StoreReadOnlyError)) and self._fatal()
            ):
                raise  # full or read-only with LMDB sound (the txn aborted): not written
            raise OutcomeUnknownError(
                f"{exc.what} at the commit; what this txn wrote may or may not be stored",
                where=exc.where,
                expected=exc.expected,
                got=exc.got,
            ) from exc

    def _fatal(self) -> bool:
        """Whether LMDB refuses every txn now (MDB_PANIC): its commit failed writing the
        meta page, after its pages, and the new meta page may be on disk all the same
        (LMDB writes the old one back to the page cache only)."""
        try:
            self.env.end_read(self.env.begin_read())  # in the bookkeeping (resizes wait)
        except StoreFatalError:  # lmdb.PanicError, by class (lmdb_errors.translate)
            return True
        except StoreError:
            pass
        return False

    def _write(self, fn: Callable[[Txn[memoryview]], T]) -> T:
        """:meth:`write_txn` without telling its commit's errors apart."""
        if self._closed:
            raise StoreClosedError(where=self._path)
        result = self.env.write(fn)  # checks the pid (live()'s other half) first
        if not self.env.options.sync:
            try:
                self.env.sync()  # audit records, ref moves, prune: always durable
            except StoreError as exc:  # full or read-only too: the txn is committed already
                raise OutcomeUnknownError(
                    f"{exc.what} syncing after the commit; what this txn wrote is committed "
                    "but may or may not be stored durably (a crash may lose it)",
                    where=exc.where,
                    expected=exc.expected,
                    got=exc.got,
                ) from exc
        return result

    # -- objects -------------------------------------------------------------------

    def put_objects(self, objects: Mapping[bytes, bytes]) -> None:
        """Write-once put of every object, in one txn."""
        handle = objects_of(self.env.dbs)

        def put(txn: Txn[memoryview]) -> None:
            for key, data in objects.items():
                put_object(txn, handle, key, data)

        self.write_txn(put)

    def get_objects(self, keys: list[Digest], *, verify: bool) -> list[bytes]:
        """The bytes under each key, in one read txn."""
        with self.read_txn() as txn:
            handle = objects_of(self.env.dbs)
            return [
                bytes(get_object(txn, handle, key, verify=verify, where=f"objects/{key.hex()}"))
                for key in keys
            ]

    # -- checkpoints -------------------------------------------------------------

    def load_raw(
        self,
        txn: Txn[memoryview],
        cid: bytes,
        *,
        verify: bool,
        full: bool = True,
        hints: list[bytes] | None = None,
    ) -> tuple[dict[str, Any], bytes]:
        """(manifest map, 16-byte entry header) of a checkpoint (entries.read_entry)."""
        return read_entry(txn, self.env.dbs, cid, verify=verify, full=full, hints=hints)

    def head(self, txn: Txn[memoryview], key: bytes) -> bytes | None:
        """The checkpoint ref ``key`` names, or None; its check and target are verified."""
        return read_head(txn, self.env.dbs, key, layout=self.env.layout, load_raw=self.load_raw)

    def commit(self, op: CheckpointWrite) -> None:
        """Commit ``op`` now (sync, none) or queue it (batched, flushed every ``batch_size``).

        ReentrantWriteError when this thread is inside a commit or flush of this store
        already (a signal handler running inside it): it waited for itself, or LMDB
        refused a nested write txn."""
        self._reentry.run(self._commit, op)

    def _commit(self, op: CheckpointWrite) -> None:
        if self.durability == "sync":
            self.live()  # before the group's lock: a forked child must not wait on it
            if self.env.holds_read():
                # Never wait on a group holding a read: its map growth waits for this read.
                self._commit_many([op])
            else:
                self.group.commit(op)
            return
        if self.durability == "none":
            if self._closed:
                raise StoreClosedError(where=self._path)
            # No fsync: the point of "none". env.write checks the pid (live()'s other half).
            self._commit_many([op], durable=False)
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

    def _commit_many(self, ops: Sequence[CheckpointWrite], *, durable: bool = True) -> None:
        """Apply ``ops`` in order in one write txn (all or nothing), durable unless told
        not to sync; an error once applied is settled by lmdb_interrupted.commit_raised."""
        applied = False
        ran: tuple[Any, int] | None = None

        def apply_all(txn: Txn[memoryview]) -> None:
            nonlocal applied, ran
            applied = False  # a retried txn (map growth) applies them again
            self._apply(txn, ops)
            ran = (txn, txn.id())  # type: ignore[attr-defined]
            applied = True

        try:
            if durable:
                self.write_txn(apply_all)
            else:
                self.env.write(apply_all)
            if ran is not None:  # committed: the next txn's first append needs no cursor
                tail_committed(self.env.dbs.get("heap"), *ran)
        except BaseException as exc:
            if not commit_raised(self, ops, exc, applied, _FULL):
                raise  # a handler's exception; or refused, or failed before its commit

    def flush(self) -> None:
        """Commit every queued checkpoint in one durable txn (batched mode).

        On failure (e.g. a ref conflict) the whole batch is rolled back and dropped;
        a commit that reports an error is settled as in :meth:`_commit_many`. One
        interrupted before its commit (KeyboardInterrupt, a signal handler's exception or
        ``sys.exit()``) puts the batch back on the queue (batch_owners.requeued).
        With ``durability="none"`` it fsyncs every commit made so far instead.
        ReentrantWriteError inside a commit or flush of this store on this thread.
        """
        self._reentry.run(self._flush)

    def _flush(self) -> None:
        if self.durability == "none":
            if not self.readonly and not self._closed:
                self.env.sync()  # checks the pid: a forked child never syncs the parent's
            return
        # A fork child never waits for (or takes) the parent's batches: no thread of the
        # child settles a commit the parent had under way (it hung: audit20).
        if self.durability == "batched":
            self.env.check_pid()
        while self._flush_once():  # another thread's interrupted flush requeued ours
            pass

    def _flush_once(self) -> bool:
        if not self._pending:
            return self._owners.wait_mine()  # another thread's flush may hold our writes
        # The batch is taken once this thread holds the write txn: two threads' flushes
        # then commit their batches in queue order (taken before, the later batch could
        # commit first, and its recorder's next checkpoint, expecting one still queued in
        # the earlier batch, dropped it whole on a ConflictError no other writer caused).
        batch: list[CheckpointWrite] = []  # filled with the owners in one step (taken)
        owners: list[Owner] = []
        took = applied = False
        behind: tuple[int, ...] = ()  # batches in flight: nothing taken (BatchOwners.taken)

        ran: tuple[Any, int] | None = None

        def apply_all(txn: Txn[memoryview]) -> None:
            nonlocal took, applied, behind, ran
            applied = False
            if not took:  # a retried txn (map growth) applies the same batch again
                if self._exit_gate is not None:
                    self._exit_gate.enter()  # the exit flush gave up on the lock: not taken
                # Queue and owners go in flight together or not at all (taken off the
                # queue first, the batch was lost unowned and its owners told ok: audit20).
                head = lambda run, branch: self.head(txn, ref_key(run, branch))  # noqa: E731
                behind = self._owners.take(self._pending, self._pending_lock, owners, batch, head)
                took = True
            queue = (self._pending, self._pending_lock)  # interrupted: requeued in the txn
            engine = (lmdb.Error,)  # an LMDB error in the apply is the batch's own: dropped
            self._owners.applying(lambda: self._apply(txn, batch), (owners, batch), queue, engine)
            ran = (txn, txn.id())  # type: ignore[attr-defined]
            applied = True

        failed: BaseException | None = None
        requeue = False
        try:
            try:
                self.write_txn(apply_all)
                if ran is not None:  # committed: the next txn's first append needs no cursor
                    tail_committed(self.env.dbs.get("heap"), *ran)
            except Exception as exc:
                if not applied or not batch or foreign(exc) or growth_failed(exc, _FULL):
                    raise  # foreign: a handler's exception, settled below (never swallowed)
                commit_failed(self, batch, exc)
            for op in batch:  # before settled() wakes their threads
                op.committed = True
        except BaseException as exc:
            failed = exc  # dropped: the other threads' flushes must say so
            landed = lambda: batch_landed(self, batch)  # noqa: E731
            fate = interrupted(exc, applied, landed, batch) if batch else None  # taken
            requeue, failed = fate is True, None if fate is False else exc  # False: landed
            raise
        finally:  # an interrupt must not leave a taken batch unsettled: entering settled()
            try:  # or in it, it is called again (idempotent), here, not in a function of
                if requeue:  # its own whose entry it could hit
                    with self._pending_lock:
                        self._owners.requeued(owners, batch, self._pending)
                self._owners.settled(owners, failed)  # requeued: settled already
            except BaseException:
                self._owners.settled(owners, failed)
                raise
        return self._owners.wait_mine(behind)

    def _apply(self, txn: Txn[memoryview], ops: Sequence[CheckpointWrite]) -> None:
        dbs = self.env.dbs  # contents: built once per table set, as every read builds them
        apply_writes(txn, dbs, ops, layout=self.env.layout, contents=contents(dbs))
