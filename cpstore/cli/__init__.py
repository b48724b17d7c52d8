"""The ``cpstore`` command line: one module per command group, the demo and the exit codes."""

from cpstore.cli.entry import main
from cpstore.cli.exit_codes import (
    EXIT_BAD_INPUT,
    EXIT_CODES,
    EXIT_CONFLICT,
    EXIT_DIFFERENT,
    EXIT_FORMAT,
    EXIT_INTEGRITY,
    EXIT_INTERNAL,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_QUARANTINE,
    EXIT_REFUSED,
    EXIT_REJECT,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    exit_code_for,
)

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_CODES",
    "EXIT_CONFLICT",
    "EXIT_DIFFERENT",
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
    "main",
]
