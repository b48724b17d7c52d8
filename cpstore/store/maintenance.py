"""Backups and compaction: a verified hot copy, and giving gc's freed space back to the disk.

* :func:`copy_store` - one consistent snapshot of an open store (writers may
  keep going) into a new folder, then a full :meth:`~cpstore.store.Store.verify`
  of the copy; a copy that fails it is deleted and the failure raised. This is
  the backup (restic/borg users: the copy is a store, open it as one).
* :func:`compact_store` - after ``gc`` the data file keeps its size (LMDB
  reuses freed pages but never shrinks the file); this rewrites it compactly,
  checks the rewritten copy with a full verify and the same object, checkpoint,
  ref and audit counts, then swaps it in. The store must be closed everywhere
  (refused otherwise); see :mod:`cpstore.store.lmdb_copy`.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

from cpstore.errors import IntegrityError, InvalidInputError, StoreError
from cpstore.store.batch_fates import commit_queue_first
from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store
from cpstore.store.lmdb_copy import compact_in_place, refuse_used_dest
from cpstore.store.lmdb_registry import is_open_here
from cpstore.store.location import is_store_url, redact, refuse_empty
from cpstore.store.model import VerifyReport

__all__ = ["CompactReport", "compact_store", "copy_store"]


@dataclass(frozen=True)
class CompactReport:
    """What :func:`compact_store` did."""

    bytes_before: int
    """Size of the data file before."""
    bytes_after: int
    """Size of the data file after."""
    counts: dict[str, int]
    """What the verify of the rewritten file counted (the same as before)."""


def _verified(path: str, audit_key: bytes | None) -> tuple[VerifyReport, int | None]:
    """(the store's full verify report, the last txn id read just before it; None
    where the backend has none); IntegrityError when it finds a problem. With
    ``audit_key`` a keyed log's MACs are checked too (StoreError: a wrong key, or a
    key for an unkeyed log)."""
    with open_store(path, readonly=True, create=False, audit_key=audit_key) as copy:
        last = getattr(copy.backend, "last_txnid", lambda: None)()
        report = copy.verify()
    if not report.ok:
        first = report.problems[0]
        raise IntegrityError(
            f"the copy fails verification ({len(report.problems)} problem(s))",
            where=path,
            got=f"{first.where}: {first.what}",
        )
    return report, last


def copy_store(store: Store, dest: str | os.PathLike[str], *, compact: bool = True) -> VerifyReport:
    """Copy ``store`` into ``dest`` (a new or empty folder) and verify the copy.

    Hot: one read snapshot, writers keep going (queued batched checkpoints
    of this handle are flushed first). ``compact`` (the default) leaves free
    pages out. Returns the copy's verify report (a keyed log's MACs checked when
    ``store`` was opened with its key); a copy that fails it is removed and
    :class:`IntegrityError` raised. An empty ``dest``, a ``postgresql://`` one, or a
    ``store`` on PostgreSQL (copy it with push or pull) is :class:`InvalidInputError`.
    """
    # "" would name the working folder (and a failed copy's clean-up its files).
    refuse_empty(dest, "copy's destination", "a new or empty folder")
    target = os.fspath(dest)
    if is_store_url(target):
        # A folder named after the URL would be made (and left) in the working folder.
        raise InvalidInputError(
            "copy writes a store into a folder, not a database; to copy into PostgreSQL "
            "use `cpstore push DEST --store SRC` (every object verified)",
            where=redact(target),
        )
    if is_store_url(store.path):
        # The same mistake as compact's URL (exit 3); it was a StoreError, exit 7, "store
        # unavailable", naming the destination folder (audit61).
        raise InvalidInputError(
            "a PostgreSQL store is not copied into a folder by copy; use `cpstore pull "
            "SOURCE --store DEST` (every object verified) or pg_dump",
            where=store.path,
            expected="an LMDB store folder",
        )
    if os.path.realpath(target) == os.path.realpath(store.path):
        raise InvalidInputError("a store cannot be copied onto itself", where=target)
    refuse_used_dest(target)  # before a batched handle's queue is committed (review99)
    commit_queue_first(store.backend, "this handle's", "the copy", "nothing was copied")
    store.backend.copy_to(target, compact=compact)
    try:
        return _verified(target, store.backend.audit_key)[0]
    except IntegrityError:
        shutil.rmtree(target, ignore_errors=True)
        raise


def compact_store(path: str | os.PathLike[str], *, audit_key: bytes | None = None) -> CompactReport:
    """Rewrite the closed store at ``path`` compactly, verified; the data file shrinks.

    Refused (:class:`~cpstore.StoreError`) while any process has the store open.
    The rewritten file must pass a full verify with the same counts as the
    original before it replaces it; otherwise nothing changes. With ``audit_key``
    both verifies check a keyed log's MACs (a wrong key, or a key for an unkeyed
    log, is refused with StoreError before anything is copied).
    """
    refuse_empty(path, "store")
    where = os.fspath(path)
    if is_store_url(where):
        raise InvalidInputError(
            "compact rewrites an LMDB data file; a PostgreSQL store's space is the "
            "server's to give back (VACUUM FULL of its schema's tables)",
            where=redact(where),
        )
    if is_open_here(where):
        raise StoreError("close the store in this process before compacting it", where=where)
    # The last txn is read before the verify: when the txn compaction copies is still
    # this one, no commit came after it, so the verify's counts are the copied store's.
    try:
        before, last = _verified(where, audit_key)
    except IntegrityError as exc:  # the store's own damage: nothing was copied or swapped
        raise IntegrityError(
            exc.what.replace("the copy", "the store", 1) + "; compact rewrites only a sound store",
            where=exc.where,
            got=exc.got,
        ) from None

    def check(copy_path: str, copied: int) -> None:
        if copied != last:
            raise StoreError(
                "the store changed after compact verified it (another process "
                "committed); nothing was swapped: run compact again",
                where=where,
                expected=f"last txn {last}",
                got=f"last txn {copied}",
            )
        after = _verified(copy_path, audit_key)[0]
        if after.counts != before.counts:
            raise IntegrityError(
                "the compacted copy does not hold what the store holds",
                where=copy_path,
                expected=before.counts,
                got=after.counts,
            )

    size_before, size_after = compact_in_place(where, check)
    return CompactReport(size_before, size_after, dict(before.counts))
