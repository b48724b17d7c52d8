"""Store-facing sub-commands: inspect/show, diff, log, audit, sign-off, gc/prune, stats.

Each handler returns an exit code (see :mod:`cpstore.cli`); errors propagate as
:class:`~cpstore.CpstoreError` and the entry point turns them into one line.
"""

from __future__ import annotations

import argparse
from typing import Any

from cpstore.cli.common import human, json_arg, open_store_at, print_json, store_arg
from cpstore.cli.exit_codes import (
    EXIT_BAD_INPUT,
    EXIT_FORMAT,
    EXIT_INTEGRITY,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_UNAVAILABLE,
    exit_epilog,
)
from cpstore.decision.gates import sign_off
from cpstore.decision.validate import validate
from cpstore.errors import (
    NotFoundError,
)
from cpstore.native.args import int_argument
from cpstore.store.stats import store_stats

__all__ = ["STORE_EPILOG", "add_parsers"]


# -- inspect / show ----------------------------------------------------------------


def _inspect(args: argparse.Namespace) -> int:
    with open_store_at(args) as store, store.read(args.checkpoint) as cp:
        m = cp.manifest
        if args.part is not None:
            value = cp.state_part(args.part)
            if args.json:
                print_json({"part": args.part, "value": value})
            else:
                print(repr(value))
            return EXIT_OK
        logs = {
            "tokens": {"digest": m.tokens_digest, "count": m.token_count},
            "observations": {"digest": m.observations_digest, "count": len(cp.observations())},
            "call_graph": {"digest": m.call_graph_digest, "count": len(cp.call_graph())},
            "effects": {
                "digest": m.effects_digest,
                "count": len(cp.effects()),
                "sealed": m.ledger_sealed,
            },
            "harness_accesses": {
                "digest": m.harness_digest,
                "count": len(cp.harness_accesses()),
            },
        }
        info: dict[str, Any] = {
            "id": m.id,
            "run_id": m.run_id,
            "branch": m.branch,
            "step": m.step,
            "parent": m.parent,
            "created_at": m.created_at,
            "state": {"kind": m.state_kind, "digest": m.state_digest, "parts": m.state_parts},
            "transcript_digest": m.transcript_digest,
            "provenance_tags": list(m.provenance_tags),
            "metadata": m.metadata,
            "logs": logs,
        }
        if args.tokens:
            limit = min(args.tokens, m.token_count)
            info["first_tokens"] = [list(cp.token(i)) for i in range(limit)]
    if args.json:
        print_json(info)
        return EXIT_OK
    print(f"checkpoint {m.id}")
    print(f"  run {m.run_id}  branch {m.branch}  step {m.step}  parent {m.parent or '-'}")
    print(f"  state {m.state_kind} {m.state_digest}")
    for name, digest in sorted(m.state_parts.items()):
        print(f"    part {name:<20} {digest}")
    print(f"  transcript {m.transcript_digest or '-'}")
    print(f"  tags {', '.join(m.provenance_tags) or '-'}")
    for name, log in logs.items():
        sealed = "" if "sealed" not in log else (" sealed" if log["sealed"] else " UNSEALED")
        print(f"  {name:<17} {log['count']:>10} records  {log['digest'] or '-'}{sealed}")
    for seq, kind, prov, value in info.get("first_tokens", []):
        print(f"    token {seq:>6} {kind:<8} {prov:<9} {value!r}")
    return EXIT_OK


# -- diff ------------------------------------------------------------------------------


def _diff(args: argparse.Namespace) -> int:
    def run() -> Any:
        return validate(args.a, args.b, store=store, record=False)

    if args.store:
        with open_store_at(args) as store:
            decision = run()
    else:
        store = None
        decision = run()
    firsts = decision.divergences
    if args.json:
        print_json({s: f.to_dict() for s, f in firsts.items()})
        return EXIT_OK
    if not firsts:
        print("no divergence: every stream is equal")
        return EXIT_OK
    for stream, f in firsts.items():
        where = f"{f.unit} {f.position}" if f.position is not None else "-"
        print(f"{stream:<14} {f.code.value:<22} at {where}")
        print(f"  expected {f.expected!r}")
        print(f"  observed {f.observed!r}")
    return EXIT_OK


# -- log -------------------------------------------------------------------------------


def _log(args: argparse.Namespace) -> int:
    with open_store_at(args) as store:
        if args.run is None:
            runs = store.runs(limit=args.limit)
            out: Any = {run: store.branches(run) for run in runs}
            if args.json:
                print_json(out)
            else:
                for run, branches in out.items():
                    print(f"{run}: {', '.join(f'{b} -> {c[:12]}' for b, c in branches.items())}")
            return EXIT_OK
        history = store.history(args.run, args.branch, limit=args.limit)
        if not history and store.ref(args.run, args.branch) is None:
            raise NotFoundError("no such run or branch", where=f"{args.run}/{args.branch}")
    if args.json:
        print_json(
            [
                {
                    "id": m.id,
                    "step": m.step,
                    "parent": m.parent,
                    "created_at": m.created_at,
                    "tokens": m.token_count,
                    "sealed": m.ledger_sealed,
                    "tags": list(m.provenance_tags),
                }
                for m in history
            ]
        )
    else:
        for m in history:
            tags = f"  [{', '.join(m.provenance_tags)}]" if m.provenance_tags else ""
            print(f"{m.id}  step {m.step:>6}  tokens {m.token_count:>8}{tags}")
    return EXIT_OK


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


# -- gc / prune ------------------------------------------------------------------------


def _gc(args: argparse.Namespace) -> int:
    with open_store_at(args, readonly=False) as store:
        before = store.disk_bytes()
        if args.delete_run is not None:
            removed = store.delete_run(args.delete_run)
        else:
            removed = store.prune(keep_last=args.keep_last, run_id=args.run)
        after = store.disk_bytes()
    if args.json:
        print_json(
            {"checkpoints_removed": removed, "disk_bytes_before": before, "disk_bytes_after": after}
        )
    else:
        print(f"removed {removed} checkpoint(s); pages in use {human(before)} -> {human(after)}")
    return EXIT_OK


# -- stats -----------------------------------------------------------------------------


def _stats(args: argparse.Namespace) -> int:
    with open_store_at(args) as store:
        s = store_stats(store)
    data = {
        "objects": s.objects,
        "object_bytes": s.object_bytes,
        "checkpoints": s.checkpoints,
        "refs": s.refs,
        "audit_records": s.audit_records,
        "referenced_bytes": s.referenced_bytes,
        "disk_bytes": s.disk_bytes,
        "dedupe_ratio": round(s.dedupe_ratio, 3),
    }
    if args.json:
        print_json(data)
    else:
        print(f"objects          {s.objects:>12}  {human(s.object_bytes)}")
        print(f"checkpoints      {s.checkpoints:>12}")
        print(f"refs             {s.refs:>12}")
        print(f"audit records    {s.audit_records:>12}")
        print(f"referenced       {human(s.referenced_bytes):>12}")
        print(f"dedupe ratio     {s.dedupe_ratio:>12.2f}x")
        print(f"disk (pages)     {human(s.disk_bytes):>12}")
    return EXIT_OK


#: Largest count or index the command line takes (fits every signed 64-bit key).
_MAX_COUNT = 2**63 - 1
_positive = int_argument(1, _MAX_COUNT)
_nonnegative = int_argument(0, _MAX_COUNT)


#: Exit codes any command that opens a store can give (besides its own).
_STORE_CODES = (EXIT_BAD_INPUT, EXIT_NOT_FOUND, EXIT_INTEGRITY, EXIT_UNAVAILABLE, EXIT_FORMAT)
STORE_EPILOG = exit_epilog(*_STORE_CODES)


def add_parsers(sub: Any) -> None:
    """Add the store sub-commands to the main parser."""
    for name in ("inspect", "show"):
        p = sub.add_parser(
            name,
            help="a checkpoint's manifest, its logs with counts and digests, a state part",
            epilog=STORE_EPILOG,
        )
        p.add_argument("checkpoint", metavar="CHECKPOINT", help="checkpoint id (32 hex)")
        p.add_argument("--part", metavar="NAME", help="print this state part's value")
        p.add_argument(
            "--tokens",
            metavar="N",
            type=_nonnegative,
            default=0,
            help="also list the first N tokens",
        )
        store_arg(p)
        json_arg(p)
        p.set_defaults(handler=_inspect)

    p = sub.add_parser(
        "diff",
        help="first divergence per stream between two checkpoints or run documents",
        epilog=STORE_EPILOG,
    )
    p.add_argument("a", metavar="A", help="run-document file or checkpoint id (expected)")
    p.add_argument("b", metavar="B", help="run-document file or checkpoint id (observed)")
    store_arg(p)
    json_arg(p)
    p.set_defaults(handler=_diff)

    p = sub.add_parser(
        "log", help="runs and branches, or a branch's history newest first", epilog=STORE_EPILOG
    )
    p.add_argument("run", metavar="RUN", nargs="?", help="a run id (omit to list runs)")
    p.add_argument("--branch", default="main", help="branch of RUN (default: main)")
    p.add_argument("--limit", type=_positive, default=None, help="at most N entries")
    store_arg(p)
    json_arg(p)
    p.set_defaults(handler=_log)

    p = sub.add_parser(
        "audit",
        help="the hash-chained audit log, filterable, and its chain check",
        epilog=STORE_EPILOG,
    )
    p.add_argument("--kind", help="only records of this kind (decision, signoff, gate, ...)")
    p.add_argument("--start", type=_nonnegative, default=0, help="first index")
    p.add_argument("--limit", type=_positive, default=None, help="at most N records")
    p.add_argument("--check", action="store_true", help="verify the store and the chain")
    store_arg(p)
    json_arg(p)
    p.set_defaults(handler=_audit)

    p = sub.add_parser(
        "sign-off",
        help="operator release of a releasable decision",
        epilog=exit_epilog(*_STORE_CODES, EXIT_REFUSED),
    )
    p.add_argument("decision", metavar="DECISION", help="decision id or its audit digest")
    p.add_argument("--operator", required=True, help="who signs off")
    p.add_argument("--reason", required=True, help="why")
    store_arg(p)
    json_arg(p)
    p.set_defaults(handler=_sign_off)

    for name in ("gc", "prune"):
        p = sub.add_parser(
            name,
            help="retention: keep the newest N per branch or delete a run; sweep",
            epilog=STORE_EPILOG,
        )
        group = p.add_mutually_exclusive_group(required=True)
        group.add_argument(
            "--keep-last", type=_positive, help="keep each branch's newest N checkpoints"
        )
        group.add_argument("--delete-run", metavar="RUN", help="delete every ref of RUN")
        p.add_argument("--run", help="with --keep-last: only this run")
        store_arg(p)
        json_arg(p)
        p.set_defaults(handler=_gc)

    p = sub.add_parser("stats", help="object counts, bytes, dedupe ratio", epilog=STORE_EPILOG)
    store_arg(p)
    json_arg(p)
    p.set_defaults(handler=_stats)
