"""KeyboardInterrupt raised by a trace function on a chosen function entry, for tests that
sweep where an interrupt lands in a commit or a flush; and whether psycopg's own code is on
the stack (its frames swept by tests/test_psycopg_interrupts.py, left out elsewhere).

Every test that sets a trace or profile function turns the garbage collector off while
it is set (``gc.disable()`` before, ``gc.enable()`` after unsetting it, inline: a helper
function called under the hook would itself be a traced call and move the sweep's
count). CPython 3.11 can segfault reporting an unraisable (an earlier test's unclosed
resource, found by a collection) while a profile function is set (memray#260); ci78
died so in tests/test_audit44_interrupts.py."""

from __future__ import annotations

from collections.abc import Callable
from types import FrameType
from typing import Any


def in_psycopg(frame: FrameType | None) -> bool:
    """Whether psycopg's code is on the stack at ``frame``."""
    while frame is not None:
        if "psycopg" in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False


def not_in_psycopg(frame: FrameType | None) -> bool:
    return not in_psycopg(frame)


def interrupting(
    k: int, counted: Callable[[FrameType], bool]
) -> tuple[Callable[..., Any], list[str]]:
    """A trace function raising KeyboardInterrupt on the k-th function entry whose frame
    ``counted`` holds for (Python unsets it once it raised), and where it landed
    (``file.py:function``; empty while it has not)."""
    seen: list[int] = [0]
    landed: list[str] = []

    def trace(frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and counted(frame):
            seen[0] += 1
            if seen[0] == k:
                code = frame.f_code
                landed.append(f"{code.co_filename.rsplit('/', 1)[-1]}:{code.co_name}")
                raise KeyboardInterrupt(landed[0])

    return trace, landed
