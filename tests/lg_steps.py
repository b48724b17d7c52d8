"""Run LangGraph maintenance with a callback before each of a keep_latest prune's steps."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any
from unittest import mock

from cpstore.langgraph import _maintain

#: The prune's steps a callback sees, by the ``_maintain`` name each wraps.
STEPS = {"_copy_one": "copy", "reset_ref": "reset", "sweep": "sweep"}


@contextmanager
def prune_steps(event: Callable[[str], None]) -> Iterator[None]:
    """While open, ``event("copy" | "reset" | "sweep")`` runs before each such step of any
    prune, copy or delete in this process (the callback guards its own re-entry)."""
    with ExitStack() as stack:
        for attr, name in STEPS.items():
            real = getattr(_maintain, attr)

            def step(*args: Any, _real: Any = real, _name: str = name, **kw: Any) -> Any:
                event(_name)
                return _real(*args, **kw)

            stack.enter_context(mock.patch.object(_maintain, attr, step))
        yield
