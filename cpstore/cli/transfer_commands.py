"""``cpstore push`` / ``cpstore pull``: copy runs between two stores (any two backends).

``push DEST --store SRC`` copies what DEST lacks from SRC; ``pull SOURCE
--store DEST`` the other way round. Either side is a folder or a
``postgresql://`` URL; the receiving store is made when it does not exist.
The copy itself is :func:`cpstore.store.transfer.transfer`.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from cpstore.cli.child import reads_in_child
from cpstore.cli.common import (
    STORE_CODES,
    audit_key_of,
    command,
    human,
    json_arg,
    print_json,
    refuse_keying,
    say,
    store_arg,
)
from cpstore.cli.exit_codes import EXIT_CONFLICT, EXIT_OK
from cpstore.errors import InvalidInputError, NotFoundError, StoreError
from cpstore.native.args import check_text
from cpstore.store.backend import Backend
from cpstore.store.branches import branches
from cpstore.store.facade import open as open_store
from cpstore.store.location import is_store_url, redact, refuse_empty
from cpstore.store.store_identity import check_distinct, lmdb_file_of, same_store_error
from cpstore.store.transfer import TransferReport, transfer, vouch_refs

__all__ = ["add_transfer_parsers"]


def _check_source(path: str) -> None:
    """A missing source folder is NotFoundError (opening it must not make one)."""
    if not is_store_url(path) and not os.path.exists(path):
        raise NotFoundError("no store at this path", where=path)


def _refuse_same_store(src: Backend, dest: str) -> None:
    """Before the receiver is opened (writable: it may make a store id, upgrade a layout),
    SameStoreError when ``dest`` is the source store, however spelled: an LMDB folder
    whose data file is the source's (a relative path, a trailing slash, a symlink, a bind
    mount; opened, it was refused by the registry as "already open in this process with
    another mode", exit 7, naming no mistake), or a URL of the source's PostgreSQL store
    (asked of the servers through a read-only open of ``dest``). transfer() asks again;
    a ``dest`` with no store yet, or one only a writable open can use, is left to it."""
    if not is_store_url(dest):
        file_id = getattr(getattr(src, "env", None), "file_id", None)
        if file_id is not None and lmdb_file_of(dest) == file_id:
            raise same_store_error(src.path, dest, "one data file")
        return
    if not is_store_url(src.path):
        return  # a folder and a URL: two stores
    try:
        probe = open_store(dest, readonly=True, create=False)
    except (NotFoundError, StoreError):  # none there yet; a table to add; the server down
        return
    with probe:
        check_distinct(src, probe.backend)


def _run(args: argparse.Namespace, *, pushing: bool) -> int:
    if not args.store:
        raise InvalidInputError("no store given", expected="--store PATH or $CPSTORE_PATH")
    other = args.dest if pushing else args.source
    # An unset $DEST: "" was the working folder, where push made a store (audit58).
    refuse_empty(other, "destination" if pushing else "source")
    source, dest = (args.store, other) if pushing else (other, args.store)
    if args.run is not None:
        check_text(args.run, "--run")
    _check_source(source)
    with open_store(source, readonly=True, create=False) as src:
        _refuse_same_store(src.backend, dest)
        with src.backend.read_txn() as txn:
            # Before the receiver is opened (as for a mistyped run, below): a source whose
            # refs fail their checks is refused, and a run whose ref vanished is that, not
            # "no such run". transfer() asks again, with the refs it carries.
            vouch_refs(src.backend, txn, "source")
        if args.run is not None and not branches(src.backend, args.run):
            # Asked before the receiver is opened: a mistyped run must not leave a new,
            # empty store at a receiving path that had none.
            raise NotFoundError("no such run in the source store", where="refs", got=args.run)
        key = audit_key_of(args)
        if key is not None:  # a receiver this transfer creates is keyed; an existing one never
            refuse_keying(dest, new_ok=True)
        with open_store(dest, audit_key=key) as dst:
            report = transfer(src.backend, dst.backend, run_id=args.run)
    _show(report, source, dest, args.json)
    return EXIT_OK


def _show(report: TransferReport, source: str, dest: str, as_json: bool) -> None:
    if as_json:
        print_json({"source": redact(source), "dest": redact(dest), **report.as_dict()})
        return
    rate = report.objects / report.seconds if report.seconds else 0.0
    say(
        f"{redact(source)} -> {redact(dest)}: {report.checkpoints} checkpoint(s), "
        f"{report.objects} object(s) ({human(report.object_bytes)}), refs "
        f"{report.refs_created} created / {report.refs_moved} moved / "
        f"{report.refs_unchanged} unchanged in {report.seconds:.2f} s ({rate:.0f} objects/s)"
        + (f"; {report.decisions} decision(s) carried" if report.decisions else "")
    )


def _push(args: argparse.Namespace) -> int:
    return _run(args, pushing=True)


def _pull(args: argparse.Namespace) -> int:
    return _run(args, pushing=False)


_WHAT = (
    "Copy from {src} to {dst} what the receiver lacks: objects by digest in batches, each "
    "hashed again at the receiver, then per branch its checkpoints and its ref by "
    "compare-and-set in one transaction. Either store is a folder or a postgresql:// URL; "
    "both one store, however spelled (another path to the folder, the URL written another "
    "way), is refused (exit 3) before anything is written. "
    "Running it again copies nothing; a killed copy leaves no ref naming a missing object "
    "and is resumed by running it again. A receiving branch that went elsewhere is left "
    "alone and named (exit 8); the other branches still land. A checkpoint whose standing "
    "decision in the sender is not ACCEPT lands with that decision appended to the "
    "receiver's audit log (its gates refuse what the sender's do; sign-offs are not "
    "carried); a receiver with a keyed audit log is refused (exit 7) before anything is "
    "copied when a decision is to be carried, unless --audit-key-file gives its key. "
    "Either store's refs failing their checks (a ref deleted, changed or added behind "
    "cpstore's back: verify names it, repair_ref mends it) is refused (exit 5) before "
    "anything is copied."
)


def add_transfer_parsers(sub: Any) -> None:
    """Add push and pull to the main parser."""
    codes = (*STORE_CODES, EXIT_CONFLICT)
    p = command(
        sub,
        "push",
        "copy the runs of --store that DEST lacks (objects, checkpoints, then refs)",
        _WHAT.format(src="--store", dst="DEST (made when missing)"),
        codes,
    )
    p.add_argument("dest", metavar="DEST", help="the receiving store: a folder or URL")
    p.add_argument("--run", help="only this run (default: every run)")
    store_arg(p, "the receiving store's (DEST)")
    json_arg(p)
    p.set_defaults(handler=reads_in_child(_push, doing="reading the source", beside="dest"))

    p = command(
        sub,
        "pull",
        "copy the runs of SOURCE that --store lacks (objects, checkpoints, then refs)",
        _WHAT.format(src="SOURCE", dst="--store (made when missing)"),
        codes,
    )
    p.add_argument("source", metavar="SOURCE", help="the sending store: a folder or URL")
    p.add_argument("--run", help="only this run (default: every run)")
    store_arg(p, "the receiving store's (--store)")
    json_arg(p)
    p.set_defaults(
        handler=reads_in_child(_pull, doing="reading the source", store="source", beside="store")
    )
