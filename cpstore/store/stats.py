"""Store statistics: object counts, bytes, and how much content addressing saves."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from cpstore.store.manifest import decode_manifest, manifest_references
from cpstore.store.model import unpack_checkpoint_value

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
    """Bytes the checkpoints reference, counting an object once per checkpoint naming it."""
    disk_bytes: int
    """Bytes of the data file that hold pages."""

    @property
    def dedupe_ratio(self) -> float:
        """referenced_bytes / object_bytes: how many times each stored byte is reused."""
        return self.referenced_bytes / self.object_bytes if self.object_bytes else 1.0


def store_stats(store: Store) -> StoreStats:
    """Walk the store once (one read transaction) and count."""
    sizes: dict[bytes, int] = {}
    referenced = 0
    checkpoints = refs = audit = 0
    with store.backend.read_txn() as txn:
        with txn.cursor(db=store.backend.db("objects")) as cur:
            for key, value in cur:
                sizes[bytes(key)] = len(value)
        with txn.cursor(db=store.backend.db("checkpoints")) as cur:
            for key, value in cur:
                checkpoints += 1
                created, body = unpack_checkpoint_value(value)
                manifest = decode_manifest(bytes(key), body, created)
                referenced += sum(sizes.get(d, 0) for _, d in manifest_references(manifest.raw))
        refs = txn.stat(store.backend.db("refs"))["entries"]
        audit = txn.stat(store.backend.db("audit"))["entries"]
    return StoreStats(
        objects=len(sizes),
        object_bytes=sum(sizes.values()),
        checkpoints=checkpoints,
        refs=refs,
        audit_records=audit,
        referenced_bytes=referenced,
        disk_bytes=store.disk_bytes(),
    )
