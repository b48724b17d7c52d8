"""Generate docs/api.md from the package's own signatures and docstrings.

Run ``.venv/bin/python tools/api_doc.py > docs/api.md`` after changing a public
name; ``tests/test_api_doc.py`` checks every name of ``cpstore.__all__`` (and of
the objects they return) is in it.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import inspect
import sys
import textwrap
from typing import Any

import cpstore
from cpstore.decision.table import RecordingGap, Subject
from cpstore.replay.cursor import ReplayCursor
from cpstore.replay.guards import LedgerGuard, PinnedObservations
from cpstore.store import (
    AuditRecord,
    GcReport,
    HistoryEntry,
    Manifest,
    Problem,
    StoreSpace,
    VerifyReport,
)
from cpstore.store.bulk import BulkAppends
from cpstore.store.facade_upkeep import StoreUpkeep
from cpstore.store.recorder_ends import RecorderEnds

#: Bases whose members are documented as the class's own: the halves of a class split
#: across modules (Store's audit and maintenance calls, facade_upkeep.py; a Recorder's
#: start and close, recorder_ends.py; its batch appends for replay engines, bulk.py).
DOCUMENTED_BASES: tuple[type, ...] = (StoreUpkeep, RecorderEnds, BulkAppends)

#: Objects the public names return, documented after them.
RETURNED: list[tuple[str, Any]] = [
    ("cpstore.store.Manifest", Manifest),
    ("cpstore.store.AuditRecord", AuditRecord),
    ("cpstore.store.VerifyReport", VerifyReport),
    ("cpstore.store.Problem", Problem),
    ("cpstore.store.HistoryEntry", HistoryEntry),
    ("cpstore.store.GcReport", GcReport),
    ("cpstore.store.StoreSpace", StoreSpace),
    ("cpstore.decision.Subject", Subject),
    ("cpstore.decision.RecordingGap", RecordingGap),
    ("cpstore.replay.ReplayCursor", ReplayCursor),
    ("cpstore.replay.PinnedObservations", PinnedObservations),
    ("cpstore.replay.LedgerGuard", LedgerGuard),
]

GROUPS = [
    ("Opening a store", ["open", "Store"]),
    ("Recording", ["Recorder", "AppendLog", "state_digest"]),
    ("Reading a checkpoint", ["CheckpointView"]),
    ("Replaying", ["ReplaySession", "ReplayMode"]),
    (
        "Runs and run documents",
        [
            "Run",
            "Token",
            "PackedTokens",
            "Observation",
            "Effect",
            "load_document",
            "parse_document",
            "dump_document",
        ],
    ),
    (
        "Validating and the gates",
        [
            "validate",
            "Decision",
            "Finding",
            "FindingCode",
            "Verdict",
            "Fidelity",
            "resume_gate",
            "ResumePermit",
            "sign_off",
            "SignOff",
            "certify_rollback",
            "RollbackCertificate",
        ],
    ),
]


def _attr_docs(cls: type) -> dict[str, str]:
    """Docstrings written under class attributes (``x: int`` then ``\"\"\"...\"\"\"``)."""
    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass.__module__.split(".")[0] != "cpstore":
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for fn in body:
            if isinstance(fn, ast.FunctionDef) and fn.name == "__init__":
                body = [*body, *fn.body]
        for a, b in zip(body, body[1:], strict=False):
            name = None
            if isinstance(a, ast.AnnAssign) and isinstance(a.target, ast.Name):
                name = a.target.id
            elif isinstance(a, ast.Assign) and isinstance(a.targets[0], ast.Name):
                name = a.targets[0].id
            elif isinstance(a, ast.Assign) and isinstance(a.targets[0], ast.Attribute):
                name = a.targets[0].attr
            if (
                name
                and isinstance(b, ast.Expr)
                and isinstance(b.value, ast.Constant)
                and isinstance(b.value.value, str)
            ):
                out[name] = inspect.cleandoc(b.value.value)
    return out


def _sig(obj: Any, name: str) -> str:
    try:
        sig = inspect.signature(obj, eval_str=True)
    except (NameError, TypeError, ValueError, AttributeError):
        try:
            sig = inspect.signature(obj)
        except (TypeError, ValueError):
            return name
    text = f"{name}{sig}"
    for prefix in (
        "collections.abc.",
        "cpstore.store.manifest.",
        "cpstore.native.records.",
        "cpstore.store.",
        "cpstore.decision.",
        "cpstore.run.model.",
        "typing.",
        "cpstore.replay.",
        "os.",
        "contextlib.",
    ):
        text = text.replace(prefix, "")
    return text


def _doc(obj: Any) -> str:
    return inspect.cleandoc(obj.__doc__ or "").strip()


def _documented(cls: type) -> list[type]:
    """``cls``, then those of its bases in :data:`DOCUMENTED_BASES`, in MRO order."""
    return [klass for klass in cls.__mro__ if klass is cls or klass in DOCUMENTED_BASES]


def _members(cls: type) -> list[tuple[str, Any]]:
    """Public members of ``cls``, then those of its :data:`DOCUMENTED_BASES`, each once."""
    out = []
    seen: set[str] = set()
    for klass in _documented(cls):
        for name, value in klass.__dict__.items():
            if name.startswith("_") or name in seen:
                continue
            seen.add(name)
            out.append((name, value))
    return out


def _class(cls: type, title: str, lines: list[str]) -> None:
    lines.append(f"### `{title}`\n")
    if issubclass(cls, enum.Enum):
        lines.append(f"`class {cls.__name__}({cls.__mro__[1].__name__})`\n")
    elif dataclasses.is_dataclass(cls):
        lines.append(f"`{_sig(cls, cls.__name__)}` (frozen dataclass)\n")
    elif issubclass(cls, BaseException):
        lines.append(f"`class {cls.__name__}({', '.join(b.__name__ for b in cls.__bases__)})`\n")
    else:
        lines.append(f"`{_sig(cls, cls.__name__)}`\n")
    doc = _doc(cls)
    if doc:
        lines.append(doc + "\n")
    if any("__enter__" in klass.__dict__ for klass in _documented(cls)):
        lines.append("A context manager: use it in a `with` block.\n")
    if issubclass(cls, enum.Enum):
        attrs = _attr_docs(cls)
        for member in cls:
            lines.append(f"- `{cls.__name__}.{member.name}`: {attrs.get(member.name, '')}")
        lines.append("")
        return
    if issubclass(cls, BaseException):
        return
    attrs = _attr_docs(cls)
    if dataclasses.is_dataclass(cls):
        for f in dataclasses.fields(cls):
            lines.append(f"- `{f.name}`: {attrs.get(f.name, '')}".rstrip())
    else:
        for name, text in attrs.items():
            if not name.startswith("_") and name not in cls.__dict__:
                lines.append(f"- `.{name}` (attribute): {text}")
    for name, value in _members(cls):
        if isinstance(value, property):
            lines.append(
                f"- `.{name}` (property): {_doc(value).splitlines()[0] if _doc(value) else ''}"
            )
        elif isinstance(value, (staticmethod, classmethod)):
            fn = value.__func__
            lines.append(f"- `{cls.__name__}.{_sig(fn, name)}`: {_first(fn)}")
        elif inspect.isfunction(value) and name != "__init__":
            lines.append(
                f"- `.{_sig(value, name).replace('(self, ', '(').replace('(self)', '()')}`: {_first(value)}"
            )
    lines.append("")


def _first(fn: Any) -> str:
    doc = _doc(fn)
    return " ".join(doc.split("\n\n")[0].split()) if doc else ""


def main() -> None:
    lines = [
        "# API reference",
        "",
        "Every public name of `cpstore` (its `__all__`) and the objects they return,",
        "generated from the code's own signatures and docstrings by",
        "`tools/api_doc.py` (regenerate it after changing a public name;",
        "`tests/test_api_doc.py` fails when a name is missing). Conventions: required",
        "arguments are positional, options keyword-only; results are frozen dataclasses;",
        "every error is a `CpstoreError` subclass carrying `what`, `where`, `expected`,",
        "`got`. The README's quick start shows them together; docs/store.md,",
        "docs/decision-table.md and docs/run-document.md explain the behaviour.",
        "",
    ]
    done: set[str] = set()
    for title, names in GROUPS:
        lines.append(f"## {title}\n")
        for name in names:
            obj = getattr(cpstore, name)
            done.add(name)
            if inspect.isclass(obj):
                _class(obj, f"cpstore.{name}", lines)
            else:
                lines.append(f"### `cpstore.{name}`\n")
                lines.append(f"`{_sig(obj, name)}`\n")
                lines.append(_doc(obj) + "\n")
    errors = [n for n in cpstore.__all__ if n not in done]
    lines.append("## Errors\n")
    lines.append(
        "One root, `CpstoreError` (never raised itself); each error carries `what`, "
        "`where`, `expected`, `got`, and its command-line exit code is in "
        "`cpstore.cli.EXIT_CODES`.\n"
    )
    for name in errors:
        obj = getattr(cpstore, name)
        if not (inspect.isclass(obj) and issubclass(obj, BaseException)):
            sys.exit(f"{name} is in no group of tools/api_doc.py")
        _class(obj, f"cpstore.{name}", lines)
    lines.append("## Objects the API returns\n")
    for title, cls in RETURNED:
        _class(cls, title, lines)
    print("\n".join(lines).rstrip() + "\n")


if __name__ == "__main__":
    main()
