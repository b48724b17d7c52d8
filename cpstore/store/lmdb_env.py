"""The LMDB environment behind a store: opening, txn bookkeeping, map growth.

One :class:`Env` per data file per process (LMDB's fcntl locks belong to the
process: a second open of one file resets its lock file under the first, a close drops
them), shared by every :class:`~cpstore.Store` handle on that path. This module is the
only one that opens environments, begins transactions or changes the map size.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable, Container, Iterator
from contextlib import contextmanager
from threading import get_ident
from typing import Any, TypeVar

import lmdb

from cpstore.errors import (
    ForkError,
    IntegrityError,
    NotFoundError,
    StoreError,
    StoreFullError,
    StoreReadOnlyError,
)
from cpstore.native.canonical import encode_value
from cpstore.store.backend import Txn
from cpstore.store.content import HEAP_TABLES
from cpstore.store.lmdb_errors import translate
from cpstore.store.lmdb_holders import HolderMark, refuse_beside_older_holders
from cpstore.store.lmdb_open import (
    FORMAT,
    FORMAT_KEY,
    EnvOptions,
    check_data_file,
    check_format,
    creation_lock,
    has_lmdb_meta_page,
    is_lock_permission_error,
    lock_folder,
    open_dbs_readonly,
    open_tables,
    pin_folder,
    refuse,
    unlock_folder,
)
from cpstore.store.lmdb_pages import TailCover, check_data_size
from cpstore.store.model import BARE_REF_LAYOUTS, HEAP_LAYOUT, STORE_VERSION
from cpstore.store.refs import upgrade_refs_v1

__all__ = ["DB_NAMES", "LMDB_TABLES", "Env"]

T = TypeVar("T")


class _UpgradeFirstError(Exception):
    """A writable open found an older layout: it upgrades under the creation lock."""


#: Every named database of a store (docs/store.md, "Named databases").
DB_NAMES = (
    "meta",
    "objects",
    "checkpoints",
    "refs",
    "tombstones",
    "ledgers",
    "audit",
    "audit_index",
    "audit_mac",
)
#: Every named database of an LMDB store: the shared ones and layout 5's heap
#: tables (cpstore/store/content.py; PostgreSQL has no heap: docs/store.md).
LMDB_TABLES = DB_NAMES + HEAP_TABLES


class Env:
    """An open LMDB environment, its named databases and its txn bookkeeping."""

    #: The data files (st_dev, st_ino) this process has an environment open on (the
    #: registry's, lmdb_registry._BY_FILE): an open finding its file there refuses.
    open_files: Container[tuple[int, int]] = ()

    def __init__(self, path: str, options: EnvOptions) -> None:
        self.path = path
        self.options = options
        self.pid = os.getpid()
        self.handles = 0
        #: (st_dev, st_ino) of the data file LMDB opened (lmdb_registry._BY_FILE).
        self.file_id: tuple[int, int] | None = None
        self.write_lock = threading.RLock()
        # A thread ident per open read txn (deque ops atomic under the GIL); _gate: resizes.
        self._active: deque[int] = deque()
        self._gate = threading.Condition()
        self._resizing = False
        #: Seconds a resize waits for this process's reads (None: no bound; set at exit).
        self.resize_wait: float | None = None
        #: False when a read-only open could not use the lock file (see _open_env).
        self.locked = True
        #: The layout of the format record (docs/store.md; a writable open upgraded it).
        self.layout: int = STORE_VERSION
        #: A read-only open of a pre-layout-5 store: reads look for an upgrade (_legacy_read).
        self._legacy_ro = False
        data = os.path.join(path, "data.mdb")
        self._tail = TailCover(data, 0)  # psize set once open
        #: data.mdb's size seen under the creation lock (None: not seen); the path it is
        #: read by (TailCover.hold: the one LMDB opened, whatever is renamed meanwhile).
        self._seen_size: int | None = None
        self._data_at = data
        #: This release's mark on the folder, from before LMDB's open to after its close.
        self._mark: HolderMark | None = None
        try:
            self.env = self._open_files(data)
        except BaseException:
            if self._mark is not None:
                self._mark.close()
            raise
        try:
            # Slots left by processes that died (SIGKILL) would otherwise pin old pages.
            self.env.reader_check()
            self._tail.psize = int(self.env.stat()["psize"])
            self._check_file_size()
            self.dbs = self._open_dbs()
            self._tail.ahead = True  # a cpstore store: its tail may be allocated ahead
        except BaseException:
            self.env.close()
            self._tail.close()
            if self._mark is not None:
                self._mark.close()
            raise

    def _open_files(self, data: str) -> Any:
        """Decide what the folder holds and open LMDB on it, under the creation lock."""
        path, options = self.path, self.options
        try:
            if not options.readonly and options.create and not os.path.exists(path):
                os.makedirs(path, exist_ok=True)  # another creator may make it too
            locked, pin = lock_folder(path, exclusive=not options.readonly), None
            try:
                # Every look is at the locked folder LMDB opens (pin_folder); under the
                # lock no other lmdb.open is half way through making data.mdb.
                where, pin = pin_folder(path, locked, self.open_files)  # see FileOpenHereError
                self._seen_size = check_data_file(path, data, options, where)
                self._mark = HolderMark(where, STORE_VERSION)
                env = self._open_env(where)
                self._data_at = self._tail.hold(where, not options.readonly)
                if self._tail.held is not None:  # the file LMDB opened (the registry's key)
                    self.file_id = (st := os.fstat(self._tail.held)).st_dev, st.st_ino
                return env
            finally:
                unlock_folder(pin)
                unlock_folder(locked)
        except lmdb.InvalidError as exc:
            if has_lmdb_meta_page(data):
                raise IntegrityError(
                    "an LMDB meta page of the data file is damaged", where=data, got=str(exc)
                ) from None
            raise translate(exc, path) from None
        except lmdb.Error as exc:
            raise translate(exc, path) from None
        except PermissionError as exc:
            raise StoreReadOnlyError(
                "the store directory cannot be created", where=path, got=str(exc)
            ) from None

    def _open_env(self, where: str) -> Any:
        """Open LMDB; a read-only open falls back to no lock file when it cannot write one
        (LMDB writes its reader table even for a read-only open: an auditor who may not
        write the folder would be refused). Without it this process takes no reader slot,
        so a concurrent writer may reuse pages it reads (docs/store.md, "Read-only opens")."""
        options = self.options
        kwargs: dict[str, Any] = {
            "map_size": options.map_size,
            "subdir": True,
            "readonly": options.readonly,
            "create": False,
            "max_dbs": len(LMDB_TABLES) + 4,
            "max_readers": 1022,
            "readahead": False,
            # durability="none" is MDB_NOSYNC: written, never fsynced; MDB_NOMETASYNC
            # is refused for "sync" (docs/durability.md).
            "sync": options.sync,
            "metasync": True,
        }

        def attempt() -> Any:
            if self.locked:
                try:
                    return lmdb.open(where, lock=True, **kwargs)
                except lmdb.Error as exc:
                    if not (options.readonly and is_lock_permission_error(exc)):
                        raise
                self.locked = False
            try:
                return lmdb.open(where, lock=False, **kwargs)
            except lmdb.Error as exc:
                if not is_lock_permission_error(exc):
                    raise
                # Not the lock file then: this user may not read the data file.
                raise StoreError(
                    "the store cannot be read (permission denied)",
                    where=os.path.join(self.path, "data.mdb"),
                    got=str(exc),
                ) from None

        # py-lmdb begins a txn inside open(); a map grown meanwhile fails it (reopened).
        return self._adopting_growth(attempt, adopt=False)

    def _check_file_size(self) -> None:
        """Refuse a data file shorter than its last txn reaches (a truncated copy): LMDB
        trusts the meta page, and reading past the end of the file is a SIGBUS."""
        at, psize, seen = self._data_at, self._tail.psize, self._seen_size
        check_data_size(at, psize, self.env.info, seen=seen, shown=self._tail.data)

    def _cover_tail(self) -> None:
        """At the start of a write txn (under LMDB's writer lock), make the data file
        reach every committed page (lmdb_pages.TailCover says why and how)."""
        self._tail.cover(self.env.info()["last_pgno"])

    # -- bookkeeping ---------------------------------------------------------

    def check_pid(self) -> None:
        """Raise :class:`ForkError` when used in a process other than the opener."""
        if os.getpid() != self.pid:
            raise ForkError(
                "store used after fork(); open it again in the child",
                where=self.path,
                expected=f"pid {self.pid}",
                got=f"pid {os.getpid()}",
            )

    def sync(self) -> None:
        """Force every commit of this environment to disk (one fsync of the data file)."""
        self.check_pid()
        try:
            self.env.sync(True)
        except lmdb.Error as exc:
            raise translate(exc, self.path) from None

    def close(self) -> None:
        """Close the environment (in the opening process only). Without fsync per commit
        (``durability="none"``) the last handle's close fsyncs once, so a store closed
        cleanly is durable; LMDB's own close does not sync."""
        if os.getpid() == self.pid:
            try:
                if not self.options.sync and not self.options.readonly:
                    self.sync()  # its failure a StoreError, as every other sync's
            finally:
                self.env.close()
                self._tail.close()
                if self._mark is not None:
                    self._mark.close()
        # After fork() the child must not touch the parent's environment (closing it
        # would release reader slots and locks the parent still uses).

    def _open_dbs(self) -> dict[str, Any]:
        """Open the named databases of a cpstore store, or make a new store's.

        One txn decides and acts, so two processes creating the same new store
        cannot both initialise it. Only an environment no txn ever committed
        to is new; anything else must carry the cpstore format record.
        """
        try:
            if self.options.readonly:
                return self._adopting_growth(self._open_dbs_readonly)
            try:
                return self.write(self._open_dbs_writable)
            except _UpgradeFirstError:
                # Under the creation lock every open takes around LMDB's: an older
                # release's open holds LMDB's lock before the check below looks, or reads
                # the format record after the commit (docs/store.md).
                with creation_lock(self.path, exclusive=True):
                    return self.write(lambda txn: self._open_dbs_writable(txn, upgrade=True))
        except lmdb.Error as exc:
            raise translate(exc, self.path) from None

    def _open_dbs_writable(self, txn: Txn[memoryview], upgrade: bool = False) -> dict[str, Any]:
        dbs: dict[str, Any] = {}
        try:
            meta = self.env.open_db(b"meta", txn=txn, create=False)
        except lmdb.NotFoundError:
            if not self._never_committed(txn):
                raise refuse("no cpstore format record", self.path) from None
            if not self.options.create:
                raise self._nothing_here() from None
            for name in LMDB_TABLES:
                dbs[name] = self.env.open_db(name.encode(), txn=txn, create=True)
            txn.put(FORMAT_KEY, encode_value(FORMAT), overwrite=False, db=dbs["meta"])
            self.layout = STORE_VERSION
            return dbs
        version = check_format(txn.get(FORMAT_KEY, db=meta), self.path)
        for name in LMDB_TABLES:
            # A store from before a database was added gets it here (heap tables).
            dbs[name] = self.env.open_db(name.encode(), txn=txn, create=True)
        if version != STORE_VERSION:
            if not upgrade:
                raise _UpgradeFirstError
            refuse_beside_older_holders(self.path, version, STORE_VERSION)
            # An older store is brought up to date in this same txn (docs/store.md,
            # "Store layout versions"); a concurrent opener sees either layout whole.
            if version in BARE_REF_LAYOUTS:
                upgrade_refs_v1(txn, dbs)
            txn.put(FORMAT_KEY, encode_value(FORMAT), db=dbs["meta"])
        self.layout = STORE_VERSION
        return dbs

    def _open_dbs_readonly(self) -> dict[str, Any]:
        dbs, self.layout = open_dbs_readonly(
            self.env,
            DB_NAMES,
            self.path,
            begin=self.begin_read,  # its inline common case (the layout's look is off yet)
            end=self.end_read,
            never_committed=self._never_committed,
        )
        # The heap tables exist exactly from layout 5 on (made in the upgrade's txn).
        dbs.update(
            open_tables(self.env, HEAP_TABLES, self.path, required=self.layout >= HEAP_LAYOUT)
        )
        self._legacy_ro = self.layout < HEAP_LAYOUT
        return dbs

    def _legacy_read(self, txn: Txn[memoryview]) -> Txn[memoryview]:
        """``txn``, or a new read txn with the heap tables open when ``txn`` sees that
        another process upgraded this read-only handle's store to layout 5.

        The tables are opened while no read of this process is open (the map
        resize's gate), so no txn begun before can meet a table it lacks. A
        thread that holds another read cannot wait for that, and must not read
        on without them: entries written since the upgrade would be reported
        missing (an acknowledged checkpoint "not found", a ref "not resolving",
        a verify problem on a sound store). It gets StoreError instead, until it
        ends its older read.
        """
        fmt = txn.get(FORMAT_KEY, db=self.dbs["meta"])
        if check_format(fmt, self.path) < HEAP_LAYOUT:
            return txn
        self.end_read(txn)
        if get_ident() in self._active:
            if self._legacy_ro:  # nobody else can adopt the tables while this read is open
                raise StoreError(
                    "another process upgraded this store to layout 5 while this thread "
                    "holds an older read of it; end that read (close its view) and read again",
                    where=self.path,
                    expected="no read open in this thread",
                    got="a nested read",
                )
        else:
            with self.write_lock, self._gate:
                if self._legacy_ro:
                    self._resizing = True
                    try:
                        while self._active:
                            self._gate.wait(0.05)
                        self.dbs.update(
                            open_tables(self.env, HEAP_TABLES, self.path, required=True)
                        )
                        self.layout = STORE_VERSION
                        self._legacy_ro = False
                    finally:
                        self._resizing = False
                        self._gate.notify_all()
        return self._begin(write=False)

    def layout_in(self, txn: Txn[memoryview]) -> int:
        """The store layout ``txn`` sees: a read-only handle on an older layout reads it as it
        is while another process's writable open may upgrade it in one txn, so an older
        layout is read again from the format record in the txn at hand."""
        if self.layout == STORE_VERSION:
            return STORE_VERSION  # layouts only move forward
        return check_format(txn.get(FORMAT_KEY, db=self.dbs["meta"]), self.path)

    def _nothing_here(self) -> NotFoundError:
        return NotFoundError("no store at this path (an empty LMDB environment)", where=self.path)

    def _never_committed(self, txn: Txn[memoryview]) -> bool:
        """True for an environment LMDB just made: no txn committed, nothing in it."""
        return int(self.env.info()["last_txnid"]) == 0 and not txn.cursor().first()

    # -- transactions -------------------------------------------------------

    def holds_read(self) -> bool:
        """True when the calling thread has a read txn of this env open."""
        return get_ident() in self._active

    def _leave_read(self) -> None:
        self._active.remove(get_ident())
        if self._resizing:
            with self._gate:
                self._gate.notify_all()

    def _enter_read(self) -> None:
        # Publish the entry, then look for a resize: the resizer sets _resizing,
        # then waits for _active to empty, so one always sees the other (GIL).
        active, me = self._active, get_ident()
        while True:
            # A thread already holding a read goes on: the resize waits for
            # that read anyway, and making this one wait would deadlock.
            nested = me in active
            active.append(me)
            if not self._resizing or nested:
                return
            active.remove(me)
            with self._gate:
                self._gate.notify_all()
                while self._resizing:
                    self._gate.wait()

    def _adopting_growth(self, attempt: Callable[[], T], *, adopt: bool = True) -> T:
        """Run ``attempt`` (which begins txns) again until the map it sees is current.

        The one place that handles growth by another process: LMDB refuses
        every txn of this one with MDB_MAP_RESIZED until it adopts the new size
        (``adopt=False`` while opening, when opening again does it).
        """
        while True:
            try:
                return attempt()
            except lmdb.MapResizedError:
                if adopt:
                    self.adopt_map_size()

    def _begin(self, *, write: bool) -> Txn[memoryview]:
        """Begin a txn, adopting map growth (:meth:`begin_read` inlines the common read).

        A read is entered in the bookkeeping (pair it with :meth:`_leave_read`);
        a write needs the caller to hold ``write_lock``.
        """

        def attempt() -> Txn[memoryview]:
            if write:
                return self.env.begin(write=True, buffers=True)  # type: ignore[no-any-return]
            self._enter_read()
            try:
                return self.env.begin(buffers=True)  # type: ignore[no-any-return]
            except BaseException:
                self._leave_read()
                raise

        retried_slots = False
        while True:
            try:
                return self._adopting_growth(attempt)
            except lmdb.ReadersFullError as exc:
                if retried_slots:
                    raise translate(exc, self.path) from None
                self.env.reader_check()
                retried_slots = True
            except lmdb.Error as exc:
                raise translate(exc, self.path) from None

    def begin_read(self) -> Txn[memoryview]:
        """Begin a read txn handing out zero-copy views; pair it with :meth:`end_read`.

        The common case is inline (entry published before looking for a resize,
        as in :meth:`_enter_read`); a resize, growth to adopt, full reader slots
        or an error to translate take :meth:`_begin`.
        """
        if os.getpid() != self.pid:
            self.check_pid()
        active, me = self._active, get_ident()
        active.append(me)
        if not self._resizing:
            try:
                txn: Txn[memoryview] = self.env.begin(buffers=True)
            except BaseException as exc:
                active.remove(me)
                if not isinstance(exc, lmdb.Error):
                    raise
            else:
                return self._legacy_read(txn) if self._legacy_ro else txn
        else:
            self._leave_read()
        txn = self._begin(write=False)
        return self._legacy_read(txn) if self._legacy_ro else txn

    def end_read(self, txn: Txn[memoryview]) -> None:
        """End a txn from :meth:`begin_read` (exactly once); :meth:`_leave_read` inline."""
        try:
            txn.abort()
        finally:
            self._active.remove(get_ident())
            if self._resizing:
                with self._gate:
                    self._gate.notify_all()

    @contextmanager
    def read(self) -> Iterator[Txn[memoryview]]:
        """A read txn handing out zero-copy views; views die with the txn."""
        txn = self.begin_read()
        try:
            yield txn
        except lmdb.Error as exc:
            raise translate(exc, self.path) from None
        finally:
            self.end_read(txn)

    def write(self, fn: Callable[[Txn[memoryview]], T]) -> T:
        """Run ``fn`` in one write txn and commit; retried after growing the map.

        ``fn`` must depend only on the txn (it may run more than once). Views
        it reads are valid only until its next put.
        """
        self.check_pid()
        if self.options.readonly:
            raise StoreReadOnlyError("the store was opened read-only", where=self.path)
        while True:
            try:
                self._lock_writes()
                try:
                    with self._begin_write() as txn:
                        # Under LMDB's writer lock: no commit of any process runs
                        # while the tail is filled (zeros written past the end
                        # must not race a commit reusing those pages).
                        self._cover_tail()
                        return fn(txn)
                finally:
                    self.write_lock.release()
            except lmdb.MapFullError:
                self.grow()
            except lmdb.Error as exc:
                raise translate(exc, self.path) from None

    def _begin_write(self) -> Txn[memoryview]:
        """A write txn (``write_lock`` held); on an LMDB error :meth:`_begin` names it."""
        try:
            return self.env.begin(write=True, buffers=True)  # type: ignore[no-any-return]
        except lmdb.Error:
            return self._begin(write=True)

    def _holds_read_during_resize(self) -> StoreError:
        return StoreError(
            "the map must change size but this thread holds an open read view",
            where=self.path,
            expected="no open store.read() in a thread that writes while the map grows",
        )

    def _lock_writes(self) -> None:
        """Take the write lock, or StoreError where waiting would deadlock: a resize holds
        it until every read of this process ended, so a thread holding a read that waited
        for it would wait forever; it gets the error instead (and its read block can end)."""
        lock = self.write_lock
        if lock.acquire(blocking=False):
            return
        me = get_ident()
        while not lock.acquire(timeout=0.05):
            if self._resizing and me in self._active:
                raise self._holds_read_during_resize()

    # -- the one place the map size changes ------------------------------

    def _resize(self, size: int) -> None:
        # LMDB allows mdb_env_set_mapsize only while this process has no open
        # txn: hold the write lock and wait for every reader to leave.
        if get_ident() in self._active:
            raise self._holds_read_during_resize()
        with self.write_lock, self._gate:
            self._resizing = True
            try:
                bound = self.resize_wait
                deadline = None if bound is None else time.monotonic() + bound
                while self._active:
                    if deadline is not None and time.monotonic() >= deadline:
                        raise StoreError(
                            "the map must change size but a read of another thread "
                            "of this process did not end",
                            where=self.path,
                            expected=f"every store.read() block ended within {bound} s",
                            got=f"{len(self._active)} open read(s)",
                        )
                    self._gate.wait(0.05)
                try:
                    self.env.set_mapsize(size)
                except lmdb.Error as exc:
                    raise translate(exc, self.path) from None
            finally:
                self._resizing = False
                self._gate.notify_all()

    def adopt_map_size(self) -> None:
        """Take up a map size another process grew the file to."""
        self._resize(0)

    def grow(self) -> None:
        """Double the map (up to ``max_map_size``) or raise :class:`StoreFullError`."""
        current = self.env.info()["map_size"]
        limit = self.options.max_map_size
        if current >= limit:
            raise StoreFullError(
                "the store reached its maximum map size",
                where=self.path,
                expected=f"<= {limit} bytes",
                got=f"{current} bytes in use",
            )
        self._resize(min(current * 2, limit))
