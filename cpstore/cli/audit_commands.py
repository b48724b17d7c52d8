"""``cpstore audit`` and ``sign-off``: reading the audit log, and the operator release.

Each handler returns an exit code (see :mod:`cpstore.cli`); errors propagate as
:class:`~cpstore.CpstoreError` and the entry point turns them into one line.
"""

from __future__ import annotations

import argparse
from typing import Any

from cpstore.cli.common import (
    STORE_CODES,
    STORE_EPILOG,
    json_arg,
    nonnegative,
    open_store_at,
    positive,
    print_json,
    store_arg,
)
from cpstore.cli.exit_codes import (
    EXIT_INTEGRITY,
    EXIT_OK,
    EXIT_REFUSED,
    exit_epilog,
)
from cpstore.decision.gates import sign_off

__all__ = ["add_audit_parsers"]


# -- audit -----------------------------------------------------------------------------


def _audit(args: argparse.Namespace) -> int:
    with open_store_at(args) as store:
        records = list(store.audit_records(kind=args.kind, start=args.start, limit=args.limit))
        report = store.verify() if args.check else None
    chain_ok = (
        None
        if report is None
        else not any("audit" in p.where or "audit" in p.what for p in report.problems)
    )
    if args.json:
        print_json(
            {
                "records": [
                    {
                        "index": r.index,
                        "digest": r.digest,
                        "prev": r.prev,
                        "kind": r.kind,
                        "time": r.time,
                        "body": r.body,
                    }
                    for r in records
                ],
                "chain_ok": chain_ok,
            }
        )
    else:
        for r in records:
            summary = r.body.get("verdict") or r.body.get("operator") or ""
            print(f"{r.index:>6}  {r.digest}  {r.kind:<10} {summary}")
        if chain_ok is not None:
            print("audit chain verifies" if chain_ok else "AUDIT CHAIN BROKEN")
    return EXIT_INTEGRITY if chain_ok is False else EXIT_OK


# -- sign-off --------------------------------------------------------------------------


def _sign_off(args: argparse.Namespace) -> int:
    with open_store_at(args, readonly=False) as store:
        signed = sign_off(store, args.decision, operator=args.operator, reason=args.reason)
    if args.json:
        print_json(
            {
                "sign_off": signed.audit_digest,
                "decision": signed.decision_id,
                "checkpoint": signed.checkpoint_id,
                "operator": signed.operator,
            }
        )
    else:
        print(f"signed off decision {signed.decision_id} as {signed.audit_digest}")
    return EXIT_OK


def add_audit_parsers(sub: Any) -> None:
    """Add audit and sign-off to the main parser."""
    p = sub.add_parser(
        "audit",
        help="the hash-chained audit log, filterable, and its chain check",
        epilog=STORE_EPILOG,
    )
    p.add_argument("--kind", help="only records of this kind (decision, signoff, gate, ...)")
    p.add_argument("--start", type=nonnegative, default=0, help="first index")
    p.add_argument("--limit", type=positive, default=None, help="at most N records")
    p.add_argument("--check", action="store_true", help="verify the store and the chain")
    store_arg(p)
    json_arg(p)
    p.set_defaults(handler=_audit)

    p = sub.add_parser(
        "sign-off",
        help="operator release of a releasable decision",
        epilog=exit_epilog(*STORE_CODES, EXIT_REFUSED),
    )
    p.add_argument("decision", metavar="DECISION", help="decision id or its audit digest")
    p.add_argument("--operator", required=True, help="who signs off")
    p.add_argument("--reason", required=True, help="why")
    store_arg(p)
    json_arg(p)
    p.set_defaults(handler=_sign_off)
