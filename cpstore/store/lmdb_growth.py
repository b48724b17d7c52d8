"""An LMDB environment's map growth: the one place its size changes, and the waits around it.

The base of :class:`~cpstore.store.lmdb_txns.EnvTxns` (this process's read and write txn
bookkeeping): growing the map when a write finds it full, adopting another process's
growth, the close's wait for other threads' txns (:meth:`EnvGrowth.quiesced`, which holds
new reads back as a resize does), the write lock's deadlock-free take beside a resize, and
freeing dead readers' slots (and so their pinned pages) as the file grows.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from threading import get_ident
from typing import TYPE_CHECKING, Any, TypeVar

import lmdb

from cpstore.errors import CpstoreError, StoreClosedError, StoreError, StoreFullError
from cpstore.native.kept import kept_contextmanager, take_write_lock
from cpstore.store.kept_views import ResizeWait, held_read_error, kept_by, settle
from cpstore.store.lmdb_errors import closed_store_error, translate
from cpstore.store.lmdb_open import EnvOptions
from cpstore.store.lmdb_pages import TAIL_STEP, TailCover

__all__ = ["EnvGrowth"]

T = TypeVar("T")


class EnvGrowth:
    """Map growth, resizes and the close's wait of an open LMDB environment
    (:class:`~cpstore.store.lmdb_txns.EnvTxns`' base, which sets the state below and
    counts the reads these wait for)."""

    #: Set by the subclass's open: the LMDB environment, its folder, how it was opened.
    env: Any
    path: str
    options: EnvOptions
    _tail: TailCover
    #: Set by EnvTxns.__init__ (what each is: there).
    write_lock: threading.RLock
    _active: deque[int]
    _gate: threading.Condition
    _resizing: bool
    resize_wait: float | None
    closing: bool
    closed: bool
    _readers_checked_at: int
    _lost: deque[tuple[int, Any]]
    kept: deque[tuple[int, Any]]

    if TYPE_CHECKING:  # EnvTxns': the read bookkeeping a resize and a close wait on

        def holds_read(self) -> bool: ...
        def _end_lost(self) -> None: ...
        def _reads_left(self, me: int | None) -> bool: ...
        def _lost_counts(self) -> Counter[int]: ...
        def _close_wait(self) -> float: ...

    def _cover_tail(self) -> None:
        """At the start of a write txn (under LMDB's writer lock), make the data file
        reach every committed page (lmdb_pages.TailCover says why and how), and once per
        :data:`~cpstore.store.lmdb_pages.TAIL_STEP` the file's pages grow by, free dead
        readers' slots (:meth:`_clear_dead_readers`): one int compare per txn, one
        ``reader_check`` per MiB of growth (audit36)."""
        last = self._tail.last_pgno()  # env.info()'s, read from the meta pages
        if last is None:
            last = self.env.info()["last_pgno"]
        if last >= self._readers_checked_at:
            step = max(TAIL_STEP // max(self._tail.psize, 1), 1)
            if self._readers_checked_at:  # else the open's own reader_check is this one
                self._clear_dead_readers()
            self._readers_checked_at = last + step
        tail = self._tail
        if (last + 1) * tail.psize > tail.covered:  # cover()'s own first test, without its call
            tail.cover(last)

    def read_blocks_resize(self) -> bool:
        """True when a map resize under way waits for the calling thread's open read."""
        return self._resizing and self.holds_read()

    def _adopting_growth(self, attempt: Callable[[], T], *, adopt: bool = True) -> T:
        """Run ``attempt`` (which begins txns) again until the map it sees is current: the
        one place that handles growth by another process (LMDB refuses every txn of this one
        with MDB_MAP_RESIZED until it adopts the new size; ``adopt=False`` while opening)."""
        while True:
            try:
                return attempt()
            except lmdb.MapResizedError:
                if adopt:
                    self.adopt_map_size()

    def closed_error(self) -> StoreClosedError:
        """What a thread using the store as another closes it gets: closed_store_error."""
        return closed_store_error(self.path, closed=self.closed)

    def error_of(self, exc: lmdb.Error) -> CpstoreError:
        """The cpstore error for an LMDB failure of this environment: the closed store's
        once it is closed (LMDB says "Attempt to operate on closed/deleted/dropped
        object"), else :func:`~cpstore.store.lmdb_errors.translate`'s."""
        return (
            self.closed_error()
            if self.closed
            else translate(exc, self.path, readonly=self.options.readonly)
        )

    def _holds_read_during_resize(self) -> StoreError:
        closing, me = self.closing, get_ident()
        return self.closed_error() if closing else held_read_error(self.path, self.kept, me)

    def _lock_writes(self) -> None:
        """Take the write lock, or StoreError where waiting would deadlock: a resize holds
        it until every read of this process ended, so a thread holding a read that waited
        for it would wait forever; it gets the error instead (and its read block can end)."""
        lock = self.write_lock
        if lock.acquire(blocking=False):
            return
        while not lock.acquire(timeout=0.05):
            if self._resizing and self.holds_read():
                raise self._holds_read_during_resize()

    def _clear_dead_readers(self) -> bool:
        """After a full map, before growing it, and as the file grows (:meth:`_cover_tail`):
        free the reader slots of processes that died holding a read (LMDB's reader_check).
        Such a slot keeps its snapshot's pages, and every page freed since, from reuse for as
        long as this environment stays open: a writer beside a reader killed mid-read grew
        the file without bound, and at ``max_map_size`` was refused StoreFullError with most
        of the file free (audit34); freed at a full map only, the file first grew to the
        whole map (audit36). True when a slot was freed: the write is tried again in the map
        as it is."""
        try:
            return bool(self.env.reader_check())
        except lmdb.Error:
            return False

    @kept_contextmanager  # no landing between its yield and the with block (review87)
    def quiesced(self) -> Iterator[bool]:
        """A block (the environment's close) no txn of another thread of this process runs
        in: the write lock held, new reads held back (as during a resize) and the open reads
        of other threads ended, each wait at most ``lmdb_txns.CLOSE_WAIT_SECONDS``. LMDB frees the
        environment at close, and a thread inside a call that released the GIL (a write
        txn's begin waiting for LMDB's writer lock, a commit's fsync) used freed memory: the
        process died of SIGSEGV when a store was closed under writing threads (audit34).
        Yields whether that holds: False once a wait ran out (another process held LMDB's
        writer lock longer, a read view kept open), and the caller must not close (it did,
        and the process died of SIGSEGV when that thread's begin returned)."""
        me, wait = get_ident(), self._close_wait()
        deadline = time.monotonic() + wait
        self.closing = True  # a thread refused meanwhile is told the store is closing
        held = take_write_lock(self.write_lock, timeout=wait)
        try:
            with self._gate:
                self._resizing = True  # a writer waiting for the lock while it reads is refused
                try:
                    while self._reads_left(me) and time.monotonic() < deadline:
                        self._gate.wait(0.05)
                        settle(self.kept, self._lost)
                    # LMDB's close aborts lost reads; a kept one of this thread: not closed
                    quiet = not kept_by(self.kept, me, self._lost) and not self._reads_left(me)
                    yield held and quiet
                finally:
                    self.closing = self.closed  # a close given up (a handle taken meanwhile)
                    self._resizing = False
                    self._gate.notify_all()
        finally:
            if held:
                self.write_lock.release()

    # -- the one place the map size changes ------------------------------

    def _resize(self, size: int) -> None:
        # LMDB allows mdb_env_set_mapsize only while this process has no open
        # txn: hold the write lock and wait for every reader to leave.
        settle(self.kept, self._lost)  # kept reads whose views are all gone: lost
        self._end_lost()  # this thread's lost reads (counted as ended while another resizes)
        if self.holds_read():
            raise self._holds_read_during_resize()
        with self.write_lock, self._gate:
            self._resizing = True
            try:
                waiting = ResizeWait(self.path, self.resize_wait)  # raises when it is over
                while self._reads_left(None):
                    waiting.check(list(self._active), self._lost_counts(), self.kept)
                    self._gate.wait(0.05)
                    settle(self.kept, self._lost)  # a slice released meanwhile: lost
                for _, txn in list(self._lost):  # no lost txn open across the resize
                    txn is None or txn.abort()
                try:
                    self.env.set_mapsize(size)
                except lmdb.Error as exc:
                    raise self.error_of(exc) from None
            finally:
                self._resizing = False
                self._gate.notify_all()

    def adopt_map_size(self) -> None:
        """Take up a map size another process grew the file to."""
        self._resize(0)

    def grow(self) -> None:
        """Double the map (up to ``max_map_size``) or raise :class:`StoreFullError`."""
        try:
            current = self.env.info()["map_size"]
        except lmdb.Error as exc:  # closed by another thread meanwhile: never a raw LMDB error
            raise self.error_of(exc) from None
        limit = self.options.max_map_size
        if current >= limit:
            raise StoreFullError(
                # A sweep writes too: the gc that would free space needs the way out.
                "the store reached its maximum map size; open it with a larger "
                "max_map_size (retention as well: a gc or prune writes, and is refused "
                "here; `cpstore gc` opens with the default, 1 TiB, and frees the space)",
                where=self.path,
                expected=f"<= {limit} bytes",
                got=f"{current} bytes in use",
            )
        self._resize(min(current * 2, limit))
