"""The store (docs/store.md): the storage seam, its LMDB backend, and what runs on it.

:class:`Store` is the facade; it composes the recorder, the checkpoint
reader, the audit log, verify, retention and the ref operations over a
:class:`~cpstore.store.backend.Backend` (:class:`LmdbBackend` today).
"""

from __future__ import annotations

from cpstore.store.audit import (
    AuditView,
)
from cpstore.store.backend import (
    Backend,
    Txn,
)
from cpstore.store.facade import (
    Durability,
    Store,
    open,
)
from cpstore.store.history import (
    HistoryEntry,
)
from cpstore.store.lmdb_backend import (
    LmdbBackend,
)
from cpstore.store.manifest import (
    Manifest,
)
from cpstore.store.model import (
    CHUNK_SIZE,
    MAX_OBJECT_SIZE,
    AuditRecord,
    Problem,
    VerifyReport,
)
from cpstore.store.reader import (
    CheckpointView,
)
from cpstore.store.recorder import (
    Recorder,
)
from cpstore.store.stats import (
    StoreStats,
    store_stats,
)

__all__ = [
    "CHUNK_SIZE",
    "MAX_OBJECT_SIZE",
    "AuditRecord",
    "AuditView",
    "Backend",
    "CheckpointView",
    "Durability",
    "HistoryEntry",
    "LmdbBackend",
    "Manifest",
    "Problem",
    "Recorder",
    "Store",
    "StoreStats",
    "Txn",
    "VerifyReport",
    "open",
    "store_stats",
]
