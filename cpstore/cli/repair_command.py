"""``cpstore repair-ref``: put back, replace or delete a ref the store says is damaged.

``verify`` reports a damaged ref, a damaged ``meta/refs_digest`` or a refs table short of
its count (a ref row deleted behind cpstore's back, which refuses every create until it
is put back: docs/store.md, "No ref is created from nothing"), and each message points
to ``repair_ref``. Before this command only the API could repair, so an operator with a
shell and no Python could read the damage and not mend it. The command is the API's
``Store.repair_ref`` with its checks and refusals unchanged: an intact ref is exit 8
(use ``set_ref`` or ``reset_ref``), a put-back that is not the ref that vanished exit 5
naming the one that did (``--force`` accepts it, recorded), nothing written on any
refusal; every repair is one ``ref_repair`` audit record, which keeps the damaged ref's
head and what the repaired table no longer reaches as retained heads
(``cpstore retained``).
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
from cpstore.cli.exit_codes import EXIT_CONFLICT, EXIT_INTEGRITY, EXIT_NOT_FOUND, EXIT_OK
from cpstore.errors import InvalidInputError
from cpstore.native.args import check_text

__all__ = ["add_repair_parser"]


def _repair(args: argparse.Namespace) -> int:
    check_text(args.run, "RUN")
    check_text(args.branch, "BRANCH")
    if (args.checkpoint is None) == (not args.delete):
        raise InvalidInputError(
            "name the head to put the ref back at (CHECKPOINT), or --delete: one of them",
            got={"checkpoint": args.checkpoint, "delete": args.delete},
        )
    with open_store_at(args, readonly=False) as store:
        # Any checkpoint name; the API checks it is a stored checkpoint of RUN.
        new = None if args.delete else store.resolve(args.checkpoint)
        rec = store.repair_ref(
            args.run,
            args.branch,
            new,
            operator=args.operator,
            reason=args.reason,
            force=args.force,
        )
    body: dict[str, Any] = rec.body
    if args.json:
        print_json(
            {
                "run_id": body["run"],
                "branch": body["branch"],
                "checkpoint_id": body["new"],
                "damaged": body["damaged"],
                "moved_from": body["moved_from"],
                "moved_value": body["moved_value"],
                "retained": body["retained"],
                "kept": list(body["kept"]),
                "forced": body["forced"],
                "overrode": body["overrode"],
                "refs": dict(body["refs"]),
                "audit": str(rec.digest),
                "index": rec.index,
            }
        )
        return EXIT_OK
    where = f"{body['run']}@{body['branch']}"
    done = "deleted" if body["new"] is None else f"set to {body['new']}"
    say(f"repaired {where}: {done} (audit {rec.digest})")
    if body["moved_from"] is not None:
        say(f"deleted its row stored under the damaged key {body['moved_from']} (hex)")
    overrode = body["overrode"]
    if overrode is not None:
        named = (
            "a ref no stored checkpoint names"
            if overrode.get("run") is None
            else f"{overrode['run']}@{overrode['branch']} at {overrode['head']}"
        )
        say(f"forced: the check named {named} as the ref that vanished")
    kept = [c for c in (body["retained"], *body["kept"]) if c is not None]
    if kept:
        say(
            f"kept as retained head(s): {', '.join(kept)} "
            f"(cpstore retained --release-by {rec.digest} frees them)"
        )
    return EXIT_OK


def add_repair_parser(sub: Any) -> None:
    """Add ``repair-ref`` to the main parser."""
    p = command(
        sub,
        "repair-ref",
        "put back, replace or delete a damaged or vanished ref (audited)",
        "Repair the ref RUN@BRANCH when verify says it is damaged, the refs digest is "
        "damaged, or the refs table is short of its count (a ref row deleted outside "
        "cpstore: every create is refused until it is put back). CHECKPOINT is the head "
        "to put it back at (a stored checkpoint of RUN), or --delete removes a damaged "
        "ref. A ref that passes its check while the table passes its digest is exit "
        f"{EXIT_CONFLICT} (use the API's set_ref or reset_ref); a ref put back while the "
        "table is one ref short must be the one that vanished, else exit "
        f"{EXIT_INTEGRITY} naming it, nothing written (--force accepts it, recorded in "
        "the audit record); a ref that is absent while nothing vanished is exit "
        f"{EXIT_NOT_FOUND}. Each repair is one ref_repair audit record (--operator, "
        "--reason); the damaged ref's head and what the repaired table no longer "
        "reaches are kept as retained heads (cpstore retained). A RUN or BRANCH that "
        "starts with '-' goes after '--', the options before it (as verify prints the "
        f"command). {ID_HELP}",
        (*STORE_CODES, EXIT_CONFLICT),
    )
    p.add_argument("run", metavar="RUN", help="the run of the ref")
    p.add_argument("branch", metavar="BRANCH", help="the branch of the ref (main, a fork)")
    p.add_argument(
        "checkpoint", metavar="CHECKPOINT", nargs="?", help="the head to put the ref back at"
    )
    p.add_argument("--delete", action="store_true", help="delete the damaged ref instead")
    p.add_argument("--operator", required=True, help="who repairs (audited)")
    p.add_argument("--reason", required=True, help="why (audited)")
    p.add_argument(
        "--force",
        action="store_true",
        help="accept a put-back the check refuses (not the ref that vanished); recorded",
    )
    store_arg(p)
    json_arg(p)
    p.set_defaults(handler=_repair)
