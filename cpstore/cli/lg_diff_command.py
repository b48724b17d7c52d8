"""``cpstore lg-diff``: where two LangGraph threads (or a thread and its fork) diverge.

A separate command from ``cpstore diff`` (which compares two cpstore
checkpoints or run documents): it reads threads the LangGraph saver wrote and
needs the ``langgraph`` extra, imported only when the command runs.
"""

from __future__ import annotations

import argparse
from typing import Any

from cpstore.cli.common import (
    STORE_CODES,
    command,
    json_arg,
    open_store_at,
    print_json,
    say,
    store_arg,
)
from cpstore.cli.exit_codes import EXIT_DIFFERENT, EXIT_OK, EXIT_QUARANTINE
from cpstore.errors import InvalidInputError

__all__ = ["add_lg_diff_parser"]


def add_lg_diff_parser(sub: Any) -> None:
    """Add ``lg-diff`` to the main parser."""
    p = command(
        sub,
        "lg-diff",
        "first step, node and channel where two LangGraph threads diverge",
        "Compare two LangGraph threads written by CpstoreSaver (or a thread and its fork) "
        "by content digest, and name the first step, the node(s) and the channel(s) where "
        "they diverge, and their shared fork point. Exit 12 when they diverge, 0 when "
        "they do not (as cpstore diff), 11 when it cannot tell (values sealed by a serde "
        "the command cannot decode, subgraphs it cannot pair: not the same).",
        (EXIT_DIFFERENT, EXIT_QUARANTINE, *STORE_CODES),
    )
    p.add_argument("thread_a", metavar="THREAD_A", help="a LangGraph thread id")
    p.add_argument("thread_b", metavar="THREAD_B", help="another (or the same) thread id")
    p.add_argument("--ns", default="", help="checkpoint namespace of both (default: root)")
    p.add_argument("--checkpoint-a", metavar="ID", help="compare up to this checkpoint of A")
    p.add_argument("--checkpoint-b", metavar="ID", help="compare up to this checkpoint of B")
    store_arg(p)
    json_arg(p)
    p.set_defaults(handler=_lg_diff)


def _config(thread: str, ns: str, checkpoint: str | None) -> dict[str, Any]:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
    if checkpoint:
        conf["checkpoint_id"] = checkpoint
    return {"configurable": conf}


def _lg_diff(args: argparse.Namespace) -> int:
    try:
        from cpstore.langgraph.diff import diff_threads  # noqa: PLC0415 - the optional extra
    except ImportError:
        raise InvalidInputError(
            "lg-diff needs the langgraph extra", expected="pip install cpstore[langgraph]"
        ) from None
    with open_store_at(args) as store:
        found = diff_threads(
            store,
            _config(args.thread_a, args.ns, args.checkpoint_a),
            _config(args.thread_b, args.ns, args.checkpoint_b),
        )
    if args.json:
        print_json(found.as_dict())
    else:
        say(found.summary)
        for side, checkpoint in (("A", found.checkpoint_a), ("B", found.checkpoint_b)):
            if not found.same and checkpoint is not None:
                say(f"  {side}: {checkpoint}")
    if found.same:
        return EXIT_OK
    # Undecided is not the same, but not a proven divergence either: the exit code a
    # validation gives when equivalence cannot be proven (QUARANTINE).
    return EXIT_QUARANTINE if found.undecidable else EXIT_DIFFERENT
