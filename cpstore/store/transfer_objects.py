"""push / pull's objects (:mod:`cpstore.store.transfer`, step 3, and the re-sends of step 4).

Which keys the destination already holds (objects, checkpoints), the source's bytes fetched
and hashed again at the receiver, an object the source no longer holds told apart
as its retention's race or as damage, the copy in batches and the re-send of
objects the destination's gc swept before their checkpoints landed; and the
:class:`TransferReport` they count into (importable from :mod:`cpstore.store.transfer`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from cpstore.errors import ConflictError, IntegrityError, NotFoundError
from cpstore.native.records import Digest
from cpstore.store.backend import Backend
from cpstore.store.codec import stored_key
from cpstore.store.content import objects_of, records_of

__all__ = ["TransferReport"]


@dataclass
class TransferReport:
    """What one transfer copied (all zero for a destination that had everything)."""

    refs_created: int = 0
    refs_moved: int = 0
    refs_unchanged: int = 0
    checkpoints: int = 0
    decisions: int = 0
    objects: int = 0
    object_bytes: int = 0
    seconds: float = 0.0
    conflicts: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The report as plain data (for ``--json``)."""
        return {
            "refs_created": self.refs_created,
            "refs_moved": self.refs_moved,
            "refs_unchanged": self.refs_unchanged,
            "checkpoints": self.checkpoints,
            "decisions": self.decisions,
            "objects": self.objects,
            "object_bytes": self.object_bytes,
            "seconds": round(self.seconds, 6),
            "conflicts": list(self.conflicts),
        }


def _present(backend: Backend, table: str, keys: Iterable[bytes]) -> set[bytes]:
    """The keys of ``keys`` stored in ``table`` (one round trip on PostgreSQL)."""
    wanted = list(dict.fromkeys(bytes(k) for k in keys))
    handle = backend.db(table)
    with backend.read_txn() as txn:
        prefetch = getattr(txn, "prefetch", None)
        if prefetch is not None:  # PostgreSQL: the direct tables (content.py)
            prefetch({}, exists={handle: wanted})
            has: Callable[[bytes], bool] = txn.has  # type: ignore[attr-defined]
            return {k for k in wanted if has(k, db=handle)}  # type: ignore[call-arg]
        content = objects_of(backend.dbs) if table == "objects" else records_of(backend.dbs)
        return {k for k in wanted if content.exists(txn, k)}


def _fetch(src: Backend, keys: list[bytes]) -> dict[bytes, bytes]:
    """The bytes of ``keys`` from the source, each hashed again as the receiver takes it.

    Bytes that do not match their digest are an :class:`IntegrityError` and
    none of ``keys`` is handed on.
    """
    batch = dict(zip(keys, src.get_objects([Digest(k) for k in keys], verify=True), strict=True))
    for key, data in batch.items():
        got = stored_key(key, data)  # a frame is inflated (bounded) and hashed
        if got != key:  # the receiver's own check: nothing of this batch is written
            raise IntegrityError(
                "an object arrived with bytes that do not match its digest",
                where=f"objects/{key.hex()}",
                expected=key.hex(),
                got=got.hex(),
            )
    return batch


def _fetch_checked(
    src: Backend, keys: list[bytes], reach: dict[bytes, list[bytes]]
) -> dict[bytes, bytes]:
    """:func:`_fetch`, where an object the source no longer holds says why.

    Objects are read after step 1's read txn ended; the source's own retention
    (``prune``, ``gc(delete_run=...)``, any process) may since have removed every
    checkpoint being copied that reaches one and swept it: a :class:`ConflictError`
    naming the race (nothing of a branch lands without its objects; running the
    transfer again reads the pruned lineage). An object missing while a checkpoint
    being copied that reaches it is still stored is damage: an :class:`IntegrityError`
    (checkpoints outside the transfer are not looked at: docs/store.md). Both are
    looked at in one read txn, the object again too: one stored by then was swept and
    written again (the same checkpoints recorded anew, their ids recur), the race.
    """
    try:
        return _fetch(src, keys)
    except NotFoundError as e:
        key = next((k for k in keys if e.got == k.hex()), None)
        if key is None:
            raise
        naming = [c for c, objs in reach.items() if key in objs]
        records = records_of(src.dbs)
        with src.read_txn() as txn:
            back = objects_of(src.dbs).stored(txn, key)  # a damaged location raises
            kept = [c for c in naming if records.exists(txn, c)]
        if kept and not back:
            raise IntegrityError(
                "the source lacks an object a stored checkpoint reaches",
                where=f"objects/{key.hex()}",
                expected=f"an object checkpoint {kept[0].hex()} reaches",
                got="missing",
            ) from e
        raise ConflictError(
            "the source's retention swept objects this transfer was copying (the "
            "checkpoints naming them were pruned or deleted after the transfer read "
            "them); nothing of the branches left to land landed: run the transfer again",
            where=f"objects/{key.hex()}",
            expected="the checkpoints read in step 1",
            got="swept, then stored again"
            if back
            else f"{len(naming)} of them gone from the source",
        ) from None


def _copy_objects(
    src: Backend,
    dst: Backend,
    keys: list[bytes],
    report: TransferReport,
    sizes: tuple[int, int],
    *,
    reach: dict[bytes, list[bytes]],
) -> None:
    """Copy ``keys`` in batches, each object hashed again before the receiver writes it."""
    max_objects, max_bytes = sizes
    step = max(1, min(64, max_objects))
    i = 0
    while i < len(keys):
        batch: dict[bytes, bytes] = {}
        size = 0
        while i < len(keys) and len(batch) < max_objects and size < max_bytes:
            part, i = keys[i : i + step], i + step
            got = _fetch_checked(src, part, reach)
            batch.update(got)
            size += sum(map(len, got.values()))
        dst.put_objects(batch)
        report.objects += len(batch)
        report.object_bytes += size


def _resend(
    src: Backend,
    dst: Backend,
    keys: list[bytes],
    reach: dict[bytes, list[bytes]],
    *,
    carry: dict[bytes, bytes],
    carry_bytes: int,
    report: TransferReport,
) -> None:
    """Fetch ``keys`` again into ``carry`` (written in the landing txn), the excess now."""
    carried = sum(map(len, carry.values()))
    for i in range(0, len(keys), 64):
        got = _fetch_checked(src, keys[i : i + 64], reach)
        size = sum(map(len, got.values()))
        if carried + size <= carry_bytes:
            carry.update(got)
            carried += size
        else:
            dst.put_objects(got)
        report.objects += len(got)
        report.object_bytes += size
