"""Static proof that the store's classes satisfy the Protocols the rooms below it ask for.

Decision and replay type against their own small Protocols and import nothing
of the store; mypy (strict, run by ``./dev test``) checks these assignments, so
a change that breaks a Protocol fails the lint rather than a caller at run time.
Nothing calls this function.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cpstore.decision.ports import AuditStore, CheckpointStore, StoredCheckpoint
from cpstore.decision.ports import AuditView as AuditViewPort
from cpstore.replay.source import CheckpointSource
from cpstore.store.audit import AuditView
from cpstore.store.backend import Backend
from cpstore.store.facade import Store
from cpstore.store.lmdb_backend import LmdbBackend
from cpstore.store.reader import CheckpointView

if TYPE_CHECKING:  # psycopg is an optional extra: only mypy needs it here
    from cpstore.store.pg_backend import PgBackend

__all__: list[str] = []


def _conforms(
    view: CheckpointView, store: Store, backend: LmdbBackend, log: AuditView, pg: PgBackend
) -> tuple[
    CheckpointSource, StoredCheckpoint, CheckpointStore, AuditStore, Backend, AuditViewPort, Backend
]:
    return view, view, store, store, backend, log, pg
