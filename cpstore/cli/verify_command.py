"""``cpstore verify``: walk the store in a child process, so damage that kills liblmdb is reported.

The child opens the store and walks it, relaying progress and the report
over a pipe; a child killed by a signal is reported as damage (exit 5).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Callable
from typing import Any

from cpstore.cli.child import Send, can_fork_for, in_child
from cpstore.cli.common import (
    STORE_CODES,
    audit_key_of,
    command,
    json_arg,
    open_store_at,
    print_json,
    say,
    store_arg,
)
from cpstore.cli.exit_codes import (
    EXIT_INTEGRITY,
    EXIT_OK,
)
from cpstore.errors import (
    CpstoreError,
)
from cpstore.store.affected import checkpoints_reaching
from cpstore.store.location import is_store_url, redact
from cpstore.store.model import Problem, VerifyReport

__all__ = ["MACS_UNCHECKED", "add_verify_parser", "verify_report"]


def _progress_bar(label: str, width: int = 40) -> Callable[[int, int], None]:
    """A one-line progress bar on stderr, redrawn in place (terminals only)."""

    def draw(done: int, total: int) -> None:
        frac = done / total if total else 1.0
        filled = int(frac * width)
        sys.stderr.write(f"\r{label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
        sys.stderr.flush()

    return draw


def _verify_report(
    args: argparse.Namespace, progress: Callable[[int, int], None] | None
) -> VerifyReport:
    """Verify the store in a child process, so damage that kills liblmdb is reported
    (:mod:`cpstore.cli.child`: exit 5 naming the phase); sets ``args.affects`` and
    ``args.macs``."""
    key = audit_key_of(args)  # a bad key file is told here, with its own exit code
    if not can_fork_for(args.store):
        with open_store_at(args, audit_key=key) as store:
            report = store.verify(progress=progress)
            args.affects = _affects(store, report)
            args.macs = _macs_checked(store)
            args.vanished = _vanished(store, report)
            return report

    def walk(
        send: Send,
    ) -> tuple[VerifyReport, dict[str, list[Any]], bool | None, list[dict[str, str]]]:
        send("phase", "opening the store")
        with open_store_at(args, audit_key=key) as store:
            send("phase", "walking the store")
            report = store.verify(
                progress=(lambda done, total: send("progress", (done, total))) if progress else None
            )
            return report, _affects(store, report), _macs_checked(store), _vanished(store, report)

    def heard(kind: str, value: Any) -> None:
        if kind == "progress" and progress is not None:
            progress(*value)

    report, args.affects, args.macs, args.vanished = in_child(
        walk, store=args.store or "", doing="walking it", name="verify", heard=heard
    )
    return report


def verify_report(args: argparse.Namespace) -> VerifyReport:
    """The store's verify report, walked in a child process as ``cpstore verify`` walks it
    (``audit --check``); the store must not be open in this process. ``args.macs`` is
    then :func:`_macs_checked`'s answer."""
    args.affects, args.macs, args.vanished = {}, None, []
    return _verify_report(args, None)


def _macs_checked(store: Any) -> bool | None:
    """None for a log without MACs; else whether this walk checked them (it needs the key,
    which ``--audit-key-file`` gives: a keyed log's digest chain alone verifies a record
    a data-file writer forged, docs/security.md)."""
    return None if not store.audit_keyed else store.backend.audit_key is not None


#: What verify and audit --check say when a keyed log's MACs were not checked.
MACS_UNCHECKED = (
    "audit MACs NOT checked: the audit log is keyed and no key was given (its digest "
    "chain alone does not show a record forged in the data file; --audit-key-file or "
    "$CPSTORE_AUDIT_KEY_FILE checks them)"
)


#: Said under a refs problem: how the operator mends it (the command exists since
#: repair-ref; before, the only way was the API's ``repair_ref``).
REFS_MEND = (
    "a ref or the refs digest is damaged or a ref vanished: put the ref back at its true "
    "head, or replace or delete it, with cpstore repair-ref --store STORE --operator WHO "
    "--reason WHY [--delete] -- RUN BRANCH [CHECKPOINT] (docs/store.md, 'Repairing a "
    "damaged ref')"
)


def _about_refs(problem: Problem) -> bool:
    where = problem.where if isinstance(problem.where, str) else ""
    return where.startswith("refs/") or where == "meta/refs_digest"


def _damaged_object(problem: Problem) -> bytes | None:
    """The raw digest of the object a problem is about, when it is about one."""
    for text in (problem.where, problem.expected):
        if isinstance(text, str):
            head = text.removeprefix("objects/")[:32]
            if text.startswith("objects/") or text == head:
                try:
                    raw = bytes.fromhex(head)
                except ValueError:
                    continue
                if len(raw) == 16:
                    return raw
    return None


def _affects(store: Any, report: VerifyReport) -> dict[str, list[Any]]:
    """Damaged object (hex) -> the checkpoints reaching it (run, branch, step)."""
    digests = {d for d in map(_damaged_object, report.problems) if d is not None}
    if not digests:
        return {}
    try:
        return checkpoints_reaching(store.backend, digests)
    except CpstoreError:
        return {}  # the walk itself hit damage: the problems above still stand


def _vanished(store: Any, report: VerifyReport) -> list[dict[str, str]]:
    """The vanished refs the refs digest names, when a problem is about the digest."""
    if not any(p.where == "meta/refs_digest" for p in report.problems):
        return []
    try:
        found: list[dict[str, str]] = store.vanished_refs()
    except CpstoreError:
        return []  # the walk hit damage: the problems above still stand
    return found


def repair_command(args: argparse.Namespace, gone: dict[str, str]) -> str:
    """The ``cpstore repair-ref`` command that puts ``gone`` back, to run as printed in a
    POSIX shell: the store verify opened (absolute, a URL's password ``***``), the audit
    key file when one was given (``FILE`` when the log is keyed and none was), the options
    first and the names after ``--``, each quoted (:func:`shell_word`). review77: the store
    was left out, so the command failed or ran on ``$CPSTORE_PATH``'s store, a run named
    ``-x`` was read as an option, and a name with a newline became another name."""
    store = args.store or ""
    where = redact(store) if is_store_url(store) else os.path.abspath(store)
    parts = ["cpstore", "repair-ref", "--store", shlex.quote(where)]
    if args.audit_key_file:
        parts += ["--audit-key-file", shlex.quote(os.path.abspath(args.audit_key_file))]
    elif args.macs is False:
        parts += ["--audit-key-file", "FILE"]
    parts += ["--operator", "WHO", "--reason", "WHY", "--"]
    parts += [shell_word(gone[k]) for k in ("run", "branch", "head")]
    return " ".join(parts)


def shell_word(text: str) -> str:
    """``text`` quoted as one shell word that stays what it is once ``say`` prints it:
    ``shlex.quote`` when every character is printable, else ANSI-C quoting (``$'...'``,
    bash, zsh, ksh, POSIX.1-2024 sh), each character that is not printable as its UTF-8
    bytes in ``\\xHH`` (``say`` escapes a newline to the two characters ``\\n``, which a
    single-quoted word keeps as they are: another name)."""
    if text.isprintable():
        return shlex.quote(text)
    out = []
    for c in text:
        if c in "\\'":
            out.append("\\" + c)
        elif c.isprintable():
            out.append(c)
        else:
            out.append("".join(f"\\x{b:02x}" for b in c.encode("utf-8", "surrogatepass")))
    return "$'" + "".join(out) + "'"


def _verify(args: argparse.Namespace) -> int:
    args.affects, args.macs, args.vanished = {}, None, []
    bar = _progress_bar("verify") if sys.stderr.isatty() else None
    report = _verify_report(args, bar)
    if bar is not None:
        sys.stderr.write("\r\x1b[K")
    if args.json:
        print_json(
            {
                "ok": report.ok,
                "audit_macs_checked": args.macs,
                "counts": report.counts,
                "vanished_refs": args.vanished,
                "problems": [
                    {
                        "what": p.what,
                        "where": p.where,
                        "expected": p.expected,
                        "got": p.got,
                        "affects": [
                            {"checkpoint_id": c, "run_id": r, "branch": b, "step": s}
                            for c, r, b, s in _affected(args, p)
                        ],
                    }
                    for p in report.problems
                ],
            }
        )
    else:
        counts = ", ".join(f"{v} {k}" for k, v in sorted(report.counts.items()))
        say(f"checked {counts}")
        for p in report.problems:
            extra = "".join(
                f"; {label} {value!r}"
                for label, value in (("expected", p.expected), ("got", p.got))
                if value is not None
            )
            say(f"PROBLEM {p.where}: {p.what}{extra}")
            hit = _affected(args, p)
            if hit:
                say(f"  affects {len(hit)} checkpoint(s):")
                for c, r, b, s in hit:
                    say(f"    {c}  {r}@{b} step {s}")
        if any(_about_refs(p) for p in report.problems):
            say(REFS_MEND)
        for gone in args.vanished:
            say(
                f"vanished: {gone['run']}@{gone['branch']} at {gone['head']}: "
                f"{repair_command(args, gone)}"
            )
        if args.macs is False:
            say(MACS_UNCHECKED)
        verdict = "ok" if report.ok else f"{len(report.problems)} problem(s) found"
        say(verdict + (" (audit MACs NOT checked)" if args.macs is False else ""))
    return EXIT_OK if report.ok else EXIT_INTEGRITY


def _affected(args: argparse.Namespace, problem: Problem) -> list[Any]:
    digest = _damaged_object(problem)
    return [] if digest is None else list(args.affects.get(digest.hex(), []))


def add_verify_parser(sub: Any) -> None:
    """Add ``verify`` to the main parser."""
    p = command(
        sub,
        "verify",
        "re-hash every object, resolve every reference, check the audit chain",
        "Walk the whole store in a child process (damage that kills liblmdb is reported, "
        "exit 5): re-hash every object and manifest, resolve every reference, check the "
        "audit chain. Each damaged object is listed with the checkpoints that reach it.",
        STORE_CODES,
    )
    store_arg(p)
    json_arg(p)
    p.set_defaults(handler=_verify)
