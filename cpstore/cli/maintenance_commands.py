"""``cpstore gc``/``prune`` and ``stats``: retention and what the store holds.

Each handler returns an exit code (see :mod:`cpstore.cli`); errors propagate as
:class:`~cpstore.CpstoreError` and the entry point turns them into one line.
"""

from __future__ import annotations

import argparse
from typing import Any

from cpstore.cli.common import (
    STORE_EPILOG,
    human,
    json_arg,
    open_store_at,
    positive,
    print_json,
    store_arg,
)
from cpstore.cli.exit_codes import (
    EXIT_OK,
)
from cpstore.store.stats import store_stats

__all__ = ["add_maintenance_parsers"]


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
        "logical_bytes": s.logical_bytes,
        "unique_bytes": s.unique_bytes,
        "stored_bytes": s.stored_bytes,
        "compression_ratio": round(s.compression_ratio, 3),
    }
    if args.json:
        print_json(data)
    else:
        print(f"objects          {s.objects:>12}  {human(s.object_bytes)}")
        print(f"checkpoints      {s.checkpoints:>12}")
        print(f"refs             {s.refs:>12}")
        print(f"audit records    {s.audit_records:>12}")
        print(f"logical          {human(s.logical_bytes):>12}")
        print(f"unique           {human(s.unique_bytes):>12}")
        print(f"stored           {human(s.stored_bytes):>12}")
        print(f"dedupe ratio     {s.dedupe_ratio:>12.2f}x")
        print(f"compression      {s.compression_ratio:>12.2f}x")
        print(f"disk (pages)     {human(s.disk_bytes):>12}")
    return EXIT_OK


def add_maintenance_parsers(sub: Any) -> None:
    """Add gc/prune and stats to the main parser."""
    for name in ("gc", "prune"):
        p = sub.add_parser(
            name,
            help="retention: keep the newest N per branch or delete a run; sweep",
            epilog=STORE_EPILOG,
        )
        group = p.add_mutually_exclusive_group(required=True)
        group.add_argument(
            "--keep-last", type=positive, help="keep each branch's newest N checkpoints"
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
