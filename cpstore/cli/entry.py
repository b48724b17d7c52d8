"""The ``cpstore`` command line: one entry point, ``--help`` everywhere.

A user mistake (bad input, a missing object, a refused gate) prints one line
on stderr and exits with its own code; only a bug in cpstore shows a
traceback. Exit codes (also in README.md):

====  ==========================================================
0     success; for ``validate``, the verdict is ACCEPT
1     an unexpected internal error (a bug: please report it)
2     usage error (unknown option, missing argument)
3     bad input: a malformed document, file, path or argument
4     not found: no such store, checkpoint, run, object or record
5     integrity: verification found damage (``verify`` and reads)
6     refused: a gate, sign-off or sealed ledger said no
7     store unavailable: full, read-only, closed or used across a fork
8     conflict: a ref moved since it was read (re-read and retry)
9     unknown format version of a store or run document
10    ``validate``: the verdict is REJECT
11    ``validate``: the verdict is QUARANTINE
12    ``diff``: the two sides differ
====  ==========================================================

Each error class's code is in :data:`cpstore.cli.EXIT_CODES` (:mod:`cpstore.cli.exit_codes`).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
from collections.abc import Callable, Sequence

from cpstore.cli import (
    audit_commands,
    cat_command,
    convert_command,
    demo,
    inspect_commands,
    lg_diff_command,
    maintenance_commands,
    repair_command,
    retained_command,
    transfer_commands,
    validate_command,
    verify_command,
)
from cpstore.cli.child import Terminated
from cpstore.cli.common import printable
from cpstore.cli.exit_codes import (
    EXIT_BAD_INPUT,
    EXIT_EPILOG,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    exit_code_for,
)
from cpstore.errors import CpstoreError

__all__ = ["main"]

Handler = Callable[[argparse.Namespace], int]

#: OS errors about the path given (exit 3); a missing file is exit 4, any other OS error
#: (a full disk, a read-only file system, an I/O error) exit 7.
_BAD_PATH = (IsADirectoryError, NotADirectoryError, PermissionError, FileExistsError)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cpstore",
        description="A checkpoint store for durable agent runtimes and replay auditors.",
        epilog=EXIT_EPILOG,
    )
    parser.add_argument("--version", action="version", version=f"cpstore {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    demo.add_parser(sub)
    validate_command.add_validate_parser(sub)
    verify_command.add_verify_parser(sub)
    inspect_commands.add_inspect_parsers(sub)
    cat_command.add_cat_parser(sub)
    audit_commands.add_audit_parsers(sub)
    maintenance_commands.add_maintenance_parsers(sub)
    retained_command.add_retained_parser(sub)
    repair_command.add_repair_parser(sub)
    lg_diff_command.add_lg_diff_parser(sub)
    transfer_commands.add_transfer_parsers(sub)
    convert_command.add_convert_parser(sub)
    return parser


def _version() -> str:
    """The installed distribution's version (the CLI room may not import the package root)."""
    try:
        return importlib.metadata.version("cpstore")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except CpstoreError as exc:
        print(f"cpstore {args.command}: {printable(str(exc))}", file=sys.stderr)
        return exit_code_for(exc)
    except BrokenPipeError:
        return EXIT_OK
    except OSError as exc:
        # What the machine said about a path (a missing file, a path through a regular
        # file, a full disk, a read-only file system): the operator's to fix, not a bug.
        reason = str(exc.strerror or exc)  # no file name (ENOSPC at an fsync): not ": None"
        text = printable(reason if exc.filename is None else f"{reason}: {exc.filename}")
        print(f"cpstore {args.command}: {text}", file=sys.stderr)
        if isinstance(exc, FileNotFoundError):
            return EXIT_NOT_FOUND
        if isinstance(exc, _BAD_PATH):
            return EXIT_BAD_INPUT
        return EXIT_UNAVAILABLE
    except KeyboardInterrupt:
        print(f"cpstore {args.command}: interrupted", file=sys.stderr)
        return 130
    except Terminated as exc:  # SIGTERM/SIGHUP while a child worked: killed, cleaned up
        print(f"cpstore {args.command}: terminated ({exc.name})", file=sys.stderr)
        return 128 + exc.signum


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
