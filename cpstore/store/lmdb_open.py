"""Opening rules for an LMDB store: what becomes a store, what is refused, the format record.

A store is created only in a missing or empty folder (docs/store.md,
"Opening"); an emptied, foreign or unknown-version data file is refused
before LMDB can re-initialise it. The checks and the LMDB open run under a
``flock`` on the folder so processes creating one new store together agree.
Used by :mod:`cpstore.store.lmdb_env`, the one module that opens environments.
"""

from __future__ import annotations

import errno
import fcntl
import operator
import os
import threading
from collections import deque
from collections.abc import Callable, Container, Iterable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from stat import S_ISDIR, S_ISREG
from typing import Any

import lmdb

from cpstore.errors import (
    CanonicalEncodingError,
    CpstoreError,
    FormatVersionError,
    NotFoundError,
    StoreError,
)
from cpstore.native.canonical import decode_value
from cpstore.store.lmdb_descriptors import close_on_exec
from cpstore.store.lmdb_errors import errno_of
from cpstore.store.lmdb_tables import missing_table, refuse, without_format
from cpstore.store.model import PG_STORE_VERSION, READABLE_VERSIONS, STORE_VERSION

__all__ = [
    "FORK_CLOSED_FDS",
    "FORK_GUARD",
    "FORMAT",
    "FORMAT_KEY",
    "PG_FORMAT",
    "PROCESS",
    "EnvOptions",
    "FileOpenHereError",
    "FolderBusyError",
    "check_data_file",
    "check_format",
    "check_new_store_path",
    "close_on_exec",
    "creation_lock",
    "has_lmdb_meta_page",
    "is_folder_at",
    "is_lock_permission_error",
    "lock_folder",
    "missing_table",
    "open_dbs_readonly",
    "open_into",
    "open_tables",
    "pin_folder",
    "refuse",
    "release_folders",
    "unlock_folder",
]

FORMAT_KEY = b"format"
FORMAT = {"layout": "cpstore", "version": STORE_VERSION, "digest": "xxh3-128"}
#: A PostgreSQL store's format record (model.PG_STORE_VERSION says why it is older).
PG_FORMAT = {**FORMAT, "version": PG_STORE_VERSION}


@dataclass(frozen=True)
class EnvOptions:
    """How an environment was opened; handles sharing it must agree."""

    readonly: bool
    map_size: int
    max_map_size: int
    #: Make a new store when the directory is missing or empty (never otherwise).
    create: bool = True
    #: LMDB fsyncs each commit (``durability="sync"``/``"batched"``); False is
    #: ``MDB_NOSYNC`` (``durability="none"``, docs/durability.md). A flag of the
    #: environment handle, so every store handle of one process shares it.
    sync: bool = True


def check_new_store_path(path: str, options: EnvOptions, at: str | None = None) -> None:
    """Raise unless ``path`` (which has no data.mdb) may become a new store.

    A store is created only where nothing can be lost: a missing directory or
    an empty one (a lone lock.mdb is what a crash before LMDB made its data
    file leaves). Read-only opens and ``create=False`` never create. ``at``: the
    folder looked at (the pinned one, :func:`pin_folder`); ``path`` names it.
    """
    at = path if at is None else at
    if not os.path.exists(at):
        if options.readonly or not options.create:
            raise NotFoundError("no store at this path", where=path)
        return
    if not os.path.isdir(at):
        raise refuse("not a directory", path)
    if options.readonly or not options.create:
        raise NotFoundError("no store at this path (no data.mdb)", where=path)
    others = sorted(set(os.listdir(at)) - {"lock.mdb"})
    if others:
        raise refuse("the directory is not empty and has no data.mdb", path)


def check_data_file(path: str, data: str, options: EnvOptions, at: str | None = None) -> int | None:
    """Under the creation lock: refuse an empty or directory ``data`` (data.mdb), a
    writable open of one with another hard link, or,
    without one, a ``path`` that may not become a new store (making its folder).
    ``at``: the folder looked at (the pinned one LMDB then opens, :func:`pin_folder`),
    which ``path`` and ``data`` name in errors.

    One stat answers "a file? empty? a directory?". Returns the data file's size
    (None without one): the file LMDB then maps (nothing swaps it while the lock
    is held: lmdb_copy), and a data file only grows, so the open's size check
    may start from it.
    """
    at = path if at is None else at
    try:
        st: os.stat_result | None = os.stat(os.path.join(at, "data.mdb"))
    except (OSError, ValueError):
        st = None
    if st is not None and S_ISREG(st.st_mode):
        if st.st_size == 0:
            # LMDB would initialise an empty file as a new environment,
            # silently turning a truncated store into an empty one.
            raise refuse("data.mdb is empty", data)
        if st.st_nlink > 1 and not options.readonly:
            # Another name of the file (ln, cp -al) is another folder, with its own
            # lock.mdb: writers there and here would not exclude each other, and one's
            # commits overwrite the other's (an acknowledged checkpoint lost).
            raise StoreError(
                "data.mdb has another hard link: a writer through it would not see this "
                "store's locks; remove the other link (or copy the store) and open again",
                where=data,
                expected="1 link",
                got=f"{st.st_nlink} links",
            )
        return st.st_size
    if st is not None and S_ISDIR(st.st_mode):
        raise refuse("data.mdb is a directory", data)
    check_new_store_path(path, options, at)
    os.makedirs(at, exist_ok=True)
    return None


def creation_lock(path: str, *, exclusive: bool, wait: bool = True) -> CreationLock:
    """``flock`` the store directory around deciding what it holds and opening LMDB.

    LMDB creates data.mdb and then writes its meta pages; a second opener
    looking in between would see a half-made store (no data.mdb beside a
    lock.mdb, or an empty data.mdb) and refuse it. Writable opens take the
    lock exclusively, read-only ones shared. The directory itself is locked,
    so no file is added to it; where it is missing or cannot be locked (a
    file system without flock), the open goes on unlocked. Yields the folder's
    descriptor (:func:`lock_folder`'s), e.g. for :func:`pin_folder`. ``wait=False``:
    :class:`FolderBusyError` instead of waiting for another holder.
    """
    return CreationLock(path, exclusive, wait)


class CreationLock:
    """:func:`creation_lock`'s context manager. A class, not ``@contextmanager``: an
    interrupt (a signal handler's exception) landing in contextlib's ``__enter__`` on
    ``next()``'s return, the lock taken, raised before the ``with`` block, so no
    ``__exit__`` ran, and the suspended generator, kept by the exception's traceback,
    released the lock only when that was freed: while the caller kept the exception,
    every open of the store, here or in another process, waited (review87). Here the
    lock is taken in ``__enter__`` by a Python call, whose return runs no handler."""

    __slots__ = ("_exclusive", "_held", "_path", "_process", "_wait")

    def __init__(self, path: str, exclusive: bool, wait: bool) -> None:
        self._path, self._exclusive, self._wait = path, exclusive, wait
        self._held: list[int | None] = []
        self._process = PROCESS[0]

    def __enter__(self) -> int | None:
        self._process = PROCESS[0]  # the process whose descriptor ``_held`` names
        self._held = [lock_folder(self._path, exclusive=self._exclusive, wait=self._wait)]
        return self._held[0]

    def _forked(self, held: list[int | None]) -> bool:
        """Whether this is a fork() child of the process that took the lock: the fork
        closed its descriptor (``FORK_CLOSED_FDS``) and the child's next open took that
        number, which a close here released (the child's own creation lock on another
        store, review89); forgotten then, never closed. Told by :data:`PROCESS`, not the
        pid: a descendant forked once this process exited may have its pid (review92)."""
        if self._process is PROCESS[0]:
            return False
        held.clear()
        return True

    def __exit__(self, *raised: object) -> None:
        held = self._held
        if self._forked(held):
            return
        late: BaseException | None = None
        while held:  # until released: each interrupt landing in it caught (see release_folders)
            try:
                release_folders(held)
            except BaseException as exc:
                late = exc
        if late is not None:
            raise late

    def __del__(self) -> None:
        # An interrupt landing at __exit__'s start (a frame's start: CPython runs pending
        # handlers there) ran nothing of it: the descriptor, an int in ``_held``, outlived
        # this object, and the folder's flock with it, so every later open of the store,
        # here or in another process, waited for good (intr88). Released here, once the
        # exception that keeps __exit__'s frame (and so this object) is freed.
        held = getattr(self, "_held", None)  # None: __init__ interrupted before it was set
        if not held or self._forked(held):
            return
        # Not waiting for FORK_GUARD here: the collector may run this inside a region of
        # another thread's (re-entrant: this thread's own goes on). When it is taken, a
        # thread of its own waits for it and releases.
        if FORK_GUARD.acquire(blocking=False):
            FORK_GUARD.release()
            release_folders(held)
        else:
            threading.Thread(
                target=release_folders, args=(held,), name="cpstore-creation-lock", daemon=True
            ).start()


def lock_folder(path: str, *, exclusive: bool, wait: bool = True) -> int | None:
    """Take :func:`creation_lock` without a context manager (the open path's form:
    a generator-based one costs a fresh process ~20 us); release it with
    :func:`unlock_folder`. None: the folder is missing or not a directory (the
    checks under it say so), and nothing is held. ``wait=False``: raise
    :class:`FolderBusyError` (holding nothing) where another holder would make it wait.
    Anything else raised meanwhile (a KeyboardInterrupt in the wait) closes the descriptor."""
    fd: int | None = None
    try:
        with FORK_GUARD:  # a fork() meanwhile waits: its child never inherits an unlisted fd
            # Opened and kept in one step (map opens, the loop's step stores: no call, so no
            # landing, between): an interrupt landing on a bare open's return leaked the
            # descriptor (review85; a loop, not list.extend: ~1,200 instructions less cold).
            for fd in map(os.open, (path,), (os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC,)):
                FORK_CLOSED_FDS.add(fd)
    except OSError:
        return None
    except BaseException:  # an interrupt after the open: closed, listed or not
        got = [fd]
        while got:  # until closed: a second interrupt landing in the close caught (left86)
            try:
                release_folders(got)
            except BaseException:
                continue
        raise
    mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
    try:
        try:  # no flock here: open as before
            fcntl.flock(fd, mode if wait else mode | fcntl.LOCK_NB)  # type: ignore[arg-type]
        except OSError as exc:
            if not wait and exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise FolderBusyError(path) from None
    except BaseException:  # busy, or e.g. KeyboardInterrupt in the wait: closed
        # Also for one landing in the busy path (the error's making, or the start of the
        # close that followed it): the descriptor was leaked (left86). Tried until it is
        # closed, each interrupt landing in the release caught (release_folders).
        held = [fd]
        while held:
            try:
                release_folders(held)
            except BaseException:
                continue
        raise
    return fd


def is_folder_at(fd: int, path: str) -> bool:
    """Whether ``fd`` (a :func:`lock_folder` descriptor) is of the folder ``path`` names now."""
    try:
        held, there = os.fstat(fd), os.stat(path)
    except (OSError, ValueError):
        return False
    return (held.st_dev, held.st_ino) == (there.st_dev, there.st_ino)


class FolderBusyError(Exception):
    """A folder's creation lock is held elsewhere and the caller may not wait for it: it
    holds the registry lock, which a holder of this process (compact, verifying its copy)
    may need (lmdb_registry.acquire_env waits without it, then opens under the lock won)."""


def unlock_folder(fd: int | None) -> None:
    """Release a :func:`lock_folder` lock (closing its descriptor releases the flock).
    A caller releasing on its way out (not in an ``except``) uses :func:`release_folders`."""
    release_folders([fd])


_consume: Callable[[Iterable[Any]], None] = deque(maxlen=0).extend
_call: Callable[..., Any] = operator.call


def open_into(fds: list[int], path: str, flags: int, mode: int = 0o777) -> int:
    """``os.open(path, flags, mode)``'s descriptor, appended to ``fds`` by the same C call
    (``extend`` runs ``map``, which runs the open: no bytecode between the open's return
    and the keeping, so no signal handler runs there). An interrupt (a signal handler's
    exception) landing on a bare ``fd = os.open(...)``'s return lost the descriptor for
    the process's life (review85, intr88). Here one landing at this call's start comes
    before the open, and one on the ``extend``'s return finds the descriptor in ``fds``:
    the caller makes ``fds`` before the call and closes what it holds on every way out
    that does not keep it (a ``finally``, or the owner's close)."""
    fds.extend(map(os.open, (path,), (flags,), (mode,)))
    return fds[-1]


def release_folders(held: list[int] | list[int | None]) -> None:
    """Release the :func:`lock_folder` locks (or :func:`pin_folder` descriptors) in
    ``held``, taking each out of it as it is closed, so an interrupt (a signal handler's
    exception) landing anywhere here leaves ``held`` naming exactly those still open. A
    caller releasing on its way out calls this in a loop until ``held`` is empty, each
    interrupt caught (and raised after when nothing else is under way): one landing at
    this call's start, or between two releases, skipped the close, and a creation lock's
    flock stayed this process's for good: every later open of the folder, here or in
    another process, waited on it (review85; a second one landing in the ``except`` that
    called it again, left86)."""
    while held:
        fd = held[-1]
        if fd is None:
            held.pop()
            continue
        with FORK_GUARD:  # a fork() between the discard and the close would hand the child the lock
            # One C call (map calls each, no bytecode between, so no handler runs): forgotten,
            # taken out of ``held`` and closed together. Taken out before the close: a close
            # that fails has freed the number all the same (Linux), never to be closed twice.
            _consume(map(_call, (FORK_CLOSED_FDS.discard, held.pop, os.close), (fd, -1, fd)))


class FileOpenHereError(Exception):
    """An open found its folder's data file is one this process has an environment open
    on (the folder was renamed after the registry looked): that one is shared instead.
    Never opened twice: LMDB's second open of a file in one process takes the lock file
    as its own (POSIX locks do not conflict within a process) and resets its reader
    table and mutexes under the first environment's reads and writes."""

    def __init__(self, file_id: tuple[int, int]) -> None:
        super().__init__(file_id)
        self.file_id = file_id


def pin_folder(
    path: str, fd: int | None, open_files: Container[tuple[int, int]]
) -> tuple[str, int | None]:
    """(the path LMDB opens ``path``'s folder by, a descriptor to close after the open).

    The folder is held by a descriptor (``fd``, the creation lock's, or one opened
    here) and LMDB opens it through ``/proc/self/fd``: its data file checked here is
    the one LMDB opens, whatever folder is renamed meanwhile. Raises
    :class:`FileOpenHereError` when that file is in ``open_files``. Without
    ``/proc`` (or the folder), ``path`` itself.
    """
    # The descriptor opened here, kept as it is opened (open_into) and closed on every way
    # out but its return: an interrupt (a signal handler's exception) landing on a bare
    # open's return, or on a look after it, leaked it (left86).
    own: list[int] = []
    try:
        if fd is None:
            try:
                fd = open_into(own, path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError:
                return path, None
        try:
            st = os.stat("data.mdb", dir_fd=fd)
            here: tuple[int, int] | None = (st.st_dev, st.st_ino)
        except OSError:
            here = None
        if here is not None and here not in open_files:
            here = None  # a data file, but none this process has open
        pinned = f"/proc/self/fd/{fd}"
        try:  # os.path.isdir(pinned), inline (a fresh process's open pays each call cold)
            usable = here is None and S_ISDIR(os.stat(pinned).st_mode)
        except OSError:
            usable = False
        if here is not None:
            raise FileOpenHereError(here)
        if not usable:
            return path, None
        yours, own = (own[0] if own else None), []  # the caller's now: no call between
        return pinned, yours
    finally:
        late: BaseException | None = None
        while own:  # until closed: each interrupt landing in the release caught (left86)
            try:
                release_folders(own)
            except BaseException as exc:
                late = exc
        if late is not None:
            raise late


#: Descriptors a fork() child closes at once: the folder fds creation locks hold
#: right now (another thread forked mid-open: the child's lifetime would hold the
#: lock) and the holder marks (lmdb_holders: an OFD lock lives while any copy of
#: its descriptor does, so a child would keep its parent's mark).
FORK_CLOSED_FDS: set[int] = set()

#: Held from opening such a descriptor until it is in :data:`FORK_CLOSED_FDS`, and
#: from taking it out until it is closed; ``os.fork()`` takes it first (its
#: ``before`` handler), so no child is forked inside either window. Never held
#: across a wait (flock waits outside it). Re-entrant: a fork made by the thread inside
#: a region (a signal handler's, a finalizer's) waited for itself, the process hung for
#: good (review92); no region has a landing point inside either window.
FORK_GUARD = threading.RLock()

#: This process, as an object a fork() child replaces with its own (``_close_fds_in_child``):
#: what a creation lock or a holder mark records to close its descriptor only where it was
#: made. Not the pid: a process forked (by a long-lived child) after this one exited may get
#: its pid again, and passed that check with this one's objects (review92).
PROCESS: list[object] = [object()]


def _close_fds_in_child() -> None:
    PROCESS[0] = object()
    with suppress(RuntimeError):  # the before handler's hold (the thread's regions: theirs)
        FORK_GUARD.release()
    for fd in list(FORK_CLOSED_FDS):
        with suppress(OSError):
            os.close(fd)
    FORK_CLOSED_FDS.clear()


os.register_at_fork(
    before=FORK_GUARD.acquire,
    after_in_parent=FORK_GUARD.release,
    after_in_child=_close_fds_in_child,
)


#: LMDB's meta page magic (little-endian ``MDB_MAGIC``), after the 16-byte page header.
_META_MAGIC = (0xBEEFC0DE).to_bytes(4, "little")


def has_lmdb_meta_page(data: str) -> bool:
    """True when either meta page of ``data`` carries LMDB's magic.

    LMDB refuses a file with one bad meta page as "not an LMDB file"; one
    good meta page says it is an LMDB file with a damaged page instead.
    Page 1 sits one page in, so each page size LMDB may use is tried.
    """
    try:
        with open(data, "rb") as fh:
            head = fh.read(65536 + 32)
    except OSError:
        return False
    return any(
        head[at + 16 : at + 20] == _META_MAGIC for at in (0, 4096, 8192, 16384, 32768, 65536)
    )


def is_lock_permission_error(exc: lmdb.Error) -> bool:
    code = getattr(exc, "code", 0) or errno_of(str(exc))
    return code in (errno.EACCES, errno.EROFS, errno.EPERM)


#: The canonical bytes of the format record of each readable layout
#: (``encode_value`` of :data:`FORMAT` with that version; a test pins them):
#: an open compares bytes instead of decoding and re-encoding the record.
_FORMAT_RECORDS = {
    b"\x83\xa6digest\xa8xxh3-128\xa6layout\xa7cpstore\xa7version" + bytes((v,)): v
    for v in READABLE_VERSIONS
}


def check_format(raw: bytes | memoryview | None, path: str, txn: Any = None) -> int:
    """The layout version of format record ``raw``; raise unless this build reads it.

    ``txn`` (an LMDB txn, the record's): a missing or unreadable record, or a known
    version with another digest, is damage when its main table names the store's tables
    (:func:`~cpstore.store.lmdb_tables.without_format`); only an unknown version stays a
    :class:`FormatVersionError` there (a newer cpstore's store)."""
    if raw is None:
        raise _no_format("no cpstore format record", path, txn)
    known = _FORMAT_RECORDS.get(bytes(raw))
    if known is not None:
        return known
    try:
        fmt = decode_value(raw)
    except CanonicalEncodingError:
        fmt = None
    if not isinstance(fmt, dict) or fmt.get("layout") != "cpstore":
        raise _no_format("bad format record", path, txn)
    version = fmt.get("version")
    if version in READABLE_VERSIONS and fmt.get("digest") != "xxh3-128":
        raise _no_format("bad format record", path, txn)  # a known layout's other digest
    if version not in READABLE_VERSIONS or fmt.get("digest") != "xxh3-128":
        raise FormatVersionError(
            "store of an unknown version",
            where=path,
            expected={"version": STORE_VERSION, "digest": "xxh3-128"},
            got={"version": version, "digest": fmt.get("digest")},
        )
    return int(version)


def _no_format(what: str, path: str, txn: Any) -> CpstoreError:
    return refuse(what, path) if txn is None else without_format(what, path, txn)


def open_dbs_readonly(
    env: Any,
    names: Sequence[str],
    path: str,
    *,
    begin: Callable[..., Any],
    end: Callable[[Any], None],
    never_committed: Callable[[Any], bool],
) -> tuple[dict[str, Any], int]:
    """(named database handles, layout) of a store opened read-only; nothing is changed.

    ``begin()``/``end`` are the environment's read txn pair. A
    read-only open reads an older layout as it is (no upgrade), and refuses
    an empty environment, one without the format record or one that lacks a
    named database (:func:`missing_table`). py-lmdb resets (not commits) a read txn passed to
    ``open_db``, which would close the handles again: each ``open_db``
    without a txn commits its own; ``meta`` is opened once.
    """
    try:
        meta = env.open_db(b"meta", create=False)
    except lmdb.NotFoundError:
        txn = begin()
        try:
            if never_committed(txn):
                raise NotFoundError(
                    "no store at this path (an empty LMDB environment)", where=path
                ) from None
            # No meta table: another program's file, or a store whose meta name was damaged.
            raise without_format("no cpstore format record", path, txn, no_meta=True) from None
        finally:
            end(txn)
    txn = begin()
    try:
        layout = check_format(txn.get(FORMAT_KEY, db=meta), path, txn)
    finally:
        end(txn)
    dbs: dict[str, Any] = {"meta": meta}
    for name in names:
        if name in dbs:
            continue
        try:
            dbs[name] = env.open_db(name.encode(), create=False)
        except lmdb.NotFoundError:
            raise missing_table(name, path, layout) from None
    return dbs, layout


def open_tables(env: Any, names: Sequence[str], path: str, *, required: bool) -> dict[str, Any]:
    """Handles of the named databases ``names`` of a read-only environment.

    Missing ones are left out, or refused when ``required`` (the store's layout has
    them: damage, as :func:`open_dbs_readonly` tells it).
    """
    dbs: dict[str, Any] = {}
    for name in names:
        try:
            dbs[name] = env.open_db(name.encode(), create=False)
        except lmdb.NotFoundError:
            if required:
                raise missing_table(name, path, None) from None
    return dbs
