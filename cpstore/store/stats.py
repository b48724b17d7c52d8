"""Store statistics: object counts, bytes, and how much content addressing saves."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from cpstore.store.manifest import decode_manifest, manifest_references
from cpstore.store.model import unpack_checkpoint_value
from cpstore.store.verify import child_kind, children

if TYPE_CHECKING:
    from cpstore.store.facade import Store

__all__ = ["StoreStats", "store_stats"]


@dataclass(frozen=True)
class StoreStats:
    """What a store holds (``cpstore stats``)."""

    objects: int
    """Distinct objects (blobs keyed by digest)."""
    object_bytes: int
    """Bytes of all distinct objects: what is actually stored once."""
    checkpoints: int
    """Checkpoints (manifests) in the store."""
    refs: int
    """Branch heads (run, branch) pointing at a checkpoint."""
    audit_records: int
    """Records in the hash-chained audit log."""
    referenced_bytes: int
    """Bytes the checkpoints reach (directly, or through a chunk index or a log), counting
    an object once per checkpoint reaching it: what storing each checkpoint whole would take."""
    disk_bytes: int
    """Bytes of the data file that hold pages."""
    reusable_bytes: int = 0
    """Bytes of pages inside the data file freed by gc, reused by later writes."""
    unreferenced_bytes: int = 0
    """Bytes of objects no checkpoint reaches (pinned by put_object, or sealed ledgers)."""

    @property
    def dedupe_ratio(self) -> float:
        """referenced_bytes / bytes of the objects checkpoints reach: how many times each
        stored byte is reused (>= 1; objects no checkpoint reaches are left out)."""
        reached = self.object_bytes - self.unreferenced_bytes
        return self.referenced_bytes / reached if reached > 0 else 1.0


def store_stats(store: Store) -> StoreStats:
    """Walk the store once (one read transaction) and count."""
    sizes: dict[bytes, int] = {}
    referenced = 0
    checkpoints = refs = audit = 0
    reached_any: set[bytes] = set()
    expansions: dict[tuple[bytes, str], tuple[bytes, ...]] = {}
    objects = store.backend.db("objects")
    with store.backend.read_txn() as txn:
        with txn.cursor(db=objects) as cur:
            for key, value in cur:
                sizes[bytes(key)] = len(value)
        with txn.cursor(db=store.backend.db("checkpoints")) as cur:
            for key, value in cur:
                checkpoints += 1
                created, body = unpack_checkpoint_value(value)
                manifest = decode_manifest(bytes(key), body, created)
                reached: set[bytes] = set()
                for field, digest in manifest_references(manifest.raw):
                    reached.add(digest)
                    kind = child_kind(field)
                    if kind is None:
                        continue
                    known = expansions.get((digest, kind))
                    if known is None:
                        known = tuple(bytes(c) for c in children(txn, objects, field, digest))
                        expansions[(digest, kind)] = known
                    reached.update(known)
                referenced += sum(sizes.get(d, 0) for d in reached)
                reached_any |= reached
        refs = txn.stat(store.backend.db("refs"))["entries"]
        audit = txn.stat(store.backend.db("audit"))["entries"]
    space = store.space()
    return StoreStats(
        objects=len(sizes),
        object_bytes=sum(sizes.values()),
        checkpoints=checkpoints,
        refs=refs,
        audit_records=audit,
        referenced_bytes=referenced,
        disk_bytes=space.file_bytes,
        reusable_bytes=space.reusable_bytes,
        unreferenced_bytes=sum(n for d, n in sizes.items() if d not in reached_any),
    )
