"""``cpstore convert IN OUT``: a run between JSON, msgpack and packed run files (``.cprun``).

IN's kind is told by its content (:func:`cpstore.load_document`); OUT's by
``--to`` or else by its extension (``.json``, ``.msgpack``/``.mpk``,
``.cprun``). Tokens stream in both directions: a document's token list is
parsed a chunk at a time into packed records, and written back a chunk at a
time. OUT is written as ``write_document`` writes a path: to a temporary file
beside it, renamed into place only when complete, so an interrupted or failed
conversion leaves no partial file; an existing OUT is replaced only with
``--force``, keeping its permissions (a symlink is written through).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from cpstore.cli.exit_codes import (
    EXIT_BAD_INPUT,
    EXIT_FORMAT,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    exit_epilog,
)
from cpstore.errors import InvalidInputError
from cpstore.run.document import MAX_DOCUMENT_BYTES, load_document
from cpstore.run.writer import ENCODINGS, write_document

__all__ = ["add_convert_parser", "encoding_for", "run_convert"]

_EXTENSIONS = {".json": "json", ".msgpack": "msgpack", ".mpk": "msgpack", ".cprun": "cprun"}


def add_convert_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``convert`` sub-command to an argparse sub-parser set."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "convert",
        help="convert a run between JSON, msgpack and a packed run file (.cprun)",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        epilog=exit_epilog(EXIT_BAD_INPUT, EXIT_NOT_FOUND, EXIT_UNAVAILABLE, EXIT_FORMAT),
    )
    parser.add_argument("input", metavar="IN", help="a run document or packed run file")
    parser.add_argument("output", metavar="OUT", help="the file to write")
    parser.add_argument(
        "--to", choices=ENCODINGS, help="OUT's kind (default: from OUT's extension)"
    )
    parser.add_argument(
        "--max-bytes",
        type=int,
        default=MAX_DOCUMENT_BYTES,
        help=f"largest JSON/msgpack IN to read (default {MAX_DOCUMENT_BYTES})",
    )
    parser.add_argument("--force", action="store_true", help="replace OUT if it exists")
    parser.set_defaults(handler=run_convert)
    return parser


def encoding_for(path: str, to: str | None) -> str:
    """OUT's encoding: ``to`` when given, else the one its extension names."""
    if to is not None:
        return to
    kind = _EXTENSIONS.get(Path(path).suffix.lower())
    if kind is None:
        raise InvalidInputError(
            "cannot tell the output kind from its extension; pass --to",
            where=path,
            expected=sorted(_EXTENSIONS),
            got=Path(path).suffix or "no extension",
        )
    return kind


def run_convert(args: argparse.Namespace) -> int:
    """Convert IN to OUT; exit 0, or an error's exit code."""
    for name, path in (("IN", args.input), ("OUT", args.output)):
        if not path:  # Path("") is the working folder: --force renamed onto it
            raise InvalidInputError(f"{name} is an empty path", where=name, expected="a file")
    encoding = encoding_for(args.output, args.to)
    out = Path(args.output)
    if out.is_dir():  # refused before the temp file: the rename's error named that
        raise InvalidInputError(
            "OUT is a folder; name a file", where=str(out), expected="a file", got="a folder"
        )
    if out.exists() and not out.is_file():  # a FIFO or a device: renamed over with --force
        raise InvalidInputError(
            "OUT exists and is not a regular file", where=str(out), expected="a file"
        )
    if out.exists() and not args.force:
        raise InvalidInputError("output exists; pass --force to replace it", where=str(out))
    run = load_document(args.input, max_bytes=args.max_bytes)
    # write_document's own path write (run88: a temporary file of its own, made by
    # mkstemp, left OUT readable by its owner only (0600, a replaced OUT's mode lost),
    # replaced a symlink OUT by a file and synced no folder after the rename).
    write_document(run, out, encoding=encoding)
    return EXIT_OK
