"""Store-facing sub-commands: verify, inspect/show, diff, log, audit, sign-off, gc/prune, stats.

Each handler returns an exit code (see :mod:`cpstore.cli`); errors propagate as
:class:`~cpstore.CpstoreError` and the entry point turns them into one line.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import signal
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Any

from cpstore.cli.exit_codes import (
    EXIT_BAD_INPUT,
    EXIT_FORMAT,
    EXIT_INTEGRITY,
    EXIT_INTERNAL,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_UNAVAILABLE,
    exit_epilog,
)
from cpstore.decision.gates import sign_off
from cpstore.decision.validate import validate
from cpstore.errors import (
    CpstoreError,
    IntegrityError,
    InvalidInputError,
    NotFoundError,
    StoreError,
)
from cpstore.native.args import int_argument
from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store
from cpstore.store.lmdb_env import is_open_here
from cpstore.store.model import VerifyReport
from cpstore.store.stats import store_stats

__all__ = ["add_parsers"]


def _store_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        metavar="PATH",
        default=os.environ.get("CPSTORE_PATH"),
        help="the store folder (default: $CPSTORE_PATH)",
    )


def _json_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")


@contextmanager
def _open(args: argparse.Namespace, *, readonly: bool = True) -> Iterator[Store]:
    path = args.store
    if not path:
        raise InvalidInputError("no store given", expected="--store PATH or $CPSTORE_PATH")
    if not os.path.exists(path):
        raise NotFoundError("no store at this path", where=path)
    # No command makes a store: a mistyped path must not become an empty one.
    with open_store(path, readonly=readonly, create=False) as store:
        yield store


def _print_json(value: Any) -> None:
    json.dump(value, sys.stdout, indent=2, sort_keys=True, default=_jsonable)
    sys.stdout.write("\n")


def _jsonable(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return repr(value)


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


# -- verify ----------------------------------------------------------------------


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
    if not hasattr(os, "fork") or is_open_here(args.store or ""):
        with _open(args) as store:
            return store.verify(progress=progress)
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
                with _open(args) as store:
                    send("phase", "walking the store")
                    report = store.verify(
                        progress=(lambda done, total: send("progress", (done, total)))
                        if progress
                        else None
                    )
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


def _verify(args: argparse.Namespace) -> int:
    bar = _progress_bar("verify") if sys.stderr.isatty() else None
    report = _verify_report(args, bar)
    if bar is not None:
        sys.stderr.write("\r\x1b[K")
    if args.json:
        _print_json(
            {
                "ok": report.ok,
                "counts": report.counts,
                "problems": [
                    {"what": p.what, "where": p.where, "expected": p.expected, "got": p.got}
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
        print("ok" if report.ok else f"{len(report.problems)} problem(s) found")
    return EXIT_OK if report.ok else EXIT_INTEGRITY


# -- inspect / show ----------------------------------------------------------------


def _inspect(args: argparse.Namespace) -> int:
    with _open(args) as store, store.read(args.checkpoint) as cp:
        m = cp.manifest
        if args.part is not None:
            value = cp.state_part(args.part)
            if args.json:
                _print_json({"part": args.part, "value": value})
            else:
                print(repr(value))
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
            "id": m.id,
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
            info["first_tokens"] = [list(cp.token(i)) for i in range(limit)]
    if args.json:
        _print_json(info)
        return EXIT_OK
    print(f"checkpoint {m.id}")
    print(f"  run {m.run_id}  branch {m.branch}  step {m.step}  parent {m.parent or '-'}")
    print(f"  state {m.state_kind} {m.state_digest}")
    for name, digest in sorted(m.state_parts.items()):
        print(f"    part {name:<20} {digest}")
    print(f"  transcript {m.transcript_digest or '-'}")
    print(f"  tags {', '.join(m.provenance_tags) or '-'}")
    for name, log in logs.items():
        sealed = "" if "sealed" not in log else (" sealed" if log["sealed"] else " UNSEALED")
        print(f"  {name:<17} {log['count']:>10} records  {log['digest'] or '-'}{sealed}")
    for seq, kind, prov, value in info.get("first_tokens", []):
        print(f"    token {seq:>6} {kind:<8} {prov:<9} {value!r}")
    return EXIT_OK


# -- diff ------------------------------------------------------------------------------


def _diff(args: argparse.Namespace) -> int:
    def run() -> Any:
        return validate(args.a, args.b, store=store, record=False)

    if args.store:
        with _open(args) as store:
            decision = run()
    else:
        store = None
        decision = run()
    firsts = decision.divergences
    if args.json:
        _print_json({s: f.to_dict() for s, f in firsts.items()})
        return EXIT_OK
    if not firsts:
        print("no divergence: every stream is equal")
        return EXIT_OK
    for stream, f in firsts.items():
        where = f"{f.unit} {f.position}" if f.position is not None else "-"
        print(f"{stream:<14} {f.code.value:<22} at {where}")
        print(f"  expected {f.expected!r}")
        print(f"  observed {f.observed!r}")
    return EXIT_OK


# -- log -------------------------------------------------------------------------------


def _log(args: argparse.Namespace) -> int:
    with _open(args) as store:
        if args.run is None:
            runs = store.runs(limit=args.limit)
            out: Any = {run: store.branches(run) for run in runs}
            if args.json:
                _print_json(out)
            else:
                for run, branches in out.items():
                    print(f"{run}: {', '.join(f'{b} -> {c[:12]}' for b, c in branches.items())}")
            return EXIT_OK
        history = store.history(args.run, args.branch, limit=args.limit)
        if not history and store.ref(args.run, args.branch) is None:
            raise NotFoundError("no such run or branch", where=f"{args.run}/{args.branch}")
    if args.json:
        _print_json(
            [
                {
                    "id": m.id,
                    "step": m.step,
                    "parent": m.parent,
                    "created_at": m.created_at,
                    "tokens": m.token_count,
                    "sealed": m.ledger_sealed,
                    "tags": list(m.provenance_tags),
                }
                for m in history
            ]
        )
    else:
        for m in history:
            tags = f"  [{', '.join(m.provenance_tags)}]" if m.provenance_tags else ""
            print(f"{m.id}  step {m.step:>6}  tokens {m.token_count:>8}{tags}")
    return EXIT_OK


# -- audit -----------------------------------------------------------------------------


def _audit(args: argparse.Namespace) -> int:
    with _open(args) as store:
        records = list(store.audit_records(kind=args.kind, start=args.start, limit=args.limit))
        report = store.verify() if args.check else None
    chain_ok = (
        None
        if report is None
        else not any("audit" in p.where or "audit" in p.what for p in report.problems)
    )
    if args.json:
        _print_json(
            {
                "records": [
                    {
                        "index": r.index,
                        "digest": r.digest,
                        "prev": r.prev,
                        "kind": r.kind,
                        "time": r.time,
                        "body": r.body,
                    }
                    for r in records
                ],
                "chain_ok": chain_ok,
            }
        )
    else:
        for r in records:
            summary = r.body.get("verdict") or r.body.get("operator") or ""
            print(f"{r.index:>6}  {r.digest}  {r.kind:<10} {summary}")
        if chain_ok is not None:
            print("audit chain verifies" if chain_ok else "AUDIT CHAIN BROKEN")
    return EXIT_INTEGRITY if chain_ok is False else EXIT_OK


# -- sign-off --------------------------------------------------------------------------


def _sign_off(args: argparse.Namespace) -> int:
    with _open(args, readonly=False) as store:
        signed = sign_off(store, args.decision, operator=args.operator, reason=args.reason)
    if args.json:
        _print_json(
            {
                "sign_off": signed.audit_digest,
                "decision": signed.decision_id,
                "checkpoint": signed.checkpoint_id,
                "operator": signed.operator,
            }
        )
    else:
        print(f"signed off decision {signed.decision_id} as {signed.audit_digest}")
    return EXIT_OK


# -- gc / prune ------------------------------------------------------------------------


def _gc(args: argparse.Namespace) -> int:
    with _open(args, readonly=False) as store:
        before = store.disk_bytes()
        if args.delete_run is not None:
            removed = store.delete_run(args.delete_run)
        else:
            removed = store.prune(keep_last=args.keep_last, run_id=args.run)
        after = store.disk_bytes()
    if args.json:
        _print_json(
            {"checkpoints_removed": removed, "disk_bytes_before": before, "disk_bytes_after": after}
        )
    else:
        print(f"removed {removed} checkpoint(s); pages in use {_human(before)} -> {_human(after)}")
    return EXIT_OK


# -- stats -----------------------------------------------------------------------------


def _stats(args: argparse.Namespace) -> int:
    with _open(args) as store:
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
    }
    if args.json:
        _print_json(data)
    else:
        print(f"objects          {s.objects:>12}  {_human(s.object_bytes)}")
        print(f"checkpoints      {s.checkpoints:>12}")
        print(f"refs             {s.refs:>12}")
        print(f"audit records    {s.audit_records:>12}")
        print(f"referenced       {_human(s.referenced_bytes):>12}")
        print(f"dedupe ratio     {s.dedupe_ratio:>12.2f}x")
        print(f"disk (pages)     {_human(s.disk_bytes):>12}")
    return EXIT_OK


#: Largest count or index the command line takes (fits every signed 64-bit key).
_MAX_COUNT = 2**63 - 1
_positive = int_argument(1, _MAX_COUNT)
_nonnegative = int_argument(0, _MAX_COUNT)


#: Exit codes any command that opens a store can give (besides its own).
_STORE_CODES = (EXIT_BAD_INPUT, EXIT_NOT_FOUND, EXIT_INTEGRITY, EXIT_UNAVAILABLE, EXIT_FORMAT)
_STORE_EPILOG = exit_epilog(*_STORE_CODES)


def add_parsers(sub: Any) -> None:
    """Add the store sub-commands to the main parser."""
    p = sub.add_parser(
        "verify",
        help="re-hash every object, resolve every reference, check the audit chain",
        epilog=_STORE_EPILOG,
    )
    _store_arg(p)
    _json_arg(p)
    p.set_defaults(handler=_verify)

    for name in ("inspect", "show"):
        p = sub.add_parser(
            name,
            help="a checkpoint's manifest, its logs with counts and digests, a state part",
            epilog=_STORE_EPILOG,
        )
        p.add_argument("checkpoint", metavar="CHECKPOINT", help="checkpoint id (32 hex)")
        p.add_argument("--part", metavar="NAME", help="print this state part's value")
        p.add_argument(
            "--tokens",
            metavar="N",
            type=_nonnegative,
            default=0,
            help="also list the first N tokens",
        )
        _store_arg(p)
        _json_arg(p)
        p.set_defaults(handler=_inspect)

    p = sub.add_parser(
        "diff",
        help="first divergence per stream between two checkpoints or run documents",
        epilog=_STORE_EPILOG,
    )
    p.add_argument("a", metavar="A", help="run-document file or checkpoint id (expected)")
    p.add_argument("b", metavar="B", help="run-document file or checkpoint id (observed)")
    _store_arg(p)
    _json_arg(p)
    p.set_defaults(handler=_diff)

    p = sub.add_parser(
        "log", help="runs and branches, or a branch's history newest first", epilog=_STORE_EPILOG
    )
    p.add_argument("run", metavar="RUN", nargs="?", help="a run id (omit to list runs)")
    p.add_argument("--branch", default="main", help="branch of RUN (default: main)")
    p.add_argument("--limit", type=_positive, default=None, help="at most N entries")
    _store_arg(p)
    _json_arg(p)
    p.set_defaults(handler=_log)

    p = sub.add_parser(
        "audit",
        help="the hash-chained audit log, filterable, and its chain check",
        epilog=_STORE_EPILOG,
    )
    p.add_argument("--kind", help="only records of this kind (decision, signoff, gate, ...)")
    p.add_argument("--start", type=_nonnegative, default=0, help="first index")
    p.add_argument("--limit", type=_positive, default=None, help="at most N records")
    p.add_argument("--check", action="store_true", help="verify the store and the chain")
    _store_arg(p)
    _json_arg(p)
    p.set_defaults(handler=_audit)

    p = sub.add_parser(
        "sign-off",
        help="operator release of a releasable decision",
        epilog=exit_epilog(*_STORE_CODES, EXIT_REFUSED),
    )
    p.add_argument("decision", metavar="DECISION", help="decision id or its audit digest")
    p.add_argument("--operator", required=True, help="who signs off")
    p.add_argument("--reason", required=True, help="why")
    _store_arg(p)
    _json_arg(p)
    p.set_defaults(handler=_sign_off)

    for name in ("gc", "prune"):
        p = sub.add_parser(
            name,
            help="retention: keep the newest N per branch or delete a run; sweep",
            epilog=_STORE_EPILOG,
        )
        group = p.add_mutually_exclusive_group(required=True)
        group.add_argument(
            "--keep-last", type=_positive, help="keep each branch's newest N checkpoints"
        )
        group.add_argument("--delete-run", metavar="RUN", help="delete every ref of RUN")
        p.add_argument("--run", help="with --keep-last: only this run")
        _store_arg(p)
        _json_arg(p)
        p.set_defaults(handler=_gc)

    p = sub.add_parser("stats", help="object counts, bytes, dedupe ratio", epilog=_STORE_EPILOG)
    _store_arg(p)
    _json_arg(p)
    p.set_defaults(handler=_stats)
