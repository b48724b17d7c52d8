"""``cpstore cat``: print what a checkpoint recorded, as ``git cat-file`` prints an object.

``cat CHECKPOINT observation STEP SOURCE`` and ``cat CHECKPOINT effect SEQ``
write the payload's bytes to stdout unchanged (pipe them to a file or ``jq``);
``cat CHECKPOINT transcript`` the transcript; ``cat CHECKPOINT tokens`` one line
per token (``--start``/``--count`` select a range; ``--json`` gives a list, and
``{"bytes_hex": ...}`` for a payload or the transcript).
Every read is hash-checked.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from cpstore.cli.common import (
    ID_HELP,
    STORE_CODES,
    command,
    nonnegative,
    open_store_at,
    positive,
    print_json,
    printable,
    read_named,
    show,
    store_arg,
)
from cpstore.cli.exit_codes import EXIT_OK
from cpstore.errors import InvalidInputError, NotFoundError

__all__ = ["add_cat_parser"]

_WHAT = ("observation", "effect", "tokens", "transcript")


def _misplaced(args: argparse.Namespace) -> None:
    """An option that does not go with ``what`` is bad input: it was silently ignored."""
    given = {
        "--occurrence": args.occurrence is not None and args.what != "observation",
        "--start": args.start is not None and args.what != "tokens",
        "--count": args.count is not None and args.what != "tokens",
    }
    wrong = [name for name, bad in given.items() if bad]
    if wrong:
        raise InvalidInputError(
            f"{', '.join(wrong)} does not go with cat {args.what}",
            expected="--occurrence with observation; --start, --count with tokens",
            got=wrong,
        )


def _cat(args: argparse.Namespace) -> int:
    _misplaced(args)
    with open_store_at(args) as store, read_named(store, args.checkpoint) as cp:
        what, rest = args.what, list(args.args)
        if what == "tokens":
            _no_more(rest, what)
            count = cp.token_count()
            start = min(args.start or 0, count)
            end = count if args.count is None else min(count, start + args.count)
            rows = [cp.token(i) for i in range(start, end)]
            if args.json:
                print_json(
                    [{"seq": s, "kind": k, "provenance": p, "value": v} for s, k, p, v in rows]
                )
            else:
                for s, k, p, v in rows:
                    print("\t".join(printable(str(x)) for x in (s, k, p, show(v))))
            return EXIT_OK
        data: bytes
        if what == "observation":
            if len(rest) != 2:
                raise InvalidInputError(
                    "cat CHECKPOINT observation needs STEP and SOURCE", got=rest
                )
            data = cp.payload(_int(rest[0], "STEP"), rest[1], occurrence=args.occurrence or 0)
        elif what == "effect":
            if len(rest) != 1:
                raise InvalidInputError("cat CHECKPOINT effect needs SEQ", got=rest)
            data = cp.effect_payload(_int(rest[0], "SEQ"))
        else:
            _no_more(rest, what)
            transcript = cp.transcript()
            if transcript is None:
                raise NotFoundError("the checkpoint recorded no transcript", where=cp.id)
            data = transcript
    if args.json:  # JSON asked for: bytes as {"bytes_hex": ...}, never raw (README)
        print_json(data)
        return EXIT_OK
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
    return EXIT_OK


def _int(text: str, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise InvalidInputError(f"{what} must be an integer", got=text) from None
    if value < 0:
        raise InvalidInputError(f"{what} must be >= 0", got=value)
    return value


def _no_more(rest: list[str], what: str) -> None:
    if rest:
        raise InvalidInputError(f"cat CHECKPOINT {what} takes no more arguments", got=rest)


def add_cat_parser(sub: Any) -> None:
    """Add ``cat`` to the main parser."""
    p = command(
        sub,
        "cat",
        "print an observation payload, an effect, the transcript or a range of tokens",
        "cat CHECKPOINT observation STEP SOURCE [--occurrence N] | effect SEQ | transcript "
        "writes the recorded bytes to stdout unchanged (--json: as bytes_hex); "
        "cat CHECKPOINT tokens [--start I] [--count N] prints one token per line "
        "(seq, kind, provenance, value as JSON). Every read is hash-checked. " + ID_HELP,
        STORE_CODES,
    )
    p.add_argument("checkpoint", metavar="CHECKPOINT", help="checkpoint (id, prefix, RUN@BRANCH~N)")
    p.add_argument("what", choices=_WHAT, help="what to print")
    p.add_argument("args", nargs="*", metavar="ARG", help="STEP SOURCE, or SEQ")
    p.add_argument(
        "--occurrence", type=nonnegative, default=None, help="observation: the N-th read (from 0)"
    )
    p.add_argument("--start", type=nonnegative, default=None, help="tokens: first index")
    p.add_argument("--count", type=positive, default=None, help="tokens: at most N")
    p.add_argument(
        "--json",
        action="store_true",
        help='tokens as one JSON list; a payload or transcript as {"bytes_hex": ...}',
    )
    store_arg(p)
    p.set_defaults(handler=_cat)
