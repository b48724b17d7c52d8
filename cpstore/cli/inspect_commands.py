"""``cpstore inspect``/``show``, ``diff`` and ``log``: reading checkpoints, runs and branches.

Each handler returns an exit code (see :mod:`cpstore.cli`); errors propagate as
:class:`~cpstore.CpstoreError` and the entry point turns them into one line.
"""

from __future__ import annotations

import argparse
from typing import Any

from cpstore.cli.child import reads_in_child
from cpstore.cli.common import (
    ID_HELP,
    STORE_CODES,
    checkpoint_or_file,
    command,
    json_arg,
    nonnegative,
    open_store_at,
    positive,
    print_json,
    read_named,
    retry_renamed,
    say,
    show,
    stamp,
    store_arg,
)
from cpstore.cli.exit_codes import (
    EXIT_DIFFERENT,
    EXIT_OK,
)
from cpstore.errors import InvalidInputError
from cpstore.store.branches import runs_with_branches
from cpstore.store.diff import diff
from cpstore.store.ids import missing_ref

__all__ = ["add_inspect_parsers"]


# -- inspect / show ----------------------------------------------------------------


def _inspect(args: argparse.Namespace) -> int:
    with open_store_at(args) as store, read_named(store, args.checkpoint) as cp:
        m = cp.manifest
        if args.part is not None:
            value = cp.state_part(args.part)
            if args.json:
                print_json({"checkpoint_id": m.id, "part": args.part, "value": value})
            else:
                say(show(value))
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
            "checkpoint_id": m.id,
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
            info["first_tokens"] = [
                {"seq": seq, "kind": kind, "provenance": prov, "value": value}
                for seq, kind, prov, value in (cp.token(i) for i in range(limit))
            ]
    if args.json:
        print_json(info)
        return EXIT_OK
    say(f"checkpoint {m.id}")
    say(f"  run {m.run_id}  branch {m.branch}  step {m.step}  parent {m.parent or '-'}")
    say(f"  created {stamp(m.created_at)}")
    for key, value in sorted(m.metadata.items()):
        say(f"  metadata {key} = {show(value)}")
    say(f"  state {m.state_kind} {m.state_digest}")
    for name, digest in sorted(m.state_parts.items()):
        say(f"    part {name:<20} {digest}")
    say(f"  transcript {m.transcript_digest or '-'}")
    say(f"  tags {', '.join(m.provenance_tags) or '-'}")
    for name, log in logs.items():
        sealed = "" if "sealed" not in log else (" sealed" if log["sealed"] else " UNSEALED")
        say(f"  {name:<17} {log['count']:>10} records  {log['digest'] or '-'}{sealed}")
    for t in info.get("first_tokens", []):
        say(f"    token {t['seq']:>6} {t['kind']:<8} {t['provenance']:<9} {show(t['value'])}")
    return EXIT_OK


# -- diff ------------------------------------------------------------------------------


def _diff(args: argparse.Namespace) -> int:
    if args.store:
        with open_store_at(args) as store:
            result = retry_renamed(
                lambda: (_side(store, args.a), _side(store, args.b)),
                lambda sides: diff(*sides, store=store),
            )
    else:
        result = diff(args.a, args.b)
    firsts = result.first_per_stream()
    if args.json:
        print_json(
            {
                "a": result.a,
                "b": result.b,
                "differs": result.differs,
                "streams": {s: f.to_dict() for s, f in firsts.items()},
                "state_parts": [
                    {
                        "part": p.name,
                        "expected_digest": p.expected,
                        "observed_digest": p.observed,
                        "expected": p.expected_value,
                        "observed": p.observed_value,
                    }
                    for p in result.state_parts
                ],
            }
        )
        return EXIT_DIFFERENT if result.differs else EXIT_OK
    if not result.differs:
        say("no difference: every stream is equal")
        return EXIT_OK
    for stream, f in firsts.items():
        where = f"{f.unit} {f.position}" if f.position is not None else "-"
        say(f"{stream:<14} {f.code.value:<22} at {where}")
        if stream == "state" and result.state_parts:
            for p in result.state_parts:
                say(f"  part {p.name!r}")
                say(f"    expected {'(absent)' if p.expected is None else show(p.expected_value)}")
                say(f"    observed {'(absent)' if p.observed is None else show(p.observed_value)}")
            continue
        say(f"  expected {show(f.expected)}")
        say(f"  observed {show(f.observed)}")
    return EXIT_DIFFERENT


def _side(store: Any, name: str) -> str:
    """A file stays a file; anything else names a checkpoint (prefix, RUN@BRANCH~N); a
    bare name that is both is exit 3 (:func:`checkpoint_or_file`)."""
    named = checkpoint_or_file(store, name)
    return name if named is None else named


# -- log -------------------------------------------------------------------------------


def _log(args: argparse.Namespace) -> int:
    if args.run is None and args.branch is not None:  # it listed every run, B ignored
        raise InvalidInputError("--branch needs RUN (cpstore log RUN --branch B)", got=args.branch)
    branch = "main" if args.branch is None else args.branch
    with open_store_at(args) as store:
        if args.run is None:
            # One read txn: a run deleted meanwhile is listed whole or not at all.
            out: Any = runs_with_branches(store.backend, limit=args.limit)
            if args.json:
                print_json(out)
            else:
                for run, branches in out.items():
                    say(f"{run}: {', '.join(f'{b} -> {c}' for b, c in branches.items())}")
            return EXIT_OK
        history = store.history(args.run, branch, limit=args.limit)
        if not history and store.ref(args.run, branch) is None:
            with store.backend.read_txn() as txn:  # damaged refs: exit 5, not "no such run"
                raise missing_ref(store.backend, txn, f"{args.run}/{branch}")
    if args.json:
        print_json(
            [
                {
                    "checkpoint_id": m.id,
                    "step": m.step,
                    "parent": m.parent,
                    "created_at": m.created_at,
                    "tokens": m.token_count,
                    "sealed": m.ledger_sealed,
                    "provenance_tags": list(m.provenance_tags),
                }
                for m in history
            ]
        )
    else:
        for m in history:
            tags = f"  [{', '.join(m.provenance_tags)}]" if m.provenance_tags else ""
            say(f"{m.id}  {stamp(m.created_at)}  step {m.step:>6}  tokens {m.token_count:>8}{tags}")
    return EXIT_OK


def add_inspect_parsers(sub: Any) -> None:
    """Add inspect/show, diff and log to the main parser."""
    for name in ("inspect", "show"):
        p = command(
            sub,
            name,
            "a checkpoint's manifest, its logs with counts and digests, a state part",
            "Print a checkpoint's manifest (run, branch, step, parent, creation time, "
            "metadata, state parts, provenance tags) and each log's record count and "
            "digest; --part prints one state part's value, --tokens the first N tokens. " + ID_HELP,
            STORE_CODES,
        )
        p.add_argument(
            "checkpoint", metavar="CHECKPOINT", help="checkpoint (id, prefix, RUN@BRANCH~N)"
        )
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
        p.set_defaults(handler=reads_in_child(_inspect, doing="reading the checkpoint"))

    p = command(
        sub,
        "diff",
        "what differs between two checkpoints or run documents, first per stream",
        "Compare A (expected) with B (observed) stream by stream and print the first "
        "difference of each; a state difference lists the state parts that differ with "
        "both values. Only content counts: a side's replay mode, unsealed ledger or tags "
        f"are not differences. Exit {EXIT_DIFFERENT} when they differ, 0 when they do "
        "not. " + ID_HELP,
        (*STORE_CODES, EXIT_DIFFERENT),
    )
    p.add_argument("a", metavar="A", help="run-document file or checkpoint (expected)")
    p.add_argument("b", metavar="B", help="run-document file or checkpoint (observed)")
    store_arg(p)
    json_arg(p)
    p.set_defaults(handler=reads_in_child(_diff, doing="reading the checkpoints"))

    p = command(
        sub,
        "log",
        "runs and branches, or a branch's history newest first",
        "Without RUN, list every run with its branches and their head ids. With RUN, "
        "print the history of --branch newest first: full id (what inspect takes), "
        "creation time (UTC), step, token count and provenance tags.",
        STORE_CODES,
    )
    p.add_argument("run", metavar="RUN", nargs="?", help="a run id (omit to list runs)")
    p.add_argument("--branch", default=None, help="branch of RUN (default: main)")
    p.add_argument("--limit", type=positive, default=None, help="at most N entries")
    store_arg(p)
    json_arg(p)
    p.set_defaults(handler=reads_in_child(_log, doing="reading the runs"))
