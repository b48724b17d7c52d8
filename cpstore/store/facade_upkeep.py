"""The audit log and maintenance calls of :class:`~cpstore.store.facade.Store` (its base,
:class:`StoreUpkeep`): appending and reading audit records, keyed MAC checks, verify,
retention and the clock. Each is one call into the module that does the work, on the
backend the facade opened (nothing here knows which engine it is).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from cpstore.errors import InvalidInputError
from cpstore.store.audit import (
    AuditView,
    append_audit,
    append_audit_checked,
    audit_records,
    audit_view,
    check_record_mac,
    get_audit,
)
from cpstore.store.batch_fates import commit_queue_first
from cpstore.store.model import AuditRecord, Problem, VerifyReport, check_name, parse_id
from cpstore.store.retention import GcReport, check_gc_arguments, delete_run, gc, prune
from cpstore.store.verify import check_checkpoint_objects, verify

if TYPE_CHECKING:
    from cpstore.store.lmdb_backend import LmdbBackend
    from cpstore.store.pg_backend import PgBackend

__all__ = ["StoreUpkeep"]


class StoreUpkeep:
    """The audit and maintenance half of the store facade (see :class:`Store`)."""

    _backend: LmdbBackend | PgBackend

    # -- audit ---------------------------------------------------------------

    def append_audit(self, kind: str, body: Mapping[str, Any]) -> AuditRecord:
        """Append a hash-chained audit record (committed durably before returning)."""
        return append_audit(self._backend, kind, body)

    def append_audit_checked(
        self, kind: str, prepare: Callable[[AuditView], Mapping[str, Any]]
    ) -> AuditRecord:
        """Append the body ``prepare(view)`` returns, ``prepare`` running in the append's txn.

        ``view`` is an :class:`~cpstore.store.audit.AuditView` of that write
        txn; ``prepare`` raises to refuse, and may run more than once.
        """
        return append_audit_checked(self._backend, kind, prepare)

    def audit_view(self) -> AbstractContextManager[AuditView]:
        """The audit log as one read txn sees it: ``with store.audit_view() as log``."""
        return audit_view(self._backend)

    def audit_records(
        self, *, kind: str | None = None, start: int = 0, limit: int | None = None
    ) -> Iterator[AuditRecord]:
        """Audit records in order from index ``start``, optionally of one ``kind``."""
        return audit_records(self._backend, kind=kind, start=start, limit=limit)

    @property
    def audit_keyed(self) -> bool:
        """True when this store's audit log carries keyed MACs (docs/security.md)."""
        return self._backend.audit_keyed

    def check_audit_mac(self, index: int) -> None:
        """Raise AuditChainError unless audit record ``index`` carries its true keyed MAC.

        A no-op on an unkeyed store; on a keyed store opened without the key it
        raises, since nothing it reads can be trusted against a forger.
        """
        with self._backend.read_txn() as txn:
            check_record_mac(self._backend, txn, index)

    def get_audit(self, digest_hex: str) -> AuditRecord:
        """The audit record with this digest (NotFoundError if none)."""
        return get_audit(self._backend, digest_hex)

    # -- maintenance ---------------------------------------------------------

    def verify(self, *, progress: Callable[[int, int], None] | None = None) -> VerifyReport:
        """Re-hash every object and manifest, resolve every reference, check the audit chain.

        ``progress(done, total)`` is called every few thousand entries and once at the end.
        It runs in this process: some damaged B-tree pages make liblmdb abort or fault,
        which kills the interpreter. ``cpstore verify`` runs the walk in a child process
        and reports that as damage (exit 5); use it for a store you do not trust.
        """
        self._backend.live()
        return verify(self._backend, progress)

    def verify_checkpoint(self, checkpoint_id: str) -> tuple[Problem, ...]:
        """Re-hash everything ``checkpoint_id`` reaches, in one read txn; () when intact.

        The manifest and its header, every state part, chunk index and chunk,
        every log, observation and effect payload, the transcript and the token
        records, values and offsets. Each problem names the object.
        """
        cid = parse_id(checkpoint_id)
        self._backend.live()
        with self._backend.read_txn() as txn:
            return tuple(check_checkpoint_objects(txn, self._backend.dbs, cid))

    def delete_run(self, run_id: str) -> int:
        """Delete every ref of ``run_id`` and sweep; returns checkpoints removed."""
        self._backend.live()  # a closed or forked handle first, as before the flush came
        run = check_name(run_id, "run_id")  # refused before the flush: nothing changes
        self._flush_before_sweep("delete_run")
        return delete_run(self._backend, run)

    def prune(self, *, keep_last: int, run_id: str | None = None) -> int:
        """Keep each branch's newest ``keep_last`` checkpoints (of ``run_id`` or all); sweep."""
        if not isinstance(keep_last, int) or isinstance(keep_last, bool) or keep_last < 1:
            raise InvalidInputError("keep_last must be an int >= 1", got=keep_last)
        self._backend.live()
        run = None if run_id is None else check_name(run_id, "run_id")  # as keep_last
        self._flush_before_sweep("prune")
        return prune(self._backend, keep_last=keep_last, run_id=run)

    def gc(
        self,
        *,
        keep_last: int | None = None,
        run_id: str | None = None,
        delete_run: str | None = None,
        dry_run: bool = False,
    ) -> GcReport:
        """:meth:`prune` (``keep_last``) or :meth:`delete_run` (NotFoundError for a run
        without refs), reporting every checkpoint removed, the objects and bytes, and
        those the audit log names; ``dry_run`` changes nothing (docs/store.md, "gc")
        but, as every sweep, first commits this handle's queued checkpoints."""
        self._backend.live()
        check_gc_arguments(keep_last, run_id, delete_run, dry_run)  # before the flush
        self._flush_before_sweep("gc (dry run)" if dry_run else "gc")
        return gc(self._backend, keep_last, run_id, delete_run, dry_run)

    def _flush_before_sweep(self, sweep: str) -> None:
        """A sweep on a batched handle first commits the handle's queue (as a copy does):
        blind to it, the sweep could remove a queued checkpoint's parent, and the failed
        flush would then drop the whole batch, ids already returned (retention96).

        A commit that fails is raised as the flush raised it (its ``str()`` unchanged),
        with a note naming the sweep (``sweep``: "prune") it ran for: the error of a
        queued checkpoint ("the branch moved since this recorder read it") read as the
        sweep's own, and nothing said the sweep had not run (review99)."""
        self._backend.live()
        commit_queue_first(self._backend, "this handle's", f"the {sweep}", "nothing was swept")

    def now(self) -> float:
        """The clock the store stamps records with."""
        return self._backend.now()
