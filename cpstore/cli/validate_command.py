"""``cpstore validate RECORDED REPLAYED``: the decision table from the command line.

Each of RECORDED and REPLAYED is a run-document file (JSON or msgpack) or,
with ``--store PATH`` (default ``$CPSTORE_PATH``), a checkpoint id, a unique
prefix of >= 8 hex characters, ``RUN@BRANCH`` or ``RUN@BRANCH~N``. Prints a
readable table (or, with ``--json``, one JSON object with ``verdict``,
``fidelity`` and ``findings``) and exits 0 only for ACCEPT, 10 for REJECT and
11 for QUARANTINE; bad input is 3, a missing store or checkpoint 4 (see
:mod:`cpstore.cli`).

Looking does not act: the store is opened read-only and the decision is not
recorded unless ``--record`` is given (then it is appended to the audit log,
where it becomes the checkpoint's standing decision, which gates follow).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, TextIO

from cpstore.cli.common import (
    audit_key_arg,
    audit_key_of,
    checkpoint_or_file,
    jsonable,
    printable,
    refuse_keying,
)
from cpstore.cli.exit_codes import (
    EXIT_BAD_INPUT,
    EXIT_FORMAT,
    EXIT_INTEGRITY,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_QUARANTINE,
    EXIT_REJECT,
    EXIT_UNAVAILABLE,
    exit_epilog,
)
from cpstore.decision.table import Decision, Verdict
from cpstore.decision.validate import validate
from cpstore.errors import CpstoreError, NotFoundError
from cpstore.native.args import full_checkpoint_id
from cpstore.run.document import MAX_DOCUMENT_BYTES, load_document
from cpstore.run.model import Run
from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store
from cpstore.store.location import is_store_url

__all__ = ["EXIT_FOR_VERDICT", "add_validate_parser", "format_decision", "run_validate"]

#: Exit code per verdict (documented in cpstore.cli and docs/decision-table.md).
EXIT_FOR_VERDICT = {
    Verdict.ACCEPT: EXIT_OK,
    Verdict.REJECT: EXIT_REJECT,
    Verdict.QUARANTINE: EXIT_QUARANTINE,
}

_EPILOG = exit_epilog(
    EXIT_REJECT,
    EXIT_QUARANTINE,
    EXIT_BAD_INPUT,
    EXIT_NOT_FOUND,
    EXIT_INTEGRITY,
    EXIT_UNAVAILABLE,
    EXIT_FORMAT,
    ok="ACCEPT",
)


def add_validate_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``validate`` sub-command to an argparse sub-parser set."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "validate",
        help="validate a replay against its recording (decision table)",
        description="Validate REPLAYED against RECORDED and print the verdict, fidelity "
        "and every finding. Each is a run-document file or, with --store, a checkpoint id "
        "(32 hex characters are always an id; write ./NAME for a file named like one). "
        "Only looks: nothing is written unless --record is given.",
        epilog=_EPILOG,
    )
    parser.add_argument(
        "recorded", metavar="RECORDED", help="recording: document file or checkpoint id"
    )
    parser.add_argument(
        "replayed", metavar="REPLAYED", help="replay: document file or checkpoint id"
    )
    parser.add_argument(
        "--store",
        metavar="PATH",
        default=os.environ.get("CPSTORE_PATH"),
        help="the store holding checkpoint ids (default: $CPSTORE_PATH)",
    )
    audit_key_arg(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--wide",
        action="store_true",
        help="show expected and observed values in full in the table (default: cut at 30)",
    )
    parser.add_argument(
        "--record",
        action="store_true",
        help="append the decision to the store's audit log, where it becomes the "
        "checkpoint's standing decision (the one gates follow); default: look only",
    )
    parser.add_argument(
        "--no-record",
        action="store_true",
        help="do not record the decision (the default; kept for scripts that pass it)",
    )
    parser.add_argument(
        "--max-bytes",
        type=int,
        default=MAX_DOCUMENT_BYTES,
        help=f"largest JSON/msgpack document to read (default {MAX_DOCUMENT_BYTES})",
    )
    parser.add_argument(
        "--no-verify",
        action="store_true",
        help="skip hash verification of stored data on read (explicit, not advised)",
    )
    parser.set_defaults(handler=run_validate)
    return parser


def _cell(value: Any, width: int = 40) -> str:
    text = printable(
        "-"
        if value is None
        else value
        if isinstance(value, str)
        else json.dumps(value, default=jsonable, sort_keys=True)
    )
    return text if width <= 0 or len(text) <= width else text[: width - 3] + "..."


def format_decision(decision: Decision, *, wide: bool = False) -> str:
    """The readable table the command prints; ``wide`` shows values in full."""
    lines = [
        f"verdict   {decision.verdict.name}",
        f"fidelity  {decision.fidelity.value}",
        f"standing  {decision.standing}"
        + ("" if decision.evidence else " (not evidence)")
        + ("" if decision.verified else ": stored data read without verification (--no-verify)")
        + (" - releasable by operator sign-off" if decision.releasable else ""),
        f"decision  {decision.id}"
        + ("" if decision.audit_digest is None else f"  (audit {decision.audit_digest})"),
        f"tokens    recorded {decision.recorded.token_count}, "
        f"replayed {decision.replayed.token_count}",
    ]
    if decision.findings:
        head = ("CODE", "LEVEL", "STREAM", "AT", "EXPECTED", "OBSERVED")
        rows = [
            (
                f.code.value,
                f.level.name,
                f.stream,
                "-" if f.position is None else f"{f.unit} {f.position}",
                _cell(f.expected, 0 if wide else 30),
                _cell(f.observed, 0 if wide else 30),
            )
            for f in decision.findings
        ]
        widths = [max(len(r[i]) for r in (head, *rows)) for i in range(len(head))]
        lines.append("")
        for row in (head, *rows):
            lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        lines.append("")
        lines.extend(f"- {printable(f.message)}" for f in decision.findings)
    for gap in decision.recording_gaps:
        lines.append(
            f"recording gap at step {gap.step}: unpinned {list(gap.unpinned_sources)}, "
            f"unrecorded {list(gap.unrecorded_sources)}"
        )
    return "\n".join(lines)


def _named(path: str, exc: CpstoreError) -> CpstoreError:
    """``exc`` with the file it came from in front of its message (``bad.json: ...``)."""
    if exc.where == path:
        return exc  # it already names the file
    try:
        return type(exc)(f"{path}: {exc.what}", where=exc.where, expected=exc.expected, got=exc.got)
    except TypeError:  # a class with its own constructor: keep the original
        return exc


def _load(arg: str, store: Store | None, max_bytes: int = MAX_DOCUMENT_BYTES) -> str | Run:
    """A side as :func:`validate` takes it: a checkpoint id (resolved) or a loaded file.

    32 hex characters are always an id; an existing file is a document; with a
    store, hex of 8+ characters is an id prefix and a name with ``@`` is
    ``RUN@BRANCH[~N]``; anything else is a file (a missing one is exit 4). A bare name
    that is both is exit 3 (:func:`checkpoint_or_file`).
    """
    if store is not None:
        named = checkpoint_or_file(store, arg)
        if named is not None:
            return named
    if full_checkpoint_id(arg) is not None:
        return arg  # validate says a checkpoint id needs a store
    try:
        return load_document(arg, max_bytes=max_bytes)
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        raise
    except CpstoreError as exc:
        raise _named(arg, exc) from None


def run_validate(args: argparse.Namespace, *, out: TextIO | None = None) -> int:
    """Run ``cpstore validate``; returns the exit code (errors propagate to the CLI)."""
    stream = out if out is not None else sys.stdout
    record = bool(args.record) and not args.no_record
    if args.store is None:
        decision = validate(
            _load(args.recorded, None, args.max_bytes), _load(args.replayed, None, args.max_bytes)
        )
    else:
        if not is_store_url(args.store) and not os.path.exists(args.store):  # (exit 4)
            raise NotFoundError("no store at this path", where=args.store)
        # create=False: validating against a store that is not there is a typo.
        key = audit_key_of(args)
        if key is not None and record:
            refuse_keying(args.store)  # the command line never keys a store's log
        with open_store(args.store, readonly=not record, create=False, audit_key=key) as store:
            decision = validate(
                _load(args.recorded, store, args.max_bytes),
                _load(args.replayed, store, args.max_bytes),
                store=store,
                record=record,
                verify=not args.no_verify,
            )
    if args.json:
        json.dump(decision.to_dict(), stream, default=jsonable, sort_keys=True)
        stream.write("\n")
    else:
        stream.write(format_decision(decision, wide=bool(getattr(args, "wide", False))) + "\n")
    return EXIT_FOR_VERDICT[decision.verdict]
