"""The store (docs/store.md): the storage seam, its LMDB backend, and what runs on it.

:class:`Store` is the facade; it composes the recorder, the checkpoint
reader, the audit log, verify, retention and the ref operations over a
:class:`~cpstore.store.backend.Backend` (:class:`LmdbBackend` today).
"""

from __future__ import annotations

from cpstore.native.append_log import (
    AppendLog,
)
from cpstore.store.audit import (
    AuditView,
)
from cpstore.store.backend import (
    Backend,
    StoreSpace,
    Txn,
)
from cpstore.store.diff import (
    Diff,
    PartDiff,
    diff,
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
from cpstore.store.maintenance import (
    CompactReport,
    compact_store,
    copy_store,
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
from cpstore.store.retention import (
    GcReport,
)
from cpstore.store.stats import (
    StoreStats,
    store_stats,
)

__all__ = [
    "CHUNK_SIZE",
    "MAX_OBJECT_SIZE",
    "AppendLog",
    "AuditRecord",
    "AuditView",
    "Backend",
    "CheckpointView",
    "CompactReport",
    "Diff",
    "Durability",
    "GcReport",
    "HistoryEntry",
    "LmdbBackend",
    "Manifest",
    "PartDiff",
    "Problem",
    "Recorder",
    "Store",
    "StoreSpace",
    "StoreStats",
    "Txn",
    "VerifyReport",
    "compact_store",
    "copy_store",
    "diff",
    "open",
    "store_stats",
]
