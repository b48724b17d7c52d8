"""``cpstore verify``: walk the store in a child process, so damage that kills liblmdb is reported.

The child opens the store and walks it, relaying progress and the report
over a pipe; a child killed by a signal is reported as damage (exit 5).
"""

from __future__ import annotations

import argparse
import os
import pickle
import signal
import sys
import tempfile
import traceback
from collections.abc import Callable
from typing import IO, Any

from cpstore.cli.common import (
    STORE_CODES,
    audit_key_of,
    command,
    json_arg,
    open_store_at,
    print_json,
    store_arg,
)
from cpstore.cli.exit_codes import (
    EXIT_INTEGRITY,
    EXIT_INTERNAL,
    EXIT_OK,
)
from cpstore.errors import (
    CpstoreError,
    IntegrityError,
    StoreError,
)
from cpstore.store.affected import checkpoints_reaching
from cpstore.store.lmdb_registry import is_open_here
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


#: Signals by which liblmdb dies on a damaged page (assertions, wild pointers).
_DAMAGE_SIGNALS = frozenset(
    getattr(signal, name) for name in ("SIGABRT", "SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL")
)


def _verify_report(
    args: argparse.Namespace, progress: Callable[[int, int], None] | None
) -> VerifyReport:
    """Verify the store in a child process, so damage that kills liblmdb is reported.

    LMDB 0.9 has no page checksums: walking some damaged B-tree pages makes
    it abort (an assertion) or fault, which no Python code can catch. The
    walk runs in a forked child (nothing is open yet in this process); a
    child killed by such a signal means damaged pages, reported as an
    :class:`IntegrityError` (exit 5). Where fork() is missing, or this
    process already has the store open, the walk runs here and is not
    protected.
    """
    audit_key_of(args)  # a bad key file is told here, with its own exit code
    if not hasattr(os, "fork") or is_open_here(args.store or ""):
        with open_store_at(args) as store:
            report = store.verify(progress=progress)
            args.affects = _affects(store, report)
            args.macs = _macs_checked(store)
            return report
    sys.stdout.flush()
    sys.stderr.flush()
    with tempfile.TemporaryFile() as err:
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child, which never returns
            os.close(read_end)
            _verify_child(args, write_end, err.fileno(), progress is not None)
        os.close(write_end)
        try:
            return _verify_parent(args, pid, read_end, err, progress)
        finally:
            os.close(read_end)


def verify_report(args: argparse.Namespace) -> VerifyReport:
    """The store's verify report, walked in a child process as ``cpstore verify`` walks it
    (``audit --check``); the store must not be open in this process. ``args.macs`` is
    then :func:`_macs_checked`'s answer."""
    args.affects, args.macs = {}, None
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


def _verify_child(args: argparse.Namespace, out_fd: int, err_fd: int, progress: bool) -> None:
    """The child half of :func:`_verify_report`: every result goes down ``out_fd``."""
    code = 0
    try:
        os.dup2(err_fd, 2)  # liblmdb's assertion text, for the parent's one line
        with os.fdopen(out_fd, "wb") as out:

            def send(kind: str, value: Any) -> None:
                pickle.dump((kind, value), out)
                out.flush()

            try:
                send("phase", "opening the store")
                with open_store_at(args) as store:
                    send("phase", "walking the store")
                    report = store.verify(
                        progress=(lambda done, total: send("progress", (done, total)))
                        if progress
                        else None
                    )
                    affects = _affects(store, report)
                    macs = _macs_checked(store)
                send("affects", affects)
                send("macs", macs)
                send("report", report)
            except CpstoreError as exc:
                send("error", exc)
    except BaseException:
        traceback.print_exc()
        code = EXIT_INTERNAL
    finally:
        os._exit(code)


def _verify_parent(
    args: argparse.Namespace,
    pid: int,
    read_end: int,
    err: IO[bytes],
    progress: Callable[[int, int], None] | None,
) -> VerifyReport:
    """The parent half of :func:`_verify_report`: relay progress, then the result."""
    phase, done, total = "starting", 0, 0
    result: VerifyReport | CpstoreError | None = None
    status = None
    try:
        with os.fdopen(os.dup(read_end), "rb") as inp:
            while True:
                try:
                    kind, value = pickle.load(inp)
                except Exception:  # the end, or a frame cut short by the child's death
                    break
                if kind == "phase":
                    phase = value
                elif kind == "progress":
                    done, total = value
                    if progress is not None:
                        progress(done, total)
                elif kind == "affects":
                    args.affects = value
                elif kind == "macs":
                    args.macs = value
                else:
                    result = value
        _, status = os.waitpid(pid, 0)
    finally:
        if status is None:  # interrupted: the child must not outlive the command
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    if isinstance(result, CpstoreError):
        raise result
    if isinstance(result, VerifyReport):
        return result
    err.seek(0)
    lines = err.read().decode("utf-8", "replace").strip().splitlines()
    where = f"{args.store} ({phase}" + (f", after {done} of {total} entries)" if total else ")")
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) in _DAMAGE_SIGNALS:
        raise IntegrityError(
            "the data file is damaged: liblmdb died with "
            f"{signal.Signals(os.WTERMSIG(status)).name} walking it",
            where=where,
            got=lines[-1] if lines else None,
        )
    raise StoreError(
        "the verify process ended without a result",
        where=where,
        got=lines[-1] if lines else f"wait status {status}",
    )


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


def _verify(args: argparse.Namespace) -> int:
    args.affects, args.macs = {}, None
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
        print(f"checked {counts}")
        for p in report.problems:
            extra = "".join(
                f"; {label} {value!r}"
                for label, value in (("expected", p.expected), ("got", p.got))
                if value is not None
            )
            print(f"PROBLEM {p.where}: {p.what}{extra}")
            hit = _affected(args, p)
            if hit:
                print(f"  affects {len(hit)} checkpoint(s):")
                for c, r, b, s in hit:
                    print(f"    {c}  {r}@{b} step {s}")
        if args.macs is False:
            print(MACS_UNCHECKED)
        verdict = "ok" if report.ok else f"{len(report.problems)} problem(s) found"
        print(verdict + (" (audit MACs NOT checked)" if args.macs is False else ""))
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
