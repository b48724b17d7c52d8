"""cpstore: a checkpoint store that durable agent runtimes and replay auditors can trust.

Immutable, content-addressed checkpoints and logs on LMDB; a native core for
canonical digests (XXH3-128) and elementwise comparison of packed record
buffers; and a decision table that ends every replay validation in ACCEPT,
REJECT or QUARANTINE.

This namespace is what the README and docs teach. The low level stays
importable from the rooms of the package, each with its own ``__all__``:
:mod:`cpstore.native` (digests, record formats, canonical encoding),
:mod:`cpstore.store`, :mod:`cpstore.run`, :mod:`cpstore.replay`,
:mod:`cpstore.decision`, :mod:`cpstore.errors` and :mod:`cpstore.cli`
(docs/architecture.md).
"""

from __future__ import annotations

from cpstore.decision import (
    Decision,
    Fidelity,
    Finding,
    FindingCode,
    ResumePermit,
    RollbackCertificate,
    SignOff,
    Verdict,
    certify_rollback,
    resume_gate,
    sign_off,
    validate,
)
from cpstore.errors import (
    AuditChainError,
    ConflictError,
    CpstoreError,
    DocumentError,
    FormatVersionError,
    GateError,
    IntegrityError,
    InvalidInputError,
    LedgerGuardError,
    LedgerSealedError,
    NotDescendantError,
    NotFoundError,
    OutcomeUnknownError,
    PutBackMismatchError,
    ReadHeldDuringResizeError,
    RecordingGapError,
    ReentrantOpenError,
    ReentrantWriteError,
    ReplayDivergenceError,
    SeveralHoldersError,
    SignOffError,
    StoreClosedError,
    StoreError,
    StoreFatalError,
    UnsealedEffectsError,
    ValidationFailedError,
)
from cpstore.native import state_digest
from cpstore.replay import ReplaySession
from cpstore.run import (
    Effect,
    Observation,
    PackedTokens,
    ReplayMode,
    Run,
    Token,
    dump_document,
    load_document,
    parse_document,
)
from cpstore.store import AppendLog, CheckpointView, Recorder, Store, open

__version__ = "0.1.0"

__all__ = [
    "AppendLog",
    "AuditChainError",
    "CheckpointView",
    "ConflictError",
    "CpstoreError",
    "Decision",
    "DocumentError",
    "Effect",
    "Fidelity",
    "Finding",
    "FindingCode",
    "FormatVersionError",
    "GateError",
    "IntegrityError",
    "InvalidInputError",
    "LedgerGuardError",
    "LedgerSealedError",
    "NotDescendantError",
    "NotFoundError",
    "Observation",
    "OutcomeUnknownError",
    "PackedTokens",
    "PutBackMismatchError",
    "ReadHeldDuringResizeError",
    "Recorder",
    "RecordingGapError",
    "ReentrantOpenError",
    "ReentrantWriteError",
    "ReplayDivergenceError",
    "ReplayMode",
    "ReplaySession",
    "ResumePermit",
    "RollbackCertificate",
    "Run",
    "SeveralHoldersError",
    "SignOff",
    "SignOffError",
    "Store",
    "StoreClosedError",
    "StoreError",
    "StoreFatalError",
    "Token",
    "UnsealedEffectsError",
    "ValidationFailedError",
    "Verdict",
    "certify_rollback",
    "dump_document",
    "load_document",
    "open",
    "parse_document",
    "resume_gate",
    "sign_off",
    "state_digest",
    "validate",
]
