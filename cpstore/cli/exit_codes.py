"""Exit codes of the ``cpstore`` command line: one table, documented in README.md.

:data:`EXIT_CODES` gives every public error class its code; an error's code
is that of the first class of its MRO found in the table, so a private
subclass inherits its parent's code. 1 stays "internal error": only a bug
(an exception that is not a :class:`CpstoreError`, or a :class:`NativeError`,
which the argument checks before every native call should make impossible)
exits 1.
"""

from __future__ import annotations

from collections.abc import Mapping

from cpstore.errors import (
    AuditChainError,
    CanonicalEncodingError,
    CommitLostError,
    ConflictError,
    CpstoreError,
    DocumentError,
    ForkError,
    FormatVersionError,
    GateError,
    IntegrityError,
    InvalidInputError,
    LedgerGuardError,
    LedgerSealedError,
    NativeError,
    NotDescendantError,
    NotFoundError,
    OutcomeUnknownError,
    PutBackMismatchError,
    ReadHeldDuringResizeError,
    RecordFormatError,
    RecordingGapError,
    ReentrantOpenError,
    ReentrantWriteError,
    ReplayDivergenceError,
    SameStoreError,
    ServerVersionError,
    SeveralHoldersError,
    SignOffError,
    StoreClosedError,
    StoreConnectionError,
    StoreError,
    StoreFatalError,
    StoreFullError,
    StoreReadOnlyError,
    StoreTimeoutError,
    UnsealedEffectsError,
    ValidationFailedError,
)

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_CODES",
    "EXIT_CONFLICT",
    "EXIT_DIFFERENT",
    "EXIT_EPILOG",
    "EXIT_FORMAT",
    "EXIT_INTEGRITY",
    "EXIT_INTERNAL",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_QUARANTINE",
    "EXIT_REFUSED",
    "EXIT_REJECT",
    "EXIT_UNAVAILABLE",
    "EXIT_USAGE",
    "exit_code_for",
    "exit_epilog",
]

EXIT_OK = 0
"""Success; for ``validate``, the verdict is ACCEPT."""
EXIT_INTERNAL = 1
"""An unexpected internal error: a bug in cpstore (please report it)."""
EXIT_USAGE = 2
"""Usage error: unknown option, missing or out-of-range argument."""
EXIT_BAD_INPUT = 3
"""Bad input: a malformed document, file, path or argument value."""
EXIT_NOT_FOUND = 4
"""Not found: no such store, checkpoint, run, object, record or file."""
EXIT_INTEGRITY = 5
"""Integrity: verification found damage."""
EXIT_REFUSED = 6
"""Refused: a gate, a sign-off or a sealed ledger said no."""
EXIT_UNAVAILABLE = 7
"""The store cannot do it now: full, read-only, closed, or used across a fork."""
EXIT_CONFLICT = 8
"""Conflict: a ref moved since it was read; re-read and retry."""
EXIT_FORMAT = 9
"""A store or document format version this cpstore does not know (never misread)."""
EXIT_REJECT = 10
"""``validate``: the verdict is REJECT (also a replay stopped by a divergence)."""
EXIT_QUARANTINE = 11
"""``validate``: the verdict is QUARANTINE."""
EXIT_DIFFERENT = 12
"""``diff``: the two sides differ (0 when they do not).

Its own code, not 1 as in ``git diff --exit-code`` (1 is a bug here) and not
10 (REJECT is a verdict the gates act on; a diff decides nothing)."""

#: Every public error class and its exit code (README.md, "Command line").
EXIT_CODES: Mapping[type[CpstoreError], int] = {
    InvalidInputError: EXIT_BAD_INPUT,
    SameStoreError: EXIT_BAD_INPUT,
    SeveralHoldersError: EXIT_BAD_INPUT,
    RecordFormatError: EXIT_BAD_INPUT,
    CanonicalEncodingError: EXIT_BAD_INPUT,
    DocumentError: EXIT_BAD_INPUT,
    FormatVersionError: EXIT_FORMAT,
    NotFoundError: EXIT_NOT_FOUND,
    RecordingGapError: EXIT_NOT_FOUND,
    IntegrityError: EXIT_INTEGRITY,
    AuditChainError: EXIT_INTEGRITY,
    PutBackMismatchError: EXIT_INTEGRITY,
    GateError: EXIT_REFUSED,
    SignOffError: EXIT_REFUSED,
    LedgerSealedError: EXIT_REFUSED,
    StoreError: EXIT_UNAVAILABLE,
    ServerVersionError: EXIT_UNAVAILABLE,
    StoreFullError: EXIT_UNAVAILABLE,
    ReadHeldDuringResizeError: EXIT_UNAVAILABLE,
    ReentrantWriteError: EXIT_UNAVAILABLE,
    ReentrantOpenError: EXIT_UNAVAILABLE,
    StoreClosedError: EXIT_UNAVAILABLE,
    StoreReadOnlyError: EXIT_UNAVAILABLE,
    ForkError: EXIT_UNAVAILABLE,
    StoreFatalError: EXIT_UNAVAILABLE,
    StoreConnectionError: EXIT_UNAVAILABLE,
    CommitLostError: EXIT_UNAVAILABLE,
    StoreTimeoutError: EXIT_UNAVAILABLE,
    OutcomeUnknownError: EXIT_UNAVAILABLE,
    ConflictError: EXIT_CONFLICT,
    NotDescendantError: EXIT_CONFLICT,
    UnsealedEffectsError: EXIT_REFUSED,
    ReplayDivergenceError: EXIT_REJECT,
    LedgerGuardError: EXIT_REJECT,
    ValidationFailedError: EXIT_REJECT,
    NativeError: EXIT_INTERNAL,
}


_LABELS = {
    EXIT_OK: "ok",
    EXIT_INTERNAL: "internal error (a bug)",
    EXIT_USAGE: "usage",
    EXIT_BAD_INPUT: "bad input",
    EXIT_NOT_FOUND: "not found",
    EXIT_INTEGRITY: "integrity problem",
    EXIT_REFUSED: "refused",
    EXIT_UNAVAILABLE: "store unavailable (full, read-only)",
    EXIT_CONFLICT: "conflict",
    EXIT_FORMAT: "not a format this cpstore reads",
    EXIT_REJECT: "REJECT",
    EXIT_QUARANTINE: "QUARANTINE",
    EXIT_DIFFERENT: "diff: the sides differ",
}


def exit_epilog(*codes: int, ok: str = "ok") -> str:
    """A ``--help`` epilog listing ``codes`` (plus 1 and 2, which every command has)."""
    labels = {**_LABELS, EXIT_OK: ok}
    wanted = sorted({*codes, EXIT_OK, EXIT_INTERNAL, EXIT_USAGE})
    return "exit codes: " + ", ".join(f"{code} {labels[code]}" for code in wanted)


#: The main ``cpstore --help`` epilog: every code.
EXIT_EPILOG = exit_epilog(*_LABELS, ok="ok/ACCEPT")


def exit_code_for(error: CpstoreError) -> int:
    """The documented exit code for a cpstore error (see :data:`EXIT_CODES`)."""
    if isinstance(error, ValidationFailedError):
        verdict = getattr(getattr(error.decision, "verdict", None), "name", None)
        if verdict == "QUARANTINE":
            return EXIT_QUARANTINE
    for cls in type(error).__mro__:
        code = EXIT_CODES.get(cls)
        if code is not None:
            return code
    return EXIT_INTERNAL
