"""Run LangGraph maintenance with a callback before each of a keep_latest prune's steps."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any
from unittest import mock

from cpstore.langgraph import _copy_delete, _maintain

#: The prune's steps a callback sees, by the name each wraps and the modules calling it:
#: a copy step is keep_latest's (``_maintain``) and copy_thread's (``_copy_delete``).
STEPS = {
    "_copy_one": ("copy", (_maintain, _copy_delete)),
    "reset_ref": ("reset", (_maintain,)),
    "sweep": ("sweep", (_maintain,)),
}


@contextmanager
def prune_steps(event: Callable[[str], None]) -> Iterator[None]:
    """While open, ``event("copy" | "reset" | "sweep")`` runs before each such step of any
    prune, copy or delete in this process (the callback guards its own re-entry)."""
    with ExitStack() as stack:
        for attr, (name, modules) in STEPS.items():
            real = getattr(modules[-1], attr)

            def step(*args: Any, _real: Any = real, _name: str = name, **kw: Any) -> Any:
                event(_name)
                return _real(*args, **kw)

            for module in modules:
                stack.enter_context(mock.patch.object(module, attr, step))
        yield
