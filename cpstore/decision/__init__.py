"""Deciding about a replay (docs/decision-table.md).

The findings table (:mod:`cpstore.decision.table`), the two sides
(:mod:`~cpstore.decision.sides`), the checks (:mod:`~cpstore.decision.checks`,
the token stream's in :mod:`~cpstore.decision.token_checks`),
:func:`validate`, the gates (:mod:`~cpstore.decision.gates`) and the
Protocols this layer needs of a store (:mod:`~cpstore.decision.ports`).
"""

from __future__ import annotations

from cpstore.decision.gates import (
    AUDIT_GATE,
    AUDIT_RESUME,
    AUDIT_SIGNOFF,
    ResumePermit,
    RollbackCertificate,
    SignOff,
    certify_rollback,
    check_resume,
    resume_gate,
    sign_off,
)
from cpstore.decision.ports import (
    AuditEntry,
    AuditLog,
    AuditStore,
    AuditView,
    CheckpointStore,
)
from cpstore.decision.table import (
    AUDIT_DECISION,
    FINDING_RULES,
    TOKEN_FIELDS,
    TOKEN_SIZE,
    Decision,
    Fidelity,
    Finding,
    FindingCode,
    RecordingGap,
    Subject,
    Verdict,
    verdict_for,
)
from cpstore.decision.validate import (
    RunSource,
    validate,
)

__all__ = [
    "AUDIT_DECISION",
    "AUDIT_GATE",
    "AUDIT_RESUME",
    "AUDIT_SIGNOFF",
    "FINDING_RULES",
    "TOKEN_FIELDS",
    "TOKEN_SIZE",
    "AuditEntry",
    "AuditLog",
    "AuditStore",
    "AuditView",
    "CheckpointStore",
    "Decision",
    "Fidelity",
    "Finding",
    "FindingCode",
    "RecordingGap",
    "ResumePermit",
    "RollbackCertificate",
    "RunSource",
    "SignOff",
    "Subject",
    "Verdict",
    "certify_rollback",
    "check_resume",
    "resume_gate",
    "sign_off",
    "validate",
    "verdict_for",
]
