"""The gate-index questions of :class:`cpstore.store.audit.AuditView`, as its base class.

Each asks the gate index (``cpstore.store.audit_gates``, ``audit_permits``: decisions by id
and prefix, sign-offs by decision, gates by sign-off, resumes by permit, quarantines by
branch) over the view's txn, reading the records a row names (and the records past the
index's covered count) through the view's own ``audit_records``. Moved out of
``audit.py`` as they were; the view supplies ``_txn``, ``_dbs`` and ``audit_records``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from cpstore.store.audit_gates import (
    decisions_by_id,
    first_permit_use,
    first_sign_off,
    first_use,
    gate_count,
)
from cpstore.store.audit_permits import branch_of, decisions_by_prefix, first_quarantine
from cpstore.store.backend import Txn
from cpstore.store.model import AuditRecord

__all__ = ["GateLookups"]


class GateLookups:
    """What :class:`~cpstore.store.audit.AuditView` answers from the gate index."""

    _dbs: Mapping[str, Any]

    @property
    def _txn(self) -> Txn[memoryview]:  # the view's (checked open, in its process)
        raise NotImplementedError

    def audit_records(
        self, *, kind: str | None = None, start: int = 0, limit: int | None = None
    ) -> Iterator[AuditRecord]:
        """Records from ``start`` in order, filtered by ``kind`` (the view's)."""
        raise NotImplementedError

    def _read_one(self, index: int) -> AuditRecord | None:
        return next(self.audit_records(start=index, limit=1), None)

    def _tail(self, kind: str, start: int) -> Iterator[AuditRecord]:
        return self.audit_records(kind=kind, start=start)

    def decisions_by_id(self, decision_id: str) -> list[AuditRecord]:
        """Every ``decision`` record whose ``decision_id`` is ``decision_id``, in log order
        (the gate index, ``cpstore.store.audit_gates``, + the log tail)."""
        found = decisions_by_id(
            self._txn, self._dbs["meta"], decision_id, read=self._read_one, tail=self._tail
        )
        return found  # type: ignore[return-value]

    def sign_off_of(self, decision: AuditRecord) -> AuditRecord | None:
        """The first ``signoff`` record after ``decision`` whose ``decision_audit`` is its
        digest (the gate index + the log tail)."""
        found = first_sign_off(
            self._txn, self._dbs["meta"], decision, read=self._read_one, tail=self._tail
        )
        return found  # type: ignore[return-value]

    def sign_off_use(self, sign_off: AuditRecord) -> AuditRecord | None:
        """The first ``gate`` record after ``sign_off`` whose ``sign_off`` is its digest."""
        found = first_use(
            self._txn, self._dbs["meta"], sign_off, read=self._read_one, tail=self._tail
        )
        return found  # type: ignore[return-value]

    def permit_use(self, gate: AuditRecord) -> AuditRecord | None:
        """The first ``resume`` record after ``gate`` whose ``permit`` is its digest."""
        found = first_permit_use(
            self._txn, self._dbs["meta"], gate, read=self._read_one, tail=self._tail
        )
        return found  # type: ignore[return-value]

    def branch_quarantine(self, decision: AuditRecord) -> AuditRecord | None:
        """The first quarantining ``decision`` record (``audit_permits.unverified``) about
        the run and branch ``decision`` (a decision record of this log) is about
        (``audit_permits.branch_of``)."""
        _, run, branch = branch_of(decision.body)
        return self.pair_quarantine(run, branch, certified=decision.index)

    def pair_quarantine(
        self, run_id: object, branch: object, *, certified: int = 2**64
    ) -> AuditRecord | None:
        """The first quarantining ``decision`` about ``run_id``/``branch`` in the log;
        ``certified``: the index of a decision about that pair, if known (first_quarantine)."""
        txn, meta, r, t = self._txn, self._dbs["meta"], self._read_one, self._tail
        n = gate_count(txn, meta)
        found = first_quarantine(txn, meta, n, run_id, branch, read=r, tail=t, certified=certified)
        return found  # type: ignore[return-value]

    def decisions_by_prefix(self, prefix: str) -> list[AuditRecord]:
        """Decision records whose ``str(decision_id)`` or digest starts with ``prefix``
        (lowercase hex, 8 or more characters), in log order (the gate index + the tail)."""
        covered = gate_count(self._txn, self._dbs["meta"])
        found = decisions_by_prefix(
            self._txn, self._dbs, covered, prefix, read=self._read_one, tail=self._tail
        )
        return found  # type: ignore[return-value]
