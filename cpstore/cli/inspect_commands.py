"""``cpstore inspect``/``show``, ``diff`` and ``log``: reading checkpoints, runs and branches.

Each handler returns an exit code (see :mod:`cpstore.cli`); errors propagate as
:class:`~cpstore.CpstoreError` and the entry point turns them into one line.
"""

from __future__ import annotations

import argparse
from typing import Any

from cpstore.cli.common import (
    STORE_EPILOG,
    json_arg,
    nonnegative,
    open_store_at,
    positive,
    print_json,
    store_arg,
)
from cpstore.cli.exit_codes import (
    EXIT_OK,
)
from cpstore.decision.validate import validate
from cpstore.errors import (
    NotFoundError,
)

__all__ = ["add_inspect_parsers"]


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


def add_inspect_parsers(sub: Any) -> None:
    """Add inspect/show, diff and log to the main parser."""
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
            type=nonnegative,
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
    p.add_argument("--limit", type=positive, default=None, help="at most N entries")
    store_arg(p)
    json_arg(p)
    p.set_defaults(handler=_log)
