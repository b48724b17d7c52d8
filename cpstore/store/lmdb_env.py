"""The LMDB environment behind a store: opening it, its named databases, layout upgrades.

One :class:`Env` per data file per process (LMDB's fcntl locks belong to the
process: a second open of one file resets its lock file under the first, a close drops
them), shared by every :class:`~cpstore.Store` handle on that path. This module is the
only one that opens environments; its base, :mod:`cpstore.store.lmdb_txns`, the only
one that begins transactions, and that one's base, :mod:`cpstore.store.lmdb_growth`, the
only one that changes the map size.
"""

from __future__ import annotations

import os
from collections.abc import Container
from typing import Any

import lmdb

from cpstore.errors import (
    IntegrityError,
    NotFoundError,
    StoreError,
    StoreReadOnlyError,
)
from cpstore.native.canonical import encode_value
from cpstore.store import lmdb_txns
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
    close_on_exec,
    creation_lock,
    has_lmdb_meta_page,
    is_folder_at,
    is_lock_permission_error,
    lock_folder,
    open_dbs_readonly,
    open_tables,
    pin_folder,
    release_folders,
)
from cpstore.store.lmdb_pages import TailCover, check_data_size
from cpstore.store.lmdb_tables import missing_table, without_format
from cpstore.store.lmdb_txns import EnvTxns
from cpstore.store.model import BARE_REF_LAYOUTS, HEAP_LAYOUT, STORE_VERSION
from cpstore.store.refs import upgrade_refs_v1

__all__ = ["DB_NAMES", "LMDB_TABLES", "Env"]


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


#: Env.env until LMDB's open returned (typed Any: EnvTxns.env's).
_NOT_OPEN: Any = None


class Env(EnvTxns):
    """An open LMDB environment and its named databases (its txns: :class:`EnvTxns`)."""

    #: The data files (st_dev, st_ino) this process has an environment open on (the
    #: registry's, lmdb_registry._BY_FILE): an open finding its file there refuses.
    open_files: Container[tuple[int, int]] = ()

    def __init__(self, path: str, options: EnvOptions, won: int | None = None) -> None:
        """Open ``path``'s environment. ``won``: a creation lock the caller's wait won at
        ``path`` (lock_folder's descriptor, the caller's to close), used when it still
        locks the folder ``path`` names instead of trying for the lock again."""
        super().__init__()
        self.path = path
        self.options = options
        self.handles = 0
        #: (st_dev, st_ino) of the data file LMDB opened (lmdb_registry._BY_FILE).
        self.file_id: tuple[int, int] | None = None
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
        self.data_at = data
        #: This release's mark on the folder, from before LMDB's open to after its close.
        self._mark: HolderMark | None = None
        #: ``won`` while this open uses it (its folder's lock until the open is done).
        self._won: int | None = None
        #: The fsync failure of the close (close_quiesced), which may be another thread's
        #: than the one whose handle was the last (release_env raises it there too).
        self.unsynced: StoreError | None = None
        #: LMDB's environment, kept from its open's return on (_open_files): undone by
        #: _let_go whatever lands after it.
        self.env = _NOT_OPEN
        try:
            self._open_files(data, won)
        except BaseException:
            self._won = None
            while True:  # LMDB's, the data file held (an interrupt after hold leaked it), the mark
                try:
                    self._let_go()
                    break
                except BaseException:  # one landing in the undoing: tried again
                    continue
            raise
        try:
            # Slots left by processes that died (SIGKILL) would otherwise pin old pages.
            self.env.reader_check()
            self._tail.psize = int(self.env.stat()["psize"])
            self._tail.info = self.env.info  # what its meta pages must agree with first
            self._check_file_size()
            self.dbs = self._open_dbs()
            self._tail.ahead = True  # a cpstore store: its tail may be allocated ahead
        except BaseException:
            while True:
                try:
                    self._let_go()
                    break
                except BaseException:  # one landing in the undoing: tried again
                    continue
            raise
        finally:
            self._won = None  # the caller closes it

    def _let_go(self) -> None:
        """Close LMDB's environment (once opened), the held data file and the mark.
        Each step may run again: callers loop until it returns, catching each interrupt (a
        signal handler's exception), since one landing at a close's start skipped the
        rest (left86: the held file's descriptor and the mark, with its lock, left open
        for the process's life)."""
        if self.env is not None:
            self.env.close()  # py-lmdb: closing a closed environment does nothing
            self._txns.clear()  # closed with the environment: freeing them is safe now
        self._tail.close()  # sets its descriptors to None before closing them
        if self._mark is not None:
            self._mark.close()  # until dropped (HolderMark.close)

    def _open_files(self, data: str, won: int | None) -> None:
        """Decide what the folder holds and open LMDB on it (``self.env``), under the
        creation lock (``won``, when it locks the folder at the path: see __init__)."""
        path, options = self.path, self.options
        try:
            if not options.readonly and options.create and not os.path.exists(path):
                os.makedirs(path, exist_ok=True)  # another creator may make it too
            locked = pin = None
            if won is not None and is_folder_at(won, path):
                self._won = won
            else:
                locked = lock_folder(path, exclusive=not options.readonly, wait=False)
            try:
                # Every look is at the locked folder LMDB opens (pin_folder); under the lock
                # (never waited for here: FolderBusyError) no other lmdb.open makes data.mdb.
                held = locked if self._won is None else self._won
                where, pin = pin_folder(path, held, self.open_files)  # see FileOpenHereError
                self._seen_size = check_data_file(path, data, options, where)
                # Kept as it is made (map calls the class, the loop's step stores: no
                # landing between): an interrupt (a signal handler's exception) landing
                # on a class call's return, where CPython runs pending handlers, lost the
                # mark with its descriptor and lock for the process's life (review87).
                for self._mark in map(HolderMark, (where,), (STORE_VERSION,)):
                    pass
                try:
                    # Kept on self at once (a Python function's return: no landing): in a
                    # local until this returned, an interrupt landing after (the scan
                    # below, the lock's release) left it to the exception's traceback, open
                    # while that lived: a new open here opened LMDB on the file again, and
                    # the old one's close when freed dropped this process's locks on
                    # lock.mdb under it (review87).
                    self.env = self._open_env(where)
                except lmdb.InvalidError as exc:
                    # Judged by the file LMDB refused (the pinned folder's): the path may
                    # name another folder by now (a rename racing this open).
                    if has_lmdb_meta_page(os.path.join(where, "data.mdb")):
                        raise IntegrityError(
                            "an LMDB meta page of the data file is damaged",
                            where=data,
                            got=str(exc),
                        ) from None
                    raise translate(exc, path) from None
                self.data_at = self._tail.hold(where, not options.readonly)
                if self._tail.held is not None:  # the file LMDB opened (the registry's key)
                    self.file_id = (st := os.fstat(self._tail.held)).st_dev, st.st_ino
                close_on_exec(self.env, where, self.file_id)  # LMDB's data file's too
            finally:
                # Both in one release, until released: an interrupt landing at the pin's
                # release skipped the lock's, held for good (review85), and so did a second
                # one landing at the start of the release tried again (left86). Each caught,
                # the last raised after.
                going: list[int | None] = [pin, locked]
                late: BaseException | None = None
                while going:
                    try:
                        release_folders(going)
                    except BaseException as exc:
                        late = exc
                if late is not None:
                    raise late
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
        at, psize, seen = self.data_at, self._tail.psize, self._seen_size
        check_data_size(at, psize, self.env.info, seen=seen, shown=self._tail.data)

    def sync(self) -> None:
        """Force every commit of this environment to disk (one fsync of the data file)."""
        self.check_pid()
        try:
            self.env.sync(True)
        except lmdb.Error as exc:
            raise translate(exc, self.path) from None

    def left_open(self) -> StoreError:
        """The error of a close that gave up (EnvTxns.quiesced): the environment stays
        open, this process's other thread inside a txn of it; a ``none`` store is synced.
        A failed sync is the error (what may not be on disk), the left open a note on it."""
        wait = lmdb_txns.CLOSE_WAIT_SECONDS
        held = (
            "a zero-copy view of a checkpoint reader (token_records, token_value_views: a "
            "slice, memoryview() or an export of one) still referenced after its block "
            "keeps a read of this process open (kept_views.py; copy what must outlive the "
            "block)"
            if self.kept
            else f"a transaction of another thread of this process did not end within {wait:.0f} s"
        )
        left = StoreError(
            f"the store's environment was left open: {held} (closing it under "
            "that transaction could crash the process); this handle is closed, the "
            "transaction ends as it would, and the next open of the store closes the "
            "environment once it is idle (else the process releases it at exit)",
            where=self.path,
        )
        try:
            if not self.options.sync and not self.options.readonly:
                self.sync()  # the clean close's fsync (safe beside that txn: no close)
        except StoreError as exc:
            exc.add_note(str(left))  # before: the sync's error alone (audit50)
            return exc
        return left

    def close_quiesced(self) -> None:
        """Close the environment inside :meth:`quiesced` (lmdb_registry.release_env waits
        there without the registry lock, then closes under it; in the opening process
        only: a fork() child's close would release the parent's reader slots and locks).
        Without fsync per commit (``durability="none"``) it fsyncs once first, so a store
        closed cleanly is durable; LMDB's own close does not sync."""
        try:
            # Not again once closed: an interrupt (a signal handler's exception) landing
            # after LMDB's close made release_env call this again, whose sync then raised
            # "operate on closed" out of the store's close.
            if not self.closed and not self.options.sync and not self.options.readonly:
                self.sync()  # its failure a StoreError, as every other sync's
        except StoreError as exc:
            self.unsynced = exc  # for a close this one ran for (lmdb_registry.release_env)
            raise
        finally:
            self.closed = True  # before new reads are let go (EnvTxns.closed_error)
            late: BaseException | None = None
            while True:  # each step again until done, each interrupt caught, the last raised
                try:
                    self._let_go()
                    break
                except BaseException as exc:
                    late = exc
            if late is not None:
                raise late

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
                # Under the creation lock every open takes around LMDB's (an older release's
                # open holds LMDB's lock before the check looks, or reads the format record
                # after the commit: docs/store.md), of the folder LMDB opened (its mark's).
                at = self.path if self._mark is None else self._mark.folder(self.path)
                if self._won is not None:  # the lock this open's wait won, held (exclusive)
                    return self.write(lambda txn: self._open_dbs_writable(txn, upgrade=at))
                with creation_lock(at, exclusive=True, wait=False):  # FolderBusyError
                    return self.write(lambda txn: self._open_dbs_writable(txn, upgrade=at))
        except lmdb.Error as exc:
            raise translate(exc, self.path) from None

    def _open_dbs_writable(self, txn: Txn[memoryview], upgrade: str = "") -> dict[str, Any]:
        dbs: dict[str, Any] = {}
        try:
            meta = self.env.open_db(b"meta", txn=txn, create=False)
        except lmdb.NotFoundError:
            if not self._never_committed(txn):
                # Another program's file, or a store whose meta table's name was damaged.
                raise without_format(
                    "no cpstore format record", self.path, txn, no_meta=True
                ) from None
            if not self.options.create:
                raise self._nothing_here() from None
            for name in LMDB_TABLES:
                dbs[name] = self.env.open_db(name.encode(), txn=txn, create=True)
            txn.put(FORMAT_KEY, encode_value(FORMAT), overwrite=False, db=dbs["meta"])
            self.layout = STORE_VERSION
            return dbs
        version = check_format(txn.get(FORMAT_KEY, db=meta), self.path, txn)
        for name in LMDB_TABLES:
            # A store from before a database was added gets it here (heap tables); one its
            # layout has is damage if missing (its name changed): added empty, the store's
            # refs (say) would be gone from sight and a gc would sweep what they kept.
            try:
                dbs[name] = self.env.open_db(name.encode(), txn=txn, create=False)
            except lmdb.NotFoundError:
                if name in HEAP_TABLES and version < HEAP_LAYOUT:
                    dbs[name] = self.env.open_db(name.encode(), txn=txn, create=True)
                    continue
                missing = missing_table(name, self.path, version)
                if isinstance(missing, IntegrityError):
                    raise missing from None
                dbs[name] = self.env.open_db(name.encode(), txn=txn, create=True)
        if version != STORE_VERSION:
            if not upgrade:
                raise _UpgradeFirstError
            refuse_beside_older_holders(upgrade, version, STORE_VERSION, where=self.path)
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
        if check_format(fmt, self.path, txn) < HEAP_LAYOUT:
            return txn
        self.end_read(txn)
        if self.holds_read():
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
                        while self._reads_left(None):  # a lost read: never used again
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
        return check_format(txn.get(FORMAT_KEY, db=self.dbs["meta"]), self.path, txn)

    def _nothing_here(self) -> NotFoundError:
        return NotFoundError("no store at this path (an empty LMDB environment)", where=self.path)

    def _never_committed(self, txn: Txn[memoryview]) -> bool:
        """True for an environment LMDB just made: no txn committed, nothing in it."""
        return int(self.env.info()["last_txnid"]) == 0 and not txn.cursor().first()
