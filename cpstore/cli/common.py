"""What every store command shares: the ``--store`` and ``--json`` options, opening, JSON output."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from cpstore.cli.exit_codes import (
    EXIT_BAD_INPUT,
    EXIT_FORMAT,
    EXIT_INTEGRITY,
    EXIT_NOT_FOUND,
    EXIT_UNAVAILABLE,
    exit_epilog,
)
from cpstore.errors import (
    InvalidInputError,
    NotFoundError,
    StoreError,
)
from cpstore.native.args import full_checkpoint_id, int_argument, is_hex
from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store
from cpstore.store.location import is_store_url, redact
from cpstore.store.reader import CheckpointView

__all__ = [
    "ID_HELP",
    "MAX_COUNT",
    "STORE_CODES",
    "STORE_EPILOG",
    "audit_key_arg",
    "audit_key_of",
    "checkpoint_or_file",
    "command",
    "human",
    "json_arg",
    "jsonable",
    "names_checkpoint",
    "nonnegative",
    "open_store_at",
    "positive",
    "print_json",
    "printable",
    "read_named",
    "refuse_keying",
    "retry_renamed",
    "say",
    "show",
    "stamp",
    "store_arg",
]


def store_arg(parser: argparse.ArgumentParser, whose: str = "the store's") -> None:
    parser.add_argument(
        "--store",
        metavar="PATH",
        default=os.environ.get("CPSTORE_PATH"),
        help="the store folder or postgresql:// URL (default: $CPSTORE_PATH)",
    )
    audit_key_arg(parser, whose)


#: Bytes an audit key may have (cpstore.store.audit_mac).
_KEY_SIZES = (16, 64)


def audit_key_arg(parser: argparse.ArgumentParser, whose: str = "the store's") -> None:
    parser.add_argument(
        "--audit-key-file",
        metavar="FILE",
        default=os.environ.get("CPSTORE_AUDIT_KEY_FILE") or None,
        help=f"a file holding {whose} audit key, 16 to 64 raw bytes, nothing else: a keyed "
        "log's MACs are checked and it can be appended to (default: "
        "$CPSTORE_AUDIT_KEY_FILE; docs/security.md)",
    )


#: ``open_store_at``'s default: read ``--audit-key-file`` when opening.
_READ_IT: Any = object()


def audit_key_of(args: argparse.Namespace) -> bytes | None:
    """The key in ``--audit-key-file``, or None when none was given. The file's bytes are
    the key (a trailing newline is part of it, so a wrong size is told at once)."""
    path = getattr(args, "audit_key_file", None)
    if not path:
        return None
    low, high = _KEY_SIZES
    with open(path, "rb") as f:  # OSError: the path's own exit code (entry.main)
        key = f.read(high + 1)
    if not low <= len(key) <= high:
        raise InvalidInputError(
            "the audit key file must hold the key itself: 16 to 64 raw bytes",
            where=path,
            expected=f"{low} to {high} bytes",
            got=f"{len(key)} bytes" if len(key) <= high else f"more than {high} bytes",
        )
    return key


def json_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")


@contextmanager
def open_store_at(
    args: argparse.Namespace, *, readonly: bool = True, audit_key: bytes | None = _READ_IT
) -> Iterator[Store]:
    """The store ``--store`` names; ``audit_key``: the key already read from
    ``--audit-key-file`` (default: read it now)."""
    path = args.store
    if not path:
        raise InvalidInputError("no store given", expected="--store PATH or $CPSTORE_PATH")
    if not is_store_url(path) and not os.path.exists(path):
        raise NotFoundError("no store at this path", where=path)
    # No command makes a store: a mistyped path must not become an empty one.
    key = audit_key_of(args) if audit_key is _READ_IT else audit_key
    if key is not None and not readonly:
        refuse_keying(path)
    with open_store(path, readonly=readonly, create=False, audit_key=key) as store:
        yield store


def refuse_keying(path: str, *, new_ok: bool = False) -> None:
    """StoreError unless the store's audit log is keyed already (``new_ok``: or there is
    no store at ``path`` yet, which push/pull create keyed). A writable open given a key
    keys an empty unkeyed log for good (the API's way to key a new store); from the
    command line that happened behind the operator's back — ``$CPSTORE_AUDIT_KEY_FILE``
    set for other stores, a ``gc`` or ``sign-off`` here, and every later writer without
    the key was refused its appends (audit37's doubt)."""
    try:
        with open_store(path, readonly=True, create=False) as store:
            keyed = store.audit_keyed
    except NotFoundError:
        if new_ok:
            return
        raise
    if not keyed:
        raise StoreError(
            "an audit key was given but this store's audit log is not keyed; the command "
            "line never keys an existing store's log (cpstore.open(..., audit_key=) does, "
            "on an empty log; push/pull key a store they create)",
            where=redact(path),
            expected="a keyed audit log, or no --audit-key-file / $CPSTORE_AUDIT_KEY_FILE",
            got="an unkeyed audit log",
        )


def print_json(value: Any) -> None:
    json.dump(value, sys.stdout, indent=2, sort_keys=True, default=jsonable)
    sys.stdout.write("\n")


def jsonable(value: Any) -> Any:
    """The JSON form of what ``json`` cannot encode; bytes stay told apart from text."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"bytes_hex": bytes(value).hex()}
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return repr(value)


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


#: Largest count or index the command line takes (fits every signed 64-bit key).
MAX_COUNT = 2**63 - 1
positive = int_argument(1, MAX_COUNT)
nonnegative = int_argument(0, MAX_COUNT)


#: Exit codes any command that opens a store can give (besides its own).
STORE_CODES = (EXIT_BAD_INPUT, EXIT_NOT_FOUND, EXIT_INTEGRITY, EXIT_UNAVAILABLE, EXIT_FORMAT)
STORE_EPILOG = exit_epilog(*STORE_CODES)


#: How every command that takes a checkpoint says what it accepts.
ID_HELP = (
    "A checkpoint is named by its 32-hex id, a unique prefix of at least 8 hex "
    "characters, RUN@BRANCH (the head) or RUN@BRANCH~N (N parents back)."
)


def command(
    sub: Any, name: str, summary: str, description: str, codes: tuple[int, ...]
) -> argparse.ArgumentParser:
    """A sub-command whose ``--help`` has a description and lists its exit codes."""
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help=summary, description=description, epilog=exit_epilog(*codes)
    )
    return parser


def show(value: Any) -> str:
    """A value in text output, as ``--json`` shows it (bytes as ``{"bytes_hex": ...}``)."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return json.dumps(value, default=jsonable, sort_keys=True, ensure_ascii=False)


def stamp(seconds: float | None) -> str:
    """A timestamp in text output: UTC, to the second, ISO 8601."""
    if seconds is None:
        return "-"
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def printable(text: str) -> str:
    """``text`` with each character that is not printable escaped (``\\n``, ``\\x1b``):
    what a store or a document holds (a run id, a source, a sign-off reason) is shown,
    never acted on by the terminal (audit68: a newline or an escape sequence forged a
    "verdict ACCEPT" line in ``cpstore validate``'s table of a REJECT, or erased the real
    one; ``cpstore audit`` printed a sign-off reason so)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def say(text: str) -> None:
    """Print one line of text output with what is not printable escaped
    (:func:`printable`): a run or branch name, a tag, a metadata key, a part name or a
    problem's place may hold a newline or an escape sequence, which forged a line of the
    listing (audit68 found it in ``validate`` and ``audit``; the other commands since)."""
    print(printable(text))


def names_checkpoint(arg: str) -> bool:
    """True when ``arg`` is not an existing file and reads as a checkpoint name (hex or @).

    Hex of any length counts, so ``Store.resolve`` says a prefix shorter than 8 is bad
    input (exit 3) instead of a missing file (exit 4), as ``inspect`` and ``sign-off`` do."""
    if full_checkpoint_id(arg) is not None:  # always an id, never a file (audit68)
        return True
    if os.path.exists(arg):
        return False
    return _reads_as_name(arg)


def _reads_as_name(arg: str) -> bool:
    # Hex as Store.resolve reads it, padded or not (review83: validate and diff took
    # " ID" for a file, "no such run document", where resolve and inspect took the id).
    bare = arg.strip()
    return "@" in arg or (bool(bare) and is_hex(bare))


def checkpoint_or_file(store: Store, arg: str) -> str | None:
    """The checkpoint id ``arg`` names in ``store``, or None when it is a file.

    As :func:`names_checkpoint`, except for a bare name (no directory part) that is both
    a file in the working directory and a name the store resolves (an id prefix,
    ``RUN@BRANCH``): that is :class:`InvalidInputError` (exit 3), not the file. Before,
    the file won silently, so what was validated or diffed depended on the working
    directory: the auditor's ``cpstore validate agent@main replay.json`` next to an
    exported ``agent@main`` validated the export, a decision about no checkpoint.
    ``./NAME`` (any directory part) is the file; the full id is the checkpoint."""
    if names_checkpoint(arg):
        resolved: str = store.resolve(arg)
        return resolved
    if not _reads_as_name(arg) or os.path.dirname(arg) or (os.altsep and os.altsep in arg):
        return None
    try:
        named: str = store.resolve(arg)
    except (InvalidInputError, NotFoundError):
        return None  # no checkpoint of that name (or too short to be one): the file
    raise InvalidInputError(
        f"{arg!r} is both a file here and a checkpoint name in the store: write "
        f"./{arg} for the file, or the checkpoint's full id",
        where=arg,
        expected="./NAME for a file, a full id for a checkpoint",
        got=named,
    )


#: How often a name is resolved again when what it named is gone by the read.
RENAMED_TRIES = 3


def retry_renamed(resolve: Callable[[], Any], attempt: Callable[[Any], Any]) -> Any:
    """``attempt(resolve())``; when it raises NotFoundError and ``resolve()`` now names
    something else (RUN@BRANCH moved and a gc pruned what it named, in other processes,
    between the two), try again with that, up to :data:`RENAMED_TRIES` times. A name that
    still names the same (an id, a checkpoint really gone) keeps its NotFoundError."""
    named = resolve()
    for tries in range(1, RENAMED_TRIES + 1):
        try:
            return attempt(named)
        except NotFoundError:
            again = resolve()
            if again == named or tries == RENAMED_TRIES:
                raise
            named = again
    raise AssertionError("unreachable")  # pragma: no cover


@contextmanager
def read_named(store: Store, name: str) -> Iterator[CheckpointView]:
    """``store.read`` of what ``name`` names when the read begins (:func:`retry_renamed`)."""
    with ExitStack() as stack:
        view: CheckpointView = retry_renamed(
            lambda: store.resolve(name), lambda cid: stack.enter_context(store.read(cid))
        )
        yield view
