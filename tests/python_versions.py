"""Where the running CPython differs in what a test pins.

CI runs the suite on CPython 3.11; it was also run whole on 3.12.1 and 3.13.0
(2026-12-04). These name the differences found, so that a test pins the behaviour of
the interpreter it runs on and says why.
"""

from __future__ import annotations

import sys

import pytest

#: CPython 3.12.0-3.12.2 refuse to start a thread in an exit hook ("can't create new
#: thread at interpreter shutdown", CPython gh-113964; 3.11, 3.12.3 and later, and 3.13
#: start one once the non-daemon threads have ended). cpstore's exit flush then runs in
#: the exiting thread, and its wait for a writer lock another process holds has no
#: bound (docs/durability.md, "batched").
NO_THREAD_AT_EXIT = (3, 12, 0) <= sys.version_info[:3] < (3, 12, 3)

needs_thread_at_exit = pytest.mark.skipif(
    NO_THREAD_AT_EXIT,
    reason="CPython 3.12.0-3.12.2 start no thread in an exit hook (gh-113964): the exit "
    "flush's wait for the writer lock has no bound there (docs/durability.md)",
)

#: CPython 3.12 bounds C recursion apart from sys.setrecursionlimit (raising the limit does
#: not raise it): a walk through map()/all() of a value nested ~1,000 deep raises
#: RecursionError there, where 3.11 and 3.13 follow the raised limit.
C_RECURSION_BOUNDED = sys.version_info[:2] == (3, 12)
