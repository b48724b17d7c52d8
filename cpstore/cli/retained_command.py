"""``cpstore retained``: list the heads ``reset_ref`` and ``repair_ref`` keep, or release
one, or every head one audit record kept (audited).

A head a rollback moved its branch away from stays a retention root, with its whole
lineage, until it is released (docs/store.md, "Moving a ref back"); before this command
only the API (``Store.retained()``, ``Store.release_retained()``) could see or free
them, and ``cpstore gc --delete-run`` of a run left with retained heads only said
"no such run" (audit58).
"""

from __future__ import annotations

import argparse
from typing import Any

from cpstore.cli.common import (
    ID_HELP,
    STORE_CODES,
    command,
    json_arg,
    open_store_at,
    print_json,
    say,
    store_arg,
)
from cpstore.cli.exit_codes import EXIT_NOT_FOUND, EXIT_OK
from cpstore.errors import InvalidInputError, NotFoundError
from cpstore.native.args import check_text

__all__ = ["add_retained_parser"]


def _list(args: argparse.Namespace) -> int:
    with open_store_at(args) as store:
        heads = store.retained()
    rows = [
        {  # README's one vocabulary: checkpoint_id and run_id, as inspect, log and verify
            "checkpoint_id": cid,
            "run_id": head["run"],
            "branch": head["branch"],
            "audit": head["audit"],
        }
        for cid, head in sorted(heads.items(), key=lambda kv: (kv[1]["run"], kv[1]["branch"]))
        if args.run is None or head["run"] == args.run
    ]
    if args.json:
        print_json(rows)
        return EXIT_OK
    for row in rows:
        where = f"{row['run_id']}@{row['branch']}"
        say(f"{row['checkpoint_id']}  {where}  (kept by audit {row['audit']})")
    whose = "" if args.run is None else f" of run {args.run}"
    say(f"{len(rows)} retained head(s){whose}")
    return EXIT_OK


def _release(args: argparse.Namespace) -> int:
    with open_store_at(args, readonly=False) as store:
        cid = store.resolve(args.release)  # any checkpoint name; retained or not, below
        if cid not in store.retained():
            raise NotFoundError(
                "not a retained head (cpstore retained lists them)",
                where="retained",
                got=cid,
            )
        # The API's own txn checks again: another process's release meanwhile is exit 4.
        rec = store.release_retained(cid, operator=args.operator, reason=args.reason)
    if args.json:
        print_json({"checkpoint_id": cid, "audit": str(rec.digest), "index": rec.index})
    else:
        say(f"released retained head {cid} (audit {rec.digest}); the next gc may sweep it")
    return EXIT_OK


def _release_by(args: argparse.Namespace) -> int:
    with open_store_at(args, readonly=False) as store:
        recs = store.release_retained_by(
            args.release_by, operator=args.operator, reason=args.reason
        )
    released = [str(r.body["checkpoint"]) for r in recs]
    if args.json:
        print_json(
            [
                {"checkpoint_id": cid, "audit": str(r.digest), "index": r.index}
                for cid, r in zip(released, recs, strict=True)
            ]
        )
    else:
        for cid, r in zip(released, recs, strict=True):
            say(f"released retained head {cid} (audit {r.digest})")
        say(f"{len(recs)} retained head(s) released; the next gc may sweep them")
    return EXIT_OK


def _retained(args: argparse.Namespace) -> int:
    if args.run is not None:
        check_text(args.run, "--run")
    if args.release is None and args.release_by is None:
        if args.operator is not None or args.reason is not None:
            raise InvalidInputError("--operator and --reason go with --release or --release-by")
        return _list(args)
    if args.release is not None and args.release_by is not None:
        raise InvalidInputError("--release names one head, --release-by an audit record: one")
    if args.run is not None:
        raise InvalidInputError("--run lists; --release and --release-by name what they free")
    if args.operator is None or args.reason is None:
        raise InvalidInputError(
            "--release and --release-by need --operator and --reason (both are audited)",
            got={"operator": args.operator, "reason": args.reason},
        )
    return _release(args) if args.release is not None else _release_by(args)


def add_retained_parser(sub: Any) -> None:
    """Add ``retained`` to the main parser."""
    p = command(
        sub,
        "retained",
        "heads a rollback or a ref repair keeps, with their lineage; --release frees them",
        "List the retained heads: each a checkpoint a branch was reset away from, kept "
        "with its whole lineage by every gc until released (id, run@branch, the audit "
        "digest of its ref_reset record). --release CHECKPOINT --operator WHO --reason "
        "WHY stops keeping one (a retained_release audit record); the next gc may then "
        "sweep it. --release-by AUDIT frees every head one audit record retained (a "
        "ref_repair's retained and kept heads), a retained_release record each. "
        f"{ID_HELP} A checkpoint that is not a retained head is exit "
        f"{EXIT_NOT_FOUND}.",
        STORE_CODES,
    )
    p.add_argument("--run", help="list only this run's retained heads")
    p.add_argument("--release", metavar="CHECKPOINT", help="release this retained head")
    p.add_argument(
        "--release-by",
        metavar="AUDIT",
        help="release every head the audit record with this digest retained "
        "(a ref_repair's retained and kept, a ref_reset's old head)",
    )
    p.add_argument("--operator", help="with --release/--release-by: who releases")
    p.add_argument("--reason", help="with --release/--release-by: why")
    store_arg(p)
    json_arg(p)
    p.set_defaults(handler=_retained)
