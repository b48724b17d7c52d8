"""``cpstore lg-diff``: where two LangGraph threads (or a thread and its fork) diverge.

A separate command from ``cpstore diff`` (which compares two cpstore
checkpoints or run documents): it reads threads the LangGraph saver wrote and
needs the ``langgraph`` extra, imported only when the command runs.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
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
from cpstore.errors import InvalidInputError, NotFoundError

__all__ = ["add_lg_diff_parser", "load_serde"]


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
        "the command cannot decode, subgraphs it cannot pair, updated_channels or "
        "pending writes' task ids it cannot vouch for: not the same). Threads "
        "written through an encrypting serde (EncryptedSerializer) are compared with "
        "--serde naming the saver's serde.",
        (EXIT_DIFFERENT, EXIT_QUARANTINE, *STORE_CODES),
    )
    p.add_argument("thread_a", metavar="THREAD_A", help="a LangGraph thread id")
    p.add_argument("thread_b", metavar="THREAD_B", help="another (or the same) thread id")
    p.add_argument("--ns", default="", help="checkpoint namespace of both (default: root)")
    p.add_argument("--checkpoint-a", metavar="ID", help="compare up to this checkpoint of A")
    p.add_argument("--checkpoint-b", metavar="ID", help="compare up to this checkpoint of B")
    p.add_argument(
        "--serde",
        metavar="MODULE:ATTR",
        help="the serde the threads were written with: a serializer object, or a "
        "zero-argument factory (a class, a function) returning one, imported as "
        "MODULE and looked up as ATTR (dotted; e.g. langgraph.checkpoint.serde."
        "encrypted:EncryptedSerializer.from_pycryptodome_aes, its key from "
        "LANGGRAPH_AES_KEY); the current directory is searched last; default: "
        "JsonPlusSerializer. A bad spec, a failing import or factory, or an object "
        "that is not a serializer is exit 3, a module or attribute not found exit 4",
    )
    store_arg(p)
    json_arg(p)
    p.set_defaults(handler=_lg_diff)


def _config(thread: str, ns: str, checkpoint: str | None) -> dict[str, Any]:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
    if checkpoint:
        conf["checkpoint_id"] = checkpoint
    return {"configurable": conf}


def _serializer(obj: Any) -> bool:
    """Whether ``obj`` is a serializer instance (LangGraph's ``SerializerProtocol``)."""
    return not isinstance(obj, type) and all(
        callable(getattr(obj, m, None)) for m in ("dumps_typed", "loads_typed")
    )


def _failed(spec: str, doing: str, exc: BaseException) -> InvalidInputError:
    return InvalidInputError(
        f"--serde {spec}: {doing} raised {type(exc).__name__}",
        got=str(exc)[:200] or None,
    )


def _import(spec: str, module: str) -> Any:
    """``module`` imported; NotFoundError when it (or a package holding it) is not found,
    InvalidInputError when importing it raises anything else (its own missing import)."""
    try:
        here = os.getcwd()
    except OSError:  # the current directory was removed: nothing to search there
        here = None
    if here is not None and here not in sys.path:
        sys.path.append(here)  # as `python -m` finds the caller's modules, but last
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        name = exc.name or ""
        if name and (module == name or module.startswith(name + ".")):
            raise NotFoundError(
                f"--serde {spec}: no module {name!r}", expected="an importable module"
            ) from None
        raise _failed(spec, f"importing {module}", exc) from None
    except (Exception, SystemExit) as exc:  # the module's own code failed
        raise _failed(spec, f"importing {module}", exc) from None


def load_serde(spec: str) -> Any:
    """The serializer ``--serde MODULE:ATTR`` names: ATTR (dotted) of MODULE, called with
    no argument when it is not a serializer itself (a class, a factory). Errors are
    cpstore's: a bad spec or an object that is not a serializer InvalidInputError (exit 3),
    a module or attribute not found NotFoundError (exit 4), a module or factory that
    raises InvalidInputError naming what it raised (never a traceback)."""
    module, colon, attr = spec.partition(":")
    parts = attr.split(".")
    if not colon or not all(p.isidentifier() for p in (*module.split("."), *parts)):
        raise InvalidInputError(
            "--serde takes MODULE:ATTR", expected="e.g. myapp.serde:make_serde", got=spec
        )
    obj = _import(spec, module)
    for i, part in enumerate(parts):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise NotFoundError(
                f"--serde {spec}: {module}:{'.'.join(parts[: i + 1])} not found"
            ) from None
        except (Exception, SystemExit) as exc:  # a property or module __getattr__ failing
            raise _failed(spec, f"looking up {part}", exc) from None
    if not _serializer(obj):
        if not callable(obj):
            raise InvalidInputError(
                f"--serde {spec}: not a serializer nor a factory of one",
                expected="an object with dumps_typed and loads_typed, or a callable",
                got=type(obj).__name__,
            )
        try:
            obj = obj()
        except (Exception, SystemExit) as exc:  # a factory needing arguments, a key unset
            raise _failed(spec, "calling it with no argument", exc) from None
        if not _serializer(obj):
            raise InvalidInputError(
                f"--serde {spec}: the factory returned no serializer",
                expected="an object with dumps_typed and loads_typed",
                got=type(obj).__name__,
            )
    return obj


def _lg_diff(args: argparse.Namespace) -> int:
    try:
        from cpstore.langgraph.diff import diff_threads  # noqa: PLC0415 - the optional extra
    except ImportError:
        raise InvalidInputError(
            "lg-diff needs the langgraph extra", expected="pip install cpstore[langgraph]"
        ) from None
    serde = None if args.serde is None else load_serde(args.serde)
    with open_store_at(args) as store:
        try:
            found = diff_threads(
                store,
                _config(args.thread_a, args.ns, args.checkpoint_a),
                _config(args.thread_b, args.ns, args.checkpoint_b),
                serde=serde,
            )
        except SystemExit as exc:  # review84: the serde's sys.exit() was our exit code
            if serde is None:
                raise
            raise _failed(args.serde, "decoding with it", exc) from None
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
