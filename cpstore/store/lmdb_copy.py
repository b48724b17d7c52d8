"""Copying and compacting an LMDB store: hot copies, and a data file that shrinks after gc.

LMDB never shrinks its data file: pages a sweep frees go on its free list and
are reused by later writes, so ``gc`` makes room *inside* the file. Two ways
to give the space back, both through LMDB's own environment copy
(``mdb_env_copy2`` with ``MDB_CP_COMPACT``), which writes one consistent read
snapshot and leaves out free pages:

* :func:`copy_env` - a hot copy into a new folder while writers keep going
  (backup: ``cpstore copy``).
* :func:`compact_in_place` - copy, then swap the copy in for ``data.mdb``
  (``cpstore compact``). Swapping a file under another process would lose its
  writes, so it needs the store closed everywhere: it takes an exclusive
  ``fcntl`` lock on byte 0 of ``lock.mdb``, the byte every process that has
  the environment open holds a shared lock on (LMDB's own liveness lock), and
  refuses when another process holds it. Before that it takes the folder's
  creation lock (``lmdb_open.creation_lock``, exclusive), which every cpstore
  open holds around ``lmdb.open``: LMDB opens a *read-only* environment's data
  file before its lock file, so without it a read-only opener could keep the
  old, unlinked file. A process that starts to open the store meanwhile waits
  for the swap; the lock file's reader table is re-initialised for the new
  file (LMDB does so for the first opener) before letting go. Every step is taken at
  the folder that lock holds, through its descriptor (``lmdb_open.pin_folder``), and
  refused when its data file is one this process has open (a folder renamed to the
  path after ``reserved_for_compact`` looked); else that data file is reserved too
  (``lmdb_registry.pinned_for_compact``: no open here waits for the lock).

The caller verifies the copy before anything trusts it (the facade does).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
from collections.abc import Callable, Iterator

import lmdb

from cpstore.errors import IntegrityError, InvalidInputError, StoreError, StoreReadOnlyError
from cpstore.native.kept import kept_contextmanager
from cpstore.store.lmdb_env import LMDB_TABLES, Env
from cpstore.store.lmdb_open import close_on_exec, creation_lock, open_into
from cpstore.store.lmdb_registry import pinned_for_compact, registry_settled, reserved_for_compact

__all__ = ["compact_in_place", "copy_env", "copy_open", "space_of"]


def _fsync_path(path: str, directory: bool = False) -> None:
    # Kept as it is opened (open_into), inside the try that closes it: an interrupt (a
    # signal handler's exception) landing on a bare open's return leaked the descriptor,
    # and with it a compaction's deleted copy (intr88).
    fds: list[int] = []
    try:
        os.fsync(open_into(fds, path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0)))
    finally:
        if fds:
            os.close(fds[0])


def refuse_used_dest(dest: str) -> None:
    """InvalidInputError unless ``dest`` is a new or empty folder: a copy never overwrites
    anything. copy_store asks before a batched handle's queue is committed (review99: a
    refused copy committed it, and beside a queue that conflicts said ConflictError)."""
    if os.path.lexists(dest) and (not os.path.isdir(dest) or os.listdir(dest)):
        raise InvalidInputError("the copy's destination must be a new or empty folder", where=dest)


def _check_dest(dest: str) -> bool:
    """A copy goes into a new or empty folder: it never overwrites anything. True when
    this call made the folder."""
    refuse_used_dest(dest)
    if os.path.lexists(dest):
        return False
    os.makedirs(dest)
    return True


def _undo_copy(dest: str, made: bool) -> None:
    """After a copy failed or was interrupted: remove the partial data file it wrote and the
    folder when the copy made it, so a retry into ``dest`` is not refused "not empty" (it
    was, audit50). Nothing else in ``dest`` is touched."""
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(dest, "data.mdb"))
    if made:
        with contextlib.suppress(OSError):  # not empty: something else is there, kept
            os.rmdir(dest)


#: Copies :func:`copy_open` tries, taking up the map size between them.
_COPY_ATTEMPTS = 5


class _MapResizedError(StoreError):
    """LMDB's copy refused: another process grew the map past this process's."""


class _DamagedSourceError(IntegrityError):
    """LMDB's copy met a page of the store it cannot read (:func:`_damaged_source` names
    the store: ``env``'s own path may be a ``/proc/self/fd`` one)."""


def _damaged_source(exc: _DamagedSourceError, source: str) -> IntegrityError:
    """``exc`` as an IntegrityError naming the store at ``source``."""
    return IntegrityError(exc.what, where=source, got=exc.got)


def copy_env(env: object, dest: str, *, compact: bool) -> None:
    """Write one consistent snapshot of the open environment ``env`` into ``dest``, fsynced."""
    made = _check_dest(dest)
    ours = True  # the data file is this copy's (LMDB creates it exclusively)
    try:
        ours = not os.path.lexists(os.path.join(dest, "data.mdb"))
        env.copy(dest, compact=compact)  # type: ignore[attr-defined]
        _fsync_path(os.path.join(dest, "data.mdb"))
        _fsync_path(dest, directory=True)
    except BaseException as exc:
        if ours:
            _undo_copy(dest, made)
        if not isinstance(exc, lmdb.Error):
            raise
        if isinstance(exc, (lmdb.CorruptedError, lmdb.PageNotFoundError)):
            # The source's pages (the copy walks its trees): damage, exit 5, not "could
            # not copy" (StoreError, exit 7: store unavailable) as before cli96.
            raise _DamagedSourceError(
                "the store's data file is damaged: LMDB's copy met a page it cannot read "
                "(cpstore verify lists the damage)",
                got=str(exc),
            ) from None
        resized = isinstance(exc, lmdb.MapResizedError)
        raise (_MapResizedError if resized else StoreError)(
            "LMDB could not copy the store", where=dest, got=str(exc)
        ) from None


def copy_open(env: Env, dest: str, *, compact: bool) -> None:
    """:func:`copy_env` of a store's open environment, counted as a read of it while it runs
    (EnvTxns.held_open): a close or a map resize of another thread waits for it.

    LMDB's copy refuses with MDB_MAP_RESIZED when another process grew the map past this
    process's: the new size is taken up (outside the hold: a resize waits for every
    read) and the copy made again (copy_env removed the refused one's empty data.mdb).
    Every copy_store of the store was refused until a read of this process took up the
    size (audit50)."""
    for attempt in range(_COPY_ATTEMPTS):  # bounded: a map growing without end, refused
        with env.held_open():
            try:
                copy_env(env.env, dest, compact=compact)
                return
            except _DamagedSourceError as exc:
                raise _damaged_source(exc, env.path) from None
            except _MapResizedError:  # its empty data.mdb removed (copy_env)
                if attempt == _COPY_ATTEMPTS - 1:
                    raise
        env.adopt_map_size()


def space_of(env: object, txn: object, dbs: dict[str, object], data: str) -> tuple[int, int, int]:
    """(file bytes, bytes in pages in use, bytes in pages free for reuse) of ``env``,
    whose data file is ``data`` (LMDB's own path may be the ``/proc/self/fd`` one its open
    used: lmdb_open.pin_folder).

    In use: every named database's branch, leaf and overflow pages, the main
    database's and the two meta pages. Free: the rest of the pages up to the
    last one written, i.e. what LMDB's free list will hand to later writes
    (the free list's own pages count as free).
    """
    info = env.info()  # type: ignore[attr-defined]
    psize = int(env.stat()["psize"])  # type: ignore[attr-defined]
    pages = int(info["last_pgno"]) + 1

    def used(stat: dict[str, int]) -> int:
        return int(stat["branch_pages"]) + int(stat["leaf_pages"]) + int(stat["overflow_pages"])

    in_use = 2 + used(env.stat())  # type: ignore[attr-defined]
    for name in LMDB_TABLES:
        handle = dbs.get(name)
        if handle is not None:
            in_use += used(txn.stat(handle))  # type: ignore[attr-defined]
    in_use = min(in_use, pages)
    try:
        file_bytes = os.path.getsize(data)
    except OSError:
        file_bytes = pages * psize
    return file_bytes, in_use * psize, (pages - in_use) * psize


def compact_in_place(path: str, check: Callable[[str, int], None]) -> tuple[int, int]:
    """Swap a compacted, checked copy in for ``path``'s data file; (bytes before, after).

    ``check(copy_path, last_txnid)`` must raise if the copy is not a sound store (the
    facade runs a full verify); nothing is swapped then. ``last_txnid`` is the source's
    last committed txn as copied (under the locks: nothing commits meanwhile). Refused with
    :class:`StoreError` while any process, this one included, has the store open.
    """
    with reserved_for_compact(path) as reserved:
        return _compact_in_place(path, check, reserved)


def _compact_in_place(
    path: str, check: Callable[[str, int], None], reserved: list[str | tuple[int, int]]
) -> tuple[int, int]:
    if not os.path.isfile(os.path.join(path, "data.mdb")):
        raise InvalidInputError("not a store folder (no data.mdb)", where=path)
    # The folder's creation lock first (exclusive): a cpstore open is never inside
    # lmdb.open while the file is swapped. LMDB opens a read-only environment's data
    # file *before* taking its lock, so the liveness lock alone would let a read-only
    # opener keep the old (unlinked) file. Every step then takes that folder by its
    # descriptor (lmdb_open.pin_folder): a folder renamed to ``path`` meanwhile is not it.
    # Its data file is reserved too (pinned_for_compact): an open of this process that
    # would wait for the lock holding the registry lock is refused at once instead.
    while True:
        with (
            creation_lock(path, exclusive=True) as locked,
            pinned_for_compact(path, locked, reserved) as folder,
        ):
            if folder is not None:
                with _exclusive(os.path.join(folder, "lock.mdb"), path):
                    return _swap_compacted(folder, check)
        registry_settled()  # an open here may wait for that lock: it goes first


def _swap_compacted(path: str, check: Callable[[str, int], None]) -> tuple[int, int]:
    """compact_in_place's copy, check and swap in the locked folder ``path``."""
    data = os.path.join(path, "data.mdb")
    work = os.path.join(path, "compact.tmp")
    before = os.path.getsize(data)
    shutil.rmtree(work, ignore_errors=True)  # a copy left by an interrupted compact
    env = lmdb.open(path, subdir=True, readonly=True, lock=False, max_dbs=len(LMDB_TABLES) + 4)
    close_on_exec(env, path)  # held through the copy: no program exec'd meanwhile gets it
    try:
        copied = int(env.info()["last_txnid"])
        copy_env(env, work, compact=True)
    except _DamagedSourceError as exc:
        raise _damaged_source(exc, path) from None
    finally:
        env.close()
    try:
        check(work, copied)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    os.replace(os.path.join(work, "data.mdb"), data)
    _fsync_path(path, directory=True)
    shutil.rmtree(work, ignore_errors=True)
    # The first opener re-initialises lock.mdb's reader table and txn id for
    # the new file; our exclusive lock makes this open that first opener.
    lmdb.open(path, subdir=True, max_dbs=len(LMDB_TABLES) + 4).close()
    return before, os.path.getsize(data)


@kept_contextmanager  # contextlib's: a landing on next()'s return kept the lock (intr88)
def _exclusive(lock_path: str, where: str) -> Iterator[None]:
    """Hold LMDB's liveness byte exclusively, or refuse: another process has the store open."""
    fds: list[int] = []
    try:
        # Kept as it is opened (open_into): an interrupt landing on a bare open's return,
        # before the try, leaked the descriptor.
        try:
            fd = open_into(fds, lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            if exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise
            # Named by the store's path: the lock file's is the pinned folder's
            # /proc/self/fd one ("Read-only file system: /proc/self/fd/4/lock.mdb", cli96).
            raise StoreReadOnlyError(
                "the store cannot be written (compact rewrites its data file)",
                where=where,
                got=exc.strerror,
            ) from None
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0, os.SEEK_SET)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EAGAIN):
                raise StoreError(
                    "another process has the store open; compact needs it closed everywhere",
                    where=where,
                ) from None
            raise
        yield
    finally:
        if fds:
            os.close(fds[0])  # closing any descriptor of the file drops this process's locks
