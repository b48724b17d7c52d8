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

import dis
import functools
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any


@functools.cache
def _checked_resumes(code: CodeType) -> frozenset[int]:
    """The offsets of ``code``'s ``RESUME`` instructions that check for a pending signal:
    the function's start (arg 0) and a resumption after a plain ``yield`` (arg 1); not one
    after ``yield from`` or ``await`` (2, 3), which CPython 3.11 resumes unchecked."""
    return frozenset(
        ins.offset
        for ins in dis.get_instructions(code)
        if ins.opname == "RESUME" and ins.arg is not None and ins.arg < 2
    )


def a_signal_lands_at_entry(frame: FrameType) -> bool:
    """Whether a signal's handler can run at this "call" event of ``frame``: the frame's
    start, or a generator's resumption by ``send``/``next`` after a plain ``yield``
    (``RESUME`` with arg below 2 checks the eval breaker first). Not a resumption after
    ``await`` or ``yield from`` (no check), nor one by ``throw``/``athrow`` (the event
    comes before any instruction, the frame still at its ``YIELD_VALUE``; no check, and a
    trace function's exception there unwinds the frame with no handler run, CPython 3.11's
    ``exit_unwind``: a landing no signal can make, review92)."""
    return frame.f_lasti in _checked_resumes(frame.f_code)


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
    (``file.py:function``; empty while it has not). Only entries a signal can land at
    (:func:`a_signal_lands_at_entry`) count."""
    seen: list[int] = [0]
    landed: list[str] = []

    def trace(frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and counted(frame) and a_signal_lands_at_entry(frame):
            seen[0] += 1
            if seen[0] == k:
                code = frame.f_code
                landed.append(f"{code.co_filename.rsplit('/', 1)[-1]}:{code.co_name}")
                raise KeyboardInterrupt(landed[0])

    return trace, landed
