"""The storage seam: what the recorder, reader, audit log, verify and retention need of a backend.

A backend is an ordered key-value engine with named tables (``DB_NAMES``)
and transactions: one writer at a time, readers that see a snapshot. The
modules above it (recorder, reader, audit, verify, retention, stats, refs
operations) are written against :class:`Backend` and never against the
engine; :class:`~cpstore.store.lmdb_backend.LmdbBackend` is the first
implementation. Table and key layouts are the store's, not the engine's
(docs/store.md), so a second engine stores the same bytes under the same keys.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from cpstore.errors import CpstoreError, ForkError
from cpstore.native.records import Digest
from cpstore.store.manifest import Manifest
from cpstore.store.model import CheckpointWrite

__all__ = ["FORKS", "LEASES", "Backend", "StoreSpace", "Txn", "forked_view"]

T = TypeVar("T")
_V_co = TypeVar("_V_co", covariant=True)

#: fork()s this process descends through, counted in each child: a view entered before a
#: fork reads through its parent's txn, whose reader slot the parent ends, and then walks
#: pages a writer may reuse (a sound store read as corrupt, audit41). ForkError instead.
FORKS = [0]

#: The lease (``CheckpointView.lease``) each open view of this process handed out, by id.
#: A fork() child empties them all: what was built from a view (the replay cursor) reads
#: its zero-copy slices of the parent's txn checking only the lease, and read on there (a
#: sound store reported corrupt, a faithful replay divergent, once the parent's writer
#: reused the pages, audit45). ForkError instead (CheckpointView.closed_error).
LEASES: dict[int, list[bool]] = {}


def _count_fork() -> None:
    FORKS[0] += 1
    for lease in LEASES.values():
        lease.clear()
    LEASES.clear()


os.register_at_fork(after_in_child=_count_fork)


def forked_view(what: str, where: str | None) -> ForkError:
    """The error of a ``what`` (a view holding a read txn) read in a fork() child of the
    process that entered it (its txn's :data:`FORKS` count differs)."""
    return ForkError(
        f"{what} used after fork(); open the store and read it in the child",
        where=where,
        expected=f"the process that entered the {what}",
        got="a fork() child of it",
    )


class Txn(Protocol[_V_co]):
    """What cpstore uses of an LMDB txn; ``_V_co`` is the value type ``get`` returns.

    Our own protocol rather than the binding's type: py-lmdb ships no type
    information before 2.0, and cpstore keeps lmdb < 2 (pyproject.toml).
    """

    def get(self, key: bytes, default: Any = None, db: Any = None) -> _V_co | None: ...

    def put(  # noqa: PLR0917 - py-lmdb's own signature (positional is ~1k instructions cheaper)
        self,
        key: bytes,
        value: bytes | memoryview,
        dupdata: bool = True,
        overwrite: bool = True,
        append: bool = False,
        db: Any = None,
    ) -> bool: ...

    def delete(self, key: bytes, value: bytes = b"", db: Any = None) -> bool: ...

    def cursor(self, db: Any = None) -> Any: ...

    def stat(self, db: Any) -> dict[str, int]: ...

    def abort(self) -> None: ...

    def commit(self) -> None: ...

    def __enter__(self) -> Txn[_V_co]: ...

    def __exit__(self, *exc: object) -> Any: ...


@dataclass(frozen=True)
class StoreSpace:
    """What a store occupies on disk, and how much of it later writes can reuse."""

    file_bytes: int
    """Size of the store's data on disk (LMDB: ``data.mdb``; it never shrinks by itself)."""
    used_bytes: int
    """Bytes in pages holding live data."""
    reusable_bytes: int
    """Bytes in pages freed (by gc) that later writes reuse before the file grows."""


class Backend(Protocol):
    """One open store on one storage engine (the seam the next backends implement)."""

    @property
    def path(self) -> str:
        """Where the store lives (a folder for LMDB)."""

    @property
    def readonly(self) -> bool:
        """True when opened read-only: :meth:`write_txn` raises."""

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""

    @property
    def layout(self) -> int:
        """The store layout version read from its format record."""

    def layout_in(self, txn: Txn[memoryview]) -> int:
        """The layout as ``txn`` sees it (another process may have upgraded the store)."""

    @property
    def dbs(self) -> Mapping[str, Any]:
        """Named table -> the handle a txn's ``db=`` takes."""

    @property
    def audit_key(self) -> bytes | None:
        """The audit MAC key this handle was opened with, or None."""

    @property
    def audit_keyed(self) -> bool:
        """True when the store's audit log carries keyed MACs."""

    @property
    def engine_error(self) -> type[Exception]:
        """The engine's own exception class; :meth:`translate` maps it to a cpstore error."""

    @property
    def pending(self) -> int:
        """Checkpoint writes queued and not yet committed (batched durability)."""

    @property
    def durability(self) -> str:
        """``"sync"``, ``"batched"`` or ``"none"`` (docs/durability.md)."""

    def translate(self, exc: Exception) -> CpstoreError:
        """The cpstore error for an engine failure ``exc``."""

    def live(self) -> None:
        """Raise StoreError when closed, or used from a forked child."""

    def db(self, name: str) -> Any:
        """The handle of table ``name``."""

    def read_txn(self) -> AbstractContextManager[Txn[memoryview]]:
        """A read txn for a ``with`` block; views it hands out die with it."""

    def begin_read(self) -> Txn[memoryview]:
        """A read txn held by an object (the checkpoint view); end it with :meth:`end_read`."""

    def end_read(self, txn: Txn[memoryview], holder: Any = None) -> None:
        """End a txn from :meth:`begin_read`, exactly once (``holder``: EnvTxns.end_read)."""

    def lost_read(self, txn: Txn[memoryview], who: int) -> None:
        """From a finalizer, any thread: thread ``who``'s txn from :meth:`begin_read` that
        :meth:`end_read` never got (an interrupt where its block's exit began)."""

    def kept_reads(self) -> deque[tuple[int, Any]] | None:
        """Reads whose zero-copy views (a slice of one) outlive their block, as (thread
        ident, :class:`~cpstore.store.kept_views.KeptViews`); None: this engine's views are
        copies, nothing is kept (kept_views.py)."""

    def write_txn(self, fn: Callable[[Txn[memoryview]], T]) -> T:
        """Run ``fn`` in one write txn and commit it; ``fn`` may run more than once."""

    def put_objects(self, objects: Mapping[bytes, bytes]) -> None:
        """Store each value under its key (its digest), write-once, in one txn."""

    def get_objects(self, keys: list[Digest], *, verify: bool) -> list[bytes]:
        """The bytes under each key, in one txn, hash-checked unless ``verify`` is False."""

    def load_raw(
        self,
        txn: Txn[memoryview],
        cid: bytes,
        *,
        verify: bool,
        full: bool = True,
        hints: list[bytes] | None = None,
    ) -> tuple[dict[str, Any], bytes]:
        """(manifest map, entry header) of checkpoint ``cid``, hash-checked against the id;
        ``hints`` gets the record's location hints (b"" where the engine has none)."""

    def load_manifest(self, txn: Txn[memoryview], cid: bytes, *, verify: bool) -> Manifest:
        """The decoded manifest of checkpoint ``cid``."""

    def head(self, txn: Txn[memoryview], key: bytes) -> bytes | None:
        """The checkpoint the ref ``key`` names (its check and target verified), or None."""

    def commit(self, op: CheckpointWrite) -> None:
        """Commit one checkpoint write (ref compare-and-set included), or queue it."""

    def flush(self) -> None:
        """Commit every queued checkpoint write in one durable txn."""

    def now(self) -> float:
        """The clock records are stamped with."""

    def disk_bytes(self) -> int:
        """Bytes the store occupies on disk."""

    def space(self) -> StoreSpace:
        """File size, bytes in use and bytes free for reuse (the gc report's figures)."""

    def copy_to(self, dest: str, *, compact: bool) -> None:
        """Write one consistent snapshot of the whole store into ``dest`` (a new or empty
        folder), durably, while writers keep going; ``compact`` leaves free space out.
        The caller verifies the copy."""

    def close(self) -> None:
        """Flush queued writes and release the engine."""
