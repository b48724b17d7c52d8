"""``cpstore retained``: list the heads ``reset_ref`` and ``repair_ref`` keep (every hold
on each), or release one hold, or every hold one audit record made (audited).

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
    # One row per hold (holders69): a checkpoint several audit records keep is listed
    # once per holder, each of which has its own reason to keep it.
    rows = [
        {  # README's one vocabulary: checkpoint_id and run_id, as inspect, log and verify
            "checkpoint_id": cid,
            "run_id": hold["run"],
            "branch": hold["branch"],
            "audit": hold["audit"],
        }
        for cid, head in heads.items()
        for hold in head["holds"] or [head]  # a malformed row: one row of None
        if args.run is None or hold["run"] == args.run
    ]
    rows.sort(key=lambda r: (str(r["run_id"]), str(r["branch"]), r["checkpoint_id"]))
    if args.json:
        print_json(rows)
        return EXIT_OK
    for row in rows:
        if row["audit"] is None:
            say(f"{row['checkpoint_id']}  (its retained row is malformed: cpstore verify)")
            continue
        where = f"{row['run_id']}@{row['branch']}"
        say(f"{row['checkpoint_id']}  {where}  (kept by audit {row['audit']})")
    whose = "" if args.run is None else f" of run {args.run}"
    count = len({row["checkpoint_id"] for row in rows})
    say(f"{count} retained head(s){whose}, {len(rows)} hold(s)")
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
        rec = store.release_retained(
            cid, operator=args.operator, reason=args.reason, holder=args.holder
        )
    left = list(rec.body["holders_left"])
    if args.json:
        print_json(
            {
                "checkpoint_id": cid,
                "holder": rec.body["holder"],
                "holders_left": left,
                "audit": str(rec.digest),
                "index": rec.index,
            }
        )
    elif left:
        say(
            f"released the hold of audit {rec.body['holder']} on {cid} (audit {rec.digest}); "
            f"still kept by audit {', '.join(left)}"
        )
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
                {
                    "checkpoint_id": cid,
                    "holders_left": list(r.body["holders_left"]),
                    "audit": str(r.digest),
                    "index": r.index,
                }
                for cid, r in zip(released, recs, strict=True)
            ]
        )
    else:
        for cid, r in zip(released, recs, strict=True):
            left = list(r.body["holders_left"])
            still = f"; still kept by audit {', '.join(left)}" if left else ""
            say(f"released retained head {cid} (audit {r.digest}){still}")
        say(f"{len(recs)} hold(s) released; the next gc may sweep what no hold keeps")
    return EXIT_OK


def _retained(args: argparse.Namespace) -> int:
    if args.run is not None:
        check_text(args.run, "--run")
    if args.holder is not None and args.release is None:
        raise InvalidInputError("--holder names which hold --release frees")
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
        "List the retained heads: each a checkpoint a branch was reset away from (or a "
        "ref repair kept), kept with its whole lineage by every gc while any hold on it "
        "stands: one line per hold (id, run@branch, the digest of the audit record that "
        "holds it). --release CHECKPOINT --operator WHO --reason WHY releases its hold "
        "(a retained_release audit record); a checkpoint several records hold needs "
        "--holder AUDIT (exit 3 lists them). The next gc may sweep it once no hold is "
        "left. --release-by AUDIT releases every hold one audit record made (a "
        "ref_repair's retained and kept heads), a retained_release record each. "
        f"{ID_HELP} A checkpoint that is not a retained head is exit "
        f"{EXIT_NOT_FOUND}.",
        STORE_CODES,
    )
    p.add_argument("--run", help="list only this run's retained heads")
    p.add_argument("--release", metavar="CHECKPOINT", help="release this retained head")
    p.add_argument(
        "--holder",
        metavar="AUDIT",
        help="with --release: the audit digest of the hold to release (needed when "
        "several audit records hold the checkpoint)",
    )
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
