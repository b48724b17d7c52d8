"""A SIGTERM handler that raises, for tests of a signal handler's exception landing in a
commit: a watchdog's ``Exception``, ``sys.exit()`` or ``KeyboardInterrupt``."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

#: How the handler raises: ``raise`` WatchdogError, ``exit`` (SystemExit 3), ``interrupt``.
HOW = ["raise", "exit", "interrupt"]


class WatchdogError(Exception):
    """What a SIGALRM/SIGTERM watchdog handler raises (an Exception, not a BaseException)."""


def raised_by(how: str) -> type[BaseException]:
    """The exception class a handler armed with ``how`` raises."""
    return {"raise": WatchdogError, "exit": SystemExit, "interrupt": KeyboardInterrupt}[how]


@contextmanager
def sigterm_restored() -> Iterator[list[threading.Event]]:
    """The SIGTERM handler put back after the block; yields the list :func:`arm` fills."""
    previous = signal.getsignal(signal.SIGTERM)
    try:
        yield []
    finally:
        signal.signal(signal.SIGTERM, previous)


def arm(how: str, handled: list[threading.Event]) -> threading.Event:
    """A SIGTERM handler raising as ``how`` says; the event is set once it ran."""
    ran = threading.Event()
    handled.append(ran)

    def handler(signum: int, frame: FrameType | None) -> None:
        ran.set()
        if how == "exit":
            sys.exit(3)
        if how == "interrupt":
            raise KeyboardInterrupt
        raise WatchdogError("watchdog")

    signal.signal(signal.SIGTERM, handler)
    return ran
