"""LMDB failures as cpstore errors: full, read-only, corrupt, foreign, other.

py-lmdb 1.x carries no errno on most errors, so the errno is read back from
the message; a short write on a full filesystem arrives as EIO and is told
apart by looking at the free space.
"""

from __future__ import annotations

import errno
import os

import lmdb

from cpstore.errors import (
    CpstoreError,
    FormatVersionError,
    IntegrityError,
    StoreClosedError,
    StoreError,
    StoreFatalError,
    StoreFullError,
    StoreReadOnlyError,
)

__all__ = ["FULL_DISK_SLACK", "closed_store_error", "errno_of", "translate"]


#: Free bytes below which an I/O error on write is taken for a full disk.
FULL_DISK_SLACK = 1 << 20


def _disk_nearly_full(where: str) -> bool:
    """True when the filesystem holding ``where`` has (almost) no room left."""
    path = where
    while path and not os.path.exists(path):
        path = os.path.dirname(path)
    try:
        st = os.statvfs(path or ".")
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < FULL_DISK_SLACK


_ERRNO_TEXT = {
    os.strerror(code): code
    for code in (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EACCES, errno.EROFS, errno.EPERM)
}


def errno_of(text: str) -> int:
    """The errno of an LMDB error message ``"call: strerror"`` (py-lmdb 1.x has no ``code``)."""
    return _ERRNO_TEXT.get(text.rpartition(": ")[2], 0)


def translate(exc: lmdb.Error, where: str, *, readonly: bool = False) -> CpstoreError:
    """The cpstore exception for an LMDB failure (full, read-only, corrupt, other).

    ``readonly``: the environment was opened read-only, so every txn of it is a read.
    MDB_BAD_TXN there is damage (bus97): a read txn is poisoned only by a page LMDB could
    not read (past the last page, or not the page it should be), and ``mdb_stat`` or a
    table's first use swallows that failure, so the txn's next call fails MDB_BAD_TXN; a
    read txn used after its end is py-lmdb's own error, and a read has no child txn. In a
    writable environment MDB_BAD_TXN is also a write txn used after a failed put (LMDB
    marks it so after MDB_MAP_FULL), a cpstore bug: it stays a StoreError there.
    MDB_BAD_VALSIZE and MDB_INCOMPATIBLE in a read-only environment are damage too
    (session 42; cli99's flip sweep, seeds 771 and 1243): every name a caller passes is
    checked first (1 to 200 bytes, ids 16 bytes), so a read meets them only on a leaf
    page whose flags say LEAF2 or a table record whose flags changed. In a writable
    environment they stay a StoreError (a write with an unchecked size would be a
    cpstore bug)."""
    text = str(exc)
    code = getattr(exc, "code", 0) or errno_of(text)
    if isinstance(exc, lmdb.MapFullError) or code in (errno.ENOSPC, errno.EDQUOT):
        return StoreFullError("the store is full", where=where, got=text)
    if code == errno.EIO and _disk_nearly_full(where):
        # LMDB reports a short pwrite() on a full filesystem as EIO, not ENOSPC.
        return StoreFullError("the disk holding the store is full", where=where, got=text)
    if isinstance(exc, lmdb.ReadonlyError) or code in (errno.EACCES, errno.EROFS, errno.EPERM):
        return StoreReadOnlyError("the store cannot be written", where=where, got=text)
    if isinstance(exc, lmdb.PanicError):
        # This process's environment, not the file: LMDB refuses every txn once a
        # meta-page write failed (it wrote the old meta page back, or tried to).
        # Told apart by class, never by text (lmdb_backend's _fatal relies on it).
        return StoreFatalError(
            "this process's LMDB environment had a fatal error (a commit failed writing "
            "its meta page); close every handle of this store in this process and "
            "open the store again",
            where=where,
            got=text,
        )
    if isinstance(exc, (lmdb.CorruptedError, lmdb.PageNotFoundError)):
        return IntegrityError("the LMDB data file is corrupt", where=where, got=text)
    if readonly and isinstance(exc, lmdb.BadTxnError):
        return IntegrityError(
            "the LMDB data file is corrupt: a page a read needed could not be read",
            where=where,
            got=text,
        )
    if readonly and isinstance(exc, (lmdb.BadValsizeError, lmdb.IncompatibleError)):
        return IntegrityError(
            "the LMDB data file is corrupt: a page or a table record does not hold what "
            "the read expects",
            where=where,
            got=text,
        )
    if isinstance(exc, (lmdb.VersionMismatchError, lmdb.InvalidError)):
        return FormatVersionError(
            "not an LMDB environment this build can read", where=where, got=text
        )
    return StoreError("LMDB failed", where=where, got=text)


def closed_store_error(where: str, *, closed: bool) -> StoreClosedError:
    """What a thread using the store while another thread closes it gets: the StoreError
    of a use after close (LmdbBackend.live), not the resize's refusal the close's wait
    shares its bookkeeping with (audit36). ``closed``: closed already, else closing."""
    if closed:
        return StoreClosedError(
            "the store is closed",
            where=where,
            expected="the store open until no other thread of the process uses it",
            got="closed by another thread of this process while this one used it",
        )
    return StoreClosedError(
        "the store is closing",
        where=where,
        expected="the store open until no other thread of the process uses it",
        got="another thread of this process is closing it (it waits for this "
        "thread's open read view to end)",
    )
