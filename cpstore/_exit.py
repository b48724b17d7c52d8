"""Exit codes of the ``cpstore`` command line (documented in cpstore.cli and README.md)."""

from __future__ import annotations

from ._errors import (
    CpstoreError,
    GateError,
    IntegrityError,
    InvalidInputError,
    LedgerSealedError,
    NotFoundError,
)

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_INTEGRITY",
    "EXIT_INTERNAL",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_QUARANTINE",
    "EXIT_REFUSED",
    "EXIT_REJECT",
    "EXIT_USAGE",
    "exit_code_for",
]

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USAGE = 2
EXIT_BAD_INPUT = 3
EXIT_NOT_FOUND = 4
EXIT_INTEGRITY = 5
EXIT_REFUSED = 6
EXIT_REJECT = 10
EXIT_QUARANTINE = 11


def exit_code_for(error: CpstoreError) -> int:
    """The documented exit code for a cpstore error."""
    if isinstance(error, NotFoundError):
        return EXIT_NOT_FOUND
    if isinstance(error, IntegrityError):
        return EXIT_INTEGRITY
    if isinstance(error, (GateError, LedgerSealedError)):
        return EXIT_REFUSED
    if isinstance(error, InvalidInputError):
        return EXIT_BAD_INPUT
    return EXIT_INTERNAL
