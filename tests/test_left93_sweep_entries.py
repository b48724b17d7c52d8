"""left93: the interrupt sweeps land only where a signal can (review92's by-hand skip made
the machinery's own rule).

tests/test_begin_interrupted.py's ``_interrupting`` (and tests/trace_interrupts.py's
``interrupting``) counted every "call" event of a swept frame as a landing. A generator's
resumption by ``throw`` (``athrow``, an ``@contextmanager``'s exit on an error) is one too,
but CPython 3.11 runs no signal handler there, and a trace function's exception at it
unwinds the frame with no handler run (``exit_unwind``): a sweep reported a cleanup not run
that no interrupt can skip. A resumption by ``next``/``send`` after a plain ``yield`` checks
for a signal first: it stays a landing, and its ``finally`` runs.
"""

from __future__ import annotations

import dis
from collections.abc import Generator
from contextlib import suppress

from test_begin_interrupted import interrupted_at, run_traced, sweep_landings
from trace_interrupts import interrupting

_LOG: list[str] = []


def _holding() -> Generator[None, None, None]:
    try:
        _LOG.append("held")
        yield
        yield
    finally:
        _LOG.append("let go")


def _run() -> None:
    _LOG.clear()
    held = _holding()
    next(held)
    next(held)  # resumed after a plain yield: a signal lands here
    with suppress(ValueError):
        held.throw(ValueError("the caller's"))  # resumed by throw: none does


def _left_wrong() -> str | None:
    return "finally not run" if "held" in _LOG and "let go" not in _LOG else None


def _resumed_after_the_first_yield() -> str:
    """Where the second next() resumes ``_holding`` (its first ``RESUME 1``)."""
    at = next(
        i.offset
        for i in dis.get_instructions(_holding.__code__)
        if i.opname == "RESUME" and i.arg == 1
    )
    return f"_holding@{at}"


def test_the_sweep_lands_at_a_send_resumption_never_at_a_thrown_one() -> None:
    landings: list[str] = []

    def interrupt(k: int) -> list[str]:
        landed = interrupted_at(k, {"_holding"}, _run)
        landings.extend(landed)
        return landed

    assert sweep_landings(interrupt, _left_wrong, at_least=3) == []
    assert _resumed_after_the_first_yield() in landings  # a real landing, swept


def test_the_entry_sweep_counts_no_thrown_resumption() -> None:
    """trace_interrupts' entry sweep: each entry of ``_holding`` it lands on runs the
    ``finally`` once the try is entered; the entries counted are the start and the
    resumption by next()."""
    wrong, entries = [], 0
    while True:
        trace, landed = interrupting(entries + 1, lambda f: f.f_code.co_name == "_holding")
        run_traced(trace, _run)
        if not landed:
            break
        entries += 1
        if (why := _left_wrong()) is not None:
            wrong.append(f"entry {entries}: {why}")
    assert (wrong, entries) == ([], 2)
