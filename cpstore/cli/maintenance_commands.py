"""``cpstore gc``/``prune``, ``compact``, ``copy`` and ``stats``: retention, space, backups.

Each handler returns an exit code (see :mod:`cpstore.cli`); errors propagate as
:class:`~cpstore.CpstoreError` and the entry point turns them into one line.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from typing import Any

from cpstore.cli.child import Send, can_fork_for, in_child, reads_in_child
from cpstore.cli.common import (
    STORE_CODES,
    audit_key_of,
    command,
    human,
    json_arg,
    open_store_at,
    positive,
    print_json,
    say,
    store_arg,
)
from cpstore.cli.exit_codes import (
    EXIT_OK,
)
from cpstore.errors import InvalidInputError, NotFoundError, StoreError
from cpstore.store.location import is_store_url, refuse_empty
from cpstore.store.maintenance import compact_store, copy_store
from cpstore.store.model import PG_STORE_VERSION, STORE_VERSION, VerifyReport
from cpstore.store.stats import store_stats

__all__ = ["add_maintenance_parsers"]


# -- gc / prune ------------------------------------------------------------------------


def _refuse_a_dry_run_that_upgrades(args: argparse.Namespace) -> None:
    """A dry run's sweep runs in a write txn it aborts, so it opens the store writable,
    and a writable open upgrades an older layout for good (an older release then refuses
    the store): look read-only first and refuse, before anything is written."""
    with open_store_at(args) as store:
        layout = store.backend.layout
    target = PG_STORE_VERSION if is_store_url(args.store) else STORE_VERSION
    if layout < target:
        raise StoreError(
            "a dry run cannot run on a store of an older layout: it would upgrade the "
            "layout (nothing changed; gc without --dry-run, or any writable open, upgrades it)",
            where=args.store,
            expected=f"layout {target}",
            got=f"layout {layout}",
        )


def _gc(args: argparse.Namespace) -> int:
    if args.dry_run:
        _refuse_a_dry_run_that_upgrades(args)
    # A dry run runs the sweep in a write txn and aborts it: the same code says what goes.
    with open_store_at(args, readonly=False) as store:
        before = store.space()
        report = store.gc(
            keep_last=args.keep_last,
            run_id=args.run,
            delete_run=args.delete_run,
            dry_run=args.dry_run,
        )
        after = store.space()
    if args.json:
        print_json(
            {
                "dry_run": report.dry_run,
                "checkpoints_removed": len(report.checkpoints),
                "checkpoint_ids": list(report.checkpoints),
                "decided_checkpoint_ids": list(report.decided),
                "objects_removed": report.objects_removed,
                "bytes_removed": report.bytes_removed,
                "file_bytes_before": before.file_bytes,
                "file_bytes_after": after.file_bytes,
                "reusable_bytes_before": before.reusable_bytes,
                "reusable_bytes_after": after.reusable_bytes,
            }
        )
        return EXIT_OK
    verb = "would remove" if report.dry_run else "removed"
    say(
        f"{verb} {len(report.checkpoints)} checkpoint(s) and {report.objects_removed} "
        f"object(s), {human(report.bytes_removed)} of data"
    )
    for cid in report.decided:
        say(f"  {cid} is named by a decision, sign-off or gate in the audit log")
    if report.decided and not report.dry_run:
        say("  (recorded as a gc audit record)")
    if report.dry_run:
        say("dry run: nothing changed")
        return EXIT_OK
    if is_store_url(args.store):
        # compact refuses a URL: the server gives the space back, not cpstore (audit58).
        say(
            f"tables {human(before.file_bytes)} -> {human(after.file_bytes)} on the server "
            "(PostgreSQL reuses deleted rows' space after (auto)vacuum; VACUUM FULL of the "
            "schema's tables gives it back to the disk)"
        )
        return EXIT_OK
    freed = after.reusable_bytes - before.reusable_bytes
    say(
        f"data file {human(before.file_bytes)} -> {human(after.file_bytes)} (LMDB reuses "
        "freed pages for later writes and never shrinks the file); reusable inside it "
        f"{human(before.reusable_bytes)} -> {human(after.reusable_bytes)} "
        f"({'+' if freed >= 0 else '-'}{human(abs(freed))}); cpstore compact shrinks the file"
    )
    return EXIT_OK


# -- compact / copy --------------------------------------------------------------------


def _compact(args: argparse.Namespace) -> int:
    if not args.store:
        raise InvalidInputError("no store given", expected="--store PATH or $CPSTORE_PATH")
    if not is_store_url(args.store) and not os.path.exists(args.store):
        raise NotFoundError("no store at this path", where=args.store)
    path = args.store
    key = audit_key_of(args)  # a bad key file is told here, with its own exit code
    # In a child when it can (cpstore.cli.child): a page that kills liblmdb while the
    # store is verified or copied is exit 5 in one line, and nothing is swapped.
    report = (
        in_child(
            lambda _send: compact_store(path, audit_key=key),
            store=path,
            doing="compacting it",
            name="compact",
        )
        if can_fork_for(path)
        else compact_store(path, audit_key=key)
    )
    if args.json:
        print_json(
            {
                "bytes_before": report.bytes_before,
                "bytes_after": report.bytes_after,
                "verified_counts": report.counts,
            }
        )
    else:
        say(
            f"data file {human(report.bytes_before)} -> {human(report.bytes_after)}; "
            f"the rewritten file verified ({_counts(report.counts)})"
        )
    return EXIT_OK


def _copy(args: argparse.Namespace) -> int:
    key = audit_key_of(args)  # a bad key file is told here, with its own exit code

    def copy(_send: Send | None = None) -> VerifyReport:
        with open_store_at(args, audit_key=key) as store:
            return copy_store(store, args.dest, compact=not args.no_compact)

    dest = args.dest
    # Before anything: the clean-up below joins names to DEST, and "" joined is the
    # working folder (a failed copy removed its store's data file; audit58).
    refuse_empty(dest, "copy's destination", "a new or empty folder")
    fresh = not os.path.lexists(dest)
    try:
        emptied = fresh or (os.path.isdir(dest) and not os.listdir(dest))
    except OSError:  # unreadable: the copy refuses it, and nothing is removed
        emptied = False
    try:
        report = (
            in_child(copy, store=args.store or "", doing="copying it", name="copy")
            if can_fork_for(args.store)
            else copy()
        )
    except InvalidInputError:
        # A refusal (DEST no longer empty, the store itself, a URL) comes before the copy
        # writes anything: what is in DEST now is another's (a store another process made
        # there after the look above lost its data file to the clean-up; audit58).
        raise
    except BaseException:
        if emptied:  # DEST was new or empty: what is in it now is this copy's
            _remove_copy(dest, fresh=fresh)
        raise
    size = os.path.getsize(os.path.join(args.dest, "data.mdb"))
    if args.json:
        print_json({"dest": args.dest, "file_bytes": size, "verified_counts": report.counts})
    else:
        say(f"copied to {args.dest} ({human(size)}); the copy verified ({_counts(report.counts)})")
    return EXIT_OK


def _remove_copy(dest: str, *, fresh: bool) -> None:
    """Remove what a failed copy left in ``dest`` (a child killed while writing or
    verifying it left a whole or half-written data file there: no error of its own
    removed it); ``dest`` itself too when the copy made it."""
    for name in ("data.mdb", "lock.mdb"):
        with contextlib.suppress(OSError):  # the command's own error is what is told
            os.unlink(os.path.join(dest, name))
    if fresh:
        with contextlib.suppress(OSError):  # gone already, or not empty: not ours
            os.rmdir(dest)


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))


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
        "reusable_bytes": s.reusable_bytes,
        "unreferenced_bytes": s.unreferenced_bytes,
        "dedupe_ratio": round(s.dedupe_ratio, 3),
        "logical_bytes": s.logical_bytes,
        "unique_bytes": s.unique_bytes,
        "stored_bytes": s.stored_bytes,
        "compression_ratio": round(s.compression_ratio, 3),
    }
    if args.json:
        print_json(data)
    else:
        say(f"objects          {s.objects:>12}  {human(s.object_bytes)}")
        say(f"checkpoints      {s.checkpoints:>12}")
        say(f"refs             {s.refs:>12}")
        say(f"audit records    {s.audit_records:>12}")
        say(f"logical          {human(s.logical_bytes):>12}")
        say(f"unique           {human(s.unique_bytes):>12}")
        say(f"stored           {human(s.stored_bytes):>12}")
        say(f"dedupe ratio     {s.dedupe_ratio:>12.2f}x")
        say(f"compression      {s.compression_ratio:>12.2f}x")
        say(f"unreferenced     {human(s.unreferenced_bytes):>12}  (pinned objects, ledgers)")
        if is_store_url(args.store):  # compact refuses a URL (audit58)
            say(f"tables           {human(s.disk_bytes):>12}  (on the server)")
            say(f"reusable         {'-':>12}  (the server's: reused after (auto)vacuum)")
        else:
            say(f"data file        {human(s.disk_bytes):>12}")
            say(f"reusable         {human(s.reusable_bytes):>12}  (freed by gc; compact shrinks)")
    return EXIT_OK


def add_maintenance_parsers(sub: Any) -> None:
    """Add gc/prune, compact, copy and stats to the main parser."""
    for name in ("gc", "prune"):
        p = command(
            sub,
            name,
            "retention: keep the newest N per branch or delete a run; sweep",
            "Remove checkpoints retention does not keep (each branch's newest --keep-last, "
            "or every checkpoint of --delete-run) and the objects only they named. The "
            "report lists what went, and every removed checkpoint the audit log names "
            "(also recorded as a gc audit record). The data file does not shrink: LMDB "
            "reuses freed pages for later writes; cpstore compact gives them back. "
            "--dry-run reports without changing anything (refused, exit 7, on a store of "
            "an older layout: its writable open would upgrade it). A run with no refs is "
            "exit 4.",
            STORE_CODES,
        )
        group = p.add_mutually_exclusive_group(required=True)
        group.add_argument(
            "--keep-last", type=positive, help="keep each branch's newest N checkpoints"
        )
        group.add_argument("--delete-run", metavar="RUN", help="delete every ref of RUN")
        p.add_argument("--run", help="with --keep-last: only this run (not with --delete-run)")
        p.add_argument(
            "--dry-run", action="store_true", help="report what would be removed; change nothing"
        )
        store_arg(p)
        json_arg(p)
        p.set_defaults(handler=_gc)

    p = command(
        sub,
        "compact",
        "rewrite the data file compactly (verified), so the disk shrinks after gc",
        "Copy the store's live pages into a new data file (LMDB's compacting copy), "
        "verify it fully with the same counts as the store, then swap it in. The store "
        "must be closed in every process: refused (exit 7) while one has it open.",
        STORE_CODES,
    )
    store_arg(p)
    json_arg(p)
    p.set_defaults(handler=_compact)

    p = command(
        sub,
        "copy",
        "a verified hot copy (backup) of the store into a new folder",
        "Write one consistent snapshot of the store into DEST (a new or empty folder) "
        "while writers keep going, compacted unless --no-compact, then verify the copy "
        "fully; a copy that fails is removed (exit 5). DEST is a store: open it as one.",
        STORE_CODES,
    )
    p.add_argument("dest", metavar="DEST", help="a new or empty folder")
    p.add_argument("--no-compact", action="store_true", help="copy free pages too")
    store_arg(p)
    json_arg(p)
    p.set_defaults(handler=_copy)

    p = command(
        sub,
        "stats",
        "object counts, bytes, dedupe ratio, file size and reusable space",
        "Count objects, checkpoints, refs and audit records; bytes stored once versus "
        "bytes the checkpoints reach (the dedupe ratio); the data file's size and the "
        "space inside it gc freed for reuse.",
        STORE_CODES,
    )
    store_arg(p)
    json_arg(p)
    p.set_defaults(handler=reads_in_child(_stats, doing="counting it"))
