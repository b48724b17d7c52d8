"""``cpstore audit`` and ``sign-off``: reading the audit log, and the operator release.

Each handler returns an exit code (see :mod:`cpstore.cli`); errors propagate as
:class:`~cpstore.CpstoreError` and the entry point turns them into one line.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from cpstore.cli.common import (
    STORE_CODES,
    command,
    json_arg,
    nonnegative,
    open_store_at,
    positive,
    print_json,
    say,
    stamp,
    store_arg,
)
from cpstore.cli.exit_codes import (
    EXIT_BAD_INPUT,
    EXIT_INTEGRITY,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_USAGE,
)
from cpstore.cli.verify_command import MACS_UNCHECKED, verify_report
from cpstore.decision.gates import sign_off
from cpstore.store.audit import DECISION_PREFIX, HEAD_KEY
from cpstore.store.audit_gates import DECISION_ID_PREFIX, SIGNED_PREFIX, USED_PREFIX
from cpstore.store.audit_named import AUDITED_PREFIX
from cpstore.store.audit_permits import ODD_ID_PREFIX, PERMIT_PREFIX, QUARANTINE_PREFIX
from cpstore.store.keyed_audit import MAC_HEAD
from cpstore.store.model import Problem

__all__ = ["add_audit_parsers"]


# -- audit -----------------------------------------------------------------------------


#: Record kinds cpstore writes (``--kind`` takes one of these).
AUDIT_KINDS = (
    "decision",
    "signoff",
    "gate",
    "resume",
    "ref_reset",
    "ref_repair",
    "retained_release",
    "gc",
)


def _summary(kind: str, body: dict[str, Any]) -> str:
    """One readable line about an audit record: what it decided, about what, by whom."""
    if kind == "decision":
        recorded = body.get("recorded") or {}
        line = (
            f"{body.get('verdict')} decision {body.get('decision_id')} "
            f"checkpoint {recorded.get('checkpoint_id') or '-'}"
        )
        imported = body.get("imported")
        if isinstance(imported, dict) and imported.get("branch_only") is True:
            # A quarantine carried for its branch only (docs/format.md): about no
            # checkpoint here; said so, with the branch it quarantines.
            line += (
                f" (branch only: quarantines run {recorded.get('run_id')!r} branch "
                f"{recorded.get('branch')!r}; checkpoint {imported.get('checkpoint_id')} "
                "in its source)"
            )
        return line
    if kind == "signoff":
        return (
            f"decision {body.get('decision_id')} signed off by {body.get('operator')!r}: "
            f"{body.get('reason')}"
        )
    if kind == "gate":
        so = body.get("sign_off")
        return (
            f"{body.get('gate')} passed checkpoint {body.get('checkpoint_id')} "
            f"decision {body.get('decision_id')}" + (f" sign-off {so}" if so else "")
        )
    if kind == "resume":
        return (
            f"permit {body.get('permit')} used by {body.get('run_id')}@{body.get('branch')} "
            f"from checkpoint {body.get('checkpoint_id')}"
        )
    if kind == "gc":
        return (
            f"{body.get('operation')} removed {body.get('checkpoints_removed')} checkpoint(s)"
            + (f", {len(body.get('decided') or [])} with decisions" if body.get("decided") else "")
        )
    who = body.get("operator")
    return f"by {who!r}: {body.get('reason')}" if who else ""


#: Where the audit log's own problems are: its records, MACs, head and the indexes built
#: from it. Told by place, not by the word "audit" anywhere in a problem: a damaged ref
#: of a run named "audit-bot" is the store's, and a gate index's lost row the log's.
_AUDIT_PLACES = (
    "audit/",
    "audit_index/",
    "audit_mac/",
    *(
        "meta/" + key.decode()
        for key in (
            HEAD_KEY,
            MAC_HEAD,
            DECISION_PREFIX,
            AUDITED_PREFIX,
            SIGNED_PREFIX,
            DECISION_ID_PREFIX,
            USED_PREFIX,
            PERMIT_PREFIX,
            QUARANTINE_PREFIX,
            ODD_ID_PREFIX,
        )
    ),
)


def _of_the_audit_log(problem: Problem) -> bool:
    return isinstance(problem.where, str) and problem.where.startswith(_AUDIT_PLACES)


def _check_vouched(store: Any, records: list[Any]) -> None:
    """AuditChainError (exit 5) at the first listed record the chain does not vouch for:
    its digest is not the next record's ``prev`` (or the head's, for the last record). An
    altered record that still decodes was listed as if sound (audit62)."""
    if not records:
        return
    with store.audit_view() as log:
        for rec, after in zip(records, [*records[1:], None], strict=True):
            log.check_vouched(rec, after, what="; cpstore audit --check reports every problem")


def _audit(args: argparse.Namespace) -> int:
    if args.kind is not None and args.kind not in AUDIT_KINDS:
        # A usage error in one line (argparse's own would print the whole usage).
        shown = repr(args.kind).encode("ascii", "backslashreplace").decode()
        print(
            f"cpstore audit: unknown record kind {shown}; expected one of {', '.join(AUDIT_KINDS)}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    with open_store_at(args) as store:
        records = list(store.audit_records(kind=args.kind, start=args.start, limit=args.limit))
        # A keyed log's records are listed with their MACs checked when the key was given
        # (AuditChainError, exit 5, at the first forged one; with --check the walk below
        # reports every one instead); without the key, say so.
        macs = None
        if store.audit_keyed:
            macs = store.backend.audit_key is not None
            for r in records if macs and not args.check else ():
                store.check_audit_mac(r.index)
        if not args.check:  # --check reports every problem instead
            _check_vouched(store, records)
    # As cpstore verify walks: in a child process, so damage that kills liblmdb is exit 5.
    report = verify_report(args) if args.check else None
    if report is not None:
        macs = args.macs
    problems = [] if report is None else list(report.problems)
    chain_ok = None if report is None else not any(map(_of_the_audit_log, problems))
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
                "audit_macs_checked": macs,
                "store_ok": None if report is None else report.ok,
                "problems": [
                    {"what": p.what, "where": p.where, "expected": p.expected, "got": p.got}
                    for p in problems
                ],
            }
        )
    else:
        for r in records:
            head = f"{r.index:>6}  {stamp(r.time)}  {r.digest}  {r.kind:<10}"
            # Shown, never acted on: a kind or a reason holding a newline or an escape
            # sequence forged a line of the listing (audit68).
            say(f"{head} {_summary(r.kind, r.body)}".rstrip())
        counts: dict[str, int] = {}
        for r in records:
            counts[r.kind] = counts.get(r.kind, 0) + 1
        print(
            f"{len(records)} record(s)"
            + (": " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) if counts else "")
        )
        if macs is False:
            print(MACS_UNCHECKED)
        if report is not None:
            for p in problems:
                say(f"PROBLEM {p.where}: {p.what}")
            print(
                ("audit chain verifies" if chain_ok else "AUDIT CHAIN BROKEN")
                + (" (digest chain only: audit MACs NOT checked)" if macs is False else "")
            )
            print(
                "store verifies"
                if report.ok
                else f"STORE DAMAGED: {len(problems)} problem(s) (cpstore verify for details)"
            )
    return EXIT_INTEGRITY if report is not None and not report.ok else EXIT_OK


# -- sign-off --------------------------------------------------------------------------


def _sign_off(args: argparse.Namespace) -> int:
    with open_store_at(args, readonly=False) as store:
        signed = sign_off(store, args.decision, operator=args.operator, reason=args.reason)
    if args.json:
        print_json(
            {
                "sign_off": signed.audit_digest,
                "decision_id": signed.decision_id,
                "checkpoint_id": signed.checkpoint_id,
                "operator": signed.operator,
                "reason": signed.reason,
                "time": signed.time,
            }
        )
    else:
        print(
            f"signed off decision {signed.decision_id} (checkpoint {signed.checkpoint_id}) "
            f"as {signed.audit_digest}"
        )
    return EXIT_OK


def add_audit_parsers(sub: Any) -> None:
    """Add audit and sign-off to the main parser."""
    p = command(
        sub,
        "audit",
        "the hash-chained audit log, filterable; --check verifies the store and the chain",
        "List audit records oldest first: index, time (UTC), digest, kind and what each "
        "says (a decision's verdict, id and checkpoint; a sign-off's decision and "
        "operator; a gate's passage), then a count per kind. A listed record the chain "
        f"does not vouch for (altered in place) is exit {EXIT_INTEGRITY}. --check also "
        "verifies the "
        f"whole store and the chain (as cpstore verify) and exits {EXIT_INTEGRITY} on any "
        "problem, in the store or in the chain.",
        STORE_CODES,
    )
    p.add_argument(
        "--kind",
        metavar="KIND",
        help="only records of this kind: " + ", ".join(AUDIT_KINDS) + " (another is exit 2)",
    )
    p.add_argument("--start", type=nonnegative, default=0, help="first index")
    p.add_argument("--limit", type=positive, default=None, help="at most N records")
    p.add_argument(
        "--check", action="store_true", help="verify the whole store and the audit chain"
    )
    store_arg(p)
    json_arg(p)
    p.set_defaults(handler=_audit)

    p = command(
        sub,
        "sign-off",
        "operator release of a releasable decision",
        "Record an operator's release of a QUARANTINE or REJECT decision whose findings "
        "are all releasable, so resume_gate lets the runtime resume once. DECISION is the "
        "decision id, the digest of its audit record (both printed by cpstore audit), or "
        "a unique prefix of >= 8 hex characters of either (shorter or not hex: exit "
        f"{EXIT_BAD_INPUT}). Refused (exit 6): an ACCEPT, "
        "a decision with a finding no sign-off releases, a decision a later one "
        "supersedes, a decision already signed off.",
        (*STORE_CODES, EXIT_REFUSED),
    )
    p.add_argument(
        "decision", metavar="DECISION", help="decision id or its audit digest (or a prefix)"
    )
    p.add_argument("--operator", required=True, help="who signs off")
    p.add_argument("--reason", required=True, help="why")
    store_arg(p)
    json_arg(p)
    p.set_defaults(handler=_sign_off)
