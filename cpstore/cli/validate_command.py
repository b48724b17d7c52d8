"""``cpstore validate RECORDED REPLAYED``: the decision table from the command line.

Each of RECORDED and REPLAYED is a run-document file (JSON or msgpack) or,
with ``--store PATH``, a checkpoint id. Prints a readable table (or, with
``--json``, one JSON object with ``verdict``, ``fidelity`` and ``findings``)
and exits 0 only for ACCEPT, 10 for REJECT and 11 for QUARANTINE; bad input
is 3, a missing store or checkpoint 4 (see :mod:`cpstore.cli`). With a store
the decision is appended to its audit log unless ``--no-record`` is given,
which also opens the store read-only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, TextIO

from cpstore.cli.common import jsonable
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
from cpstore.errors import NotFoundError
from cpstore.store.facade import open as open_store

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
        "(32 hex characters are always an id; write ./NAME for a file named like one).",
        epilog=_EPILOG,
    )
    parser.add_argument(
        "recorded", metavar="RECORDED", help="recording: document file or checkpoint id"
    )
    parser.add_argument(
        "replayed", metavar="REPLAYED", help="replay: document file or checkpoint id"
    )
    parser.add_argument("--store", metavar="PATH", help="the store holding checkpoint ids")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--no-record",
        action="store_true",
        help="do not append the decision to the audit log (opens the store read-only)",
    )
    parser.add_argument(
        "--no-verify",
        action="store_true",
        help="skip hash verification of stored data on read (explicit, not advised)",
    )
    parser.set_defaults(handler=run_validate)
    return parser


def _cell(value: Any, width: int = 40) -> str:
    text = (
        "-"
        if value is None
        else value
        if isinstance(value, str)
        else json.dumps(value, default=jsonable, sort_keys=True)
    )
    return text if len(text) <= width else text[: width - 3] + "..."


def format_decision(decision: Decision) -> str:
    """The readable table the command prints."""
    lines = [
        f"verdict   {decision.verdict.name}",
        f"fidelity  {decision.fidelity.value}",
        f"standing  {decision.standing}"
        + ("" if decision.evidence else " (not evidence)")
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
                _cell(f.expected, 30),
                _cell(f.observed, 30),
            )
            for f in decision.findings
        ]
        widths = [max(len(r[i]) for r in (head, *rows)) for i in range(len(head))]
        lines.append("")
        for row in (head, *rows):
            lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        lines.append("")
        lines.extend(f"- {f.message}" for f in decision.findings)
    for gap in decision.recording_gaps:
        lines.append(
            f"recording gap at step {gap.step}: unpinned {list(gap.unpinned_sources)}, "
            f"unrecorded {list(gap.unrecorded_sources)}"
        )
    return "\n".join(lines)


def run_validate(args: argparse.Namespace, *, out: TextIO | None = None) -> int:
    """Run ``cpstore validate``; returns the exit code (errors propagate to the CLI)."""
    stream = out if out is not None else sys.stdout
    if args.store is None:
        decision = validate(args.recorded, args.replayed)
    else:
        readonly = bool(args.no_record)
        if not os.path.exists(args.store):  # as every store command says it (exit 4)
            raise NotFoundError("no store at this path", where=args.store)
        # create=False: validating against a store that is not there is a typo.
        with open_store(args.store, readonly=readonly, create=False) as store:
            decision = validate(
                args.recorded,
                args.replayed,
                store=store,
                record=not readonly,
                verify=not args.no_verify,
            )
    if args.json:
        json.dump(decision.to_dict(), stream, default=jsonable, sort_keys=True)
        stream.write("\n")
    else:
        stream.write(format_decision(decision) + "\n")
    return EXIT_FOR_VERDICT[decision.verdict]
