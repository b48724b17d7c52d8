"""What the decision layer needs of a store, as small Protocols.

Decision and the gates are policy: they read checkpoints and the audit log
and append records, and import nothing of the store. Any object with these
methods will do; :class:`cpstore.Store` and the audit log's one-txn view
(:class:`cpstore.store.audit.AuditView`) are the ones cpstore ships. The
store, in turn, calls :func:`cpstore.decision.gates.check_resume` when a
recorder resumes: the dependency points from the store to this layer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from cpstore.replay.source import CheckpointManifest, CheckpointSource

__all__ = [
    "AuditEntry",
    "AuditLog",
    "AuditStore",
    "AuditView",
    "CheckpointStore",
    "StoredCheckpoint",
    "StoredManifest",
]


class AuditEntry(Protocol):
    """One audit record as the gates read it."""

    @property
    def index(self) -> int:
        """Position in the log, from 0."""

    @property
    def digest(self) -> str:
        """Hex digest of the record (its identity)."""

    @property
    def prev(self) -> str | None:
        """Digest of the record before it; None for the first."""

    @property
    def kind(self) -> str:
        """What the record is about (``"decision"``, ``"signoff"``, ``"gate"`` …)."""

    @property
    def body(self) -> dict[str, Any]:
        """The record's content."""


class AuditLog(Protocol):
    """The audit log read in one txn (a store, or the view inside an append)."""

    def audit_records(
        self, *, kind: str | None = None, start: int = 0, limit: int | None = None
    ) -> Iterator[AuditEntry]:
        """Records in order from ``start``, optionally of one ``kind``."""

    def get_audit(self, digest_hex: str) -> AuditEntry:
        """The record with this digest; NotFoundError if none."""

    def check_audit_mac(self, index: int) -> None:
        """Raise unless record ``index`` carries its true keyed MAC (keyed stores)."""


class AuditView(AuditLog, Protocol):
    """The audit log inside one txn, with the decision index."""

    def latest_decision(self, checkpoint_id: str) -> AuditEntry | None:
        """The latest decision record about ``checkpoint_id``, or None."""

    def decisions_by_id(self, decision_id: str) -> Sequence[AuditEntry]:
        """Every ``decision`` record whose ``decision_id`` is ``decision_id``, in log order."""

    def sign_off_of(self, decision: Any) -> AuditEntry | None:
        """The first ``signoff`` record after ``decision`` (an entry of this log) whose
        ``decision_audit`` is its digest, or None."""

    def sign_off_use(self, sign_off: Any) -> AuditEntry | None:
        """The first ``gate`` record after ``sign_off`` (an entry of this log) whose
        ``sign_off`` is its digest, or None."""

    def permit_use(self, gate: Any) -> AuditEntry | None:
        """The first ``resume`` record after ``gate`` (a resume gate's record of this log)
        whose ``permit`` is its digest, or None."""

    def branch_quarantine(self, decision: Any) -> AuditEntry | None:
        """The first ``decision`` record with verdict QUARANTINE whose ``recorded`` run id
        and branch equal those of ``decision`` (a decision record of this log), or None."""

    def chained_digest(self, index: int) -> str:
        """The digest the log vouches for record ``index`` (the next record's ``prev``, or
        the head's when it is the last); raises when that is damaged."""

    def check_vouched(self, rec: Any, after: Any = None, *, what: str = "") -> None:
        """Raise AuditChainError (where ``audit/<index>``) unless ``rec`` (an entry of this
        log) is the record the chain vouches for (:meth:`chained_digest`); ``after``, the
        entry listed after it if the caller has one, vouches by its ``prev`` when it is the
        next record. ``what`` is appended to the message."""

    def decisions_by_prefix(self, prefix: str) -> Sequence[AuditEntry]:
        """Every ``decision`` record whose ``str(decision_id)`` or digest starts with
        ``prefix`` (lowercase hex, at least 8 characters), in log order."""


class AuditStore(AuditLog, Protocol):
    """What the gates need: read the log, and append a checked record in one txn."""

    def audit_view(self) -> AbstractContextManager[Any]:
        """The log as one read txn sees it (an :class:`AuditView`)."""

    def append_audit_checked(
        self, kind: str, prepare: Callable[[Any], Mapping[str, Any]]
    ) -> AuditEntry:
        """Append the body ``prepare(view)`` returns, ``prepare`` running in the append's txn."""


class StoredManifest(CheckpointManifest, Protocol):
    """The manifest fields a validation compares."""

    @property
    def id(self) -> str:
        """The checkpoint id (hex)."""

    @property
    def branch(self) -> str:
        """The branch the checkpoint was recorded on."""

    @property
    def state_digest(self) -> str:
        """The digest of the recorded state."""

    @property
    def transcript_digest(self) -> str | None:
        """The digest of the recorded transcript, if any."""

    @property
    def provenance_tags(self) -> tuple[str, ...]:
        """The recording's provenance tags."""


class StoredCheckpoint(CheckpointSource, Protocol):
    """A checkpoint read as one side of a validation (what a replay reads, and more)."""

    @property
    def manifest(self) -> StoredManifest:
        """The checkpoint's manifest."""

    def token(self, i: int) -> tuple[int, str, str, Any]:
        """(seq, kind name, provenance name, value) of token ``i``."""

    def call_graph(self) -> list[dict[str, Any]]:
        """Decision nodes in order."""

    def harness_accesses(self) -> list[dict[str, Any]]:
        """Accesses the recording harness made."""

    def verify_objects(self, *, derive_tokens: bool = True) -> tuple[Any, ...]:
        """Problems found re-hashing what the checkpoint reaches; () when intact."""


class CheckpointStore(Protocol):
    """What :func:`cpstore.decision.validate` needs: read checkpoints, append a decision."""

    def read(
        self, checkpoint_id: str, *, verify: bool = True
    ) -> AbstractContextManager[StoredCheckpoint]:
        """A reader over one checkpoint, for a ``with`` block."""

    def append_audit(self, kind: str, body: Mapping[str, Any]) -> AuditEntry:
        """Append one audit record."""
