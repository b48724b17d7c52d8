"""A replay's cursor, pinned reads and ledger guard shared by threads: one call at a time.

Before audit59 each took its position (``i = len(attempted)``, ``i = self._idx``, the
occurrence ``used``) and recorded its call later, with nothing between to stop another
thread: two threads checking the same effect were both admitted against ledger entry i
(an effect the sealed ledger holds once escaped twice), and two resolves were both served
token i (a re-read). The paused tests stop thread A at the line after it took its
position and run thread B's call to its end meanwhile (or for at most 0.5 s, when B waits
for A, as it now does): deterministic whatever the scheduler does. The free-running tests
use real threads with no pause and assert only what every interleaving must give.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import sys
import threading
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any

import pytest

from cpstore.decision.table import Verdict
from cpstore.decision.validate import validate
from cpstore.errors import LedgerGuardError, RecordingGapError, ReplayDivergenceError
from cpstore.native.binding import digest
from cpstore.replay import LedgerGuard, PinnedObservations, ReplayCursor
from cpstore.run.model import Effect, PackedTokens, ReplayMode, Run, Token

STATE = "00" * 16


def _line_of(func: Callable[..., Any], text: str) -> int:
    lines, first = inspect.getsourcelines(func)
    return first + next(i for i, line in enumerate(lines) if text in line)


def _paused(
    func: Callable[..., Any], text: str, first: Callable[[], Any], second: Callable[[], Any]
) -> tuple[list[Any], list[Any]]:
    """Run ``first`` in thread A, stopped at the line of ``func`` holding ``text`` until
    ``second`` has run in thread B (or 0.5 s passed: B waits for A). Results or errors."""
    code, line = func.__code__, _line_of(func, text)
    out_a: list[Any] = []
    out_b: list[Any] = []
    fired: list[bool] = []

    def call(f: Callable[[], Any], out: list[Any]) -> None:
        try:
            out.append(f())
        except Exception as exc:  # the test compares what each got
            out.append(exc)

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line" and frame.f_lineno == line and not fired:
            fired.append(True)
            b = threading.Thread(target=call, args=(second, out_b))
            b.start()
            b.join(0.5)  # a bound on A's pause, not an assertion
            threads.append(b)
        return local

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        return local if frame.f_code is code else None

    def run_a() -> None:
        gc.disable()  # collector off while hooked: tests/trace_interrupts.py
        sys.settrace(tracer)
        try:
            call(first, out_a)
        finally:
            sys.settrace(None)
            gc.enable()

    threads: list[threading.Thread] = []
    a = threading.Thread(target=run_a)
    a.start()
    a.join()
    for b in threads:
        b.join()
    assert fired, "thread A never reached the line"
    return out_a, out_b


def _effect(seq: int, payload: bytes) -> Effect:
    return Effect(seq, "db", bytes(digest(payload)).hex())


def test_one_recorded_effect_checked_by_two_threads_is_admitted_once() -> None:
    """Before: both threads were admitted against entry 0 (the effect escaped twice)."""
    guard = LedgerGuard([_effect(0, b"a"), _effect(1, b"b")], sealed=True)
    a, b = _paused(
        LedgerGuard.check_digest,
        "attempt = Effect(seq",
        lambda: guard.check("db", b"a"),
        lambda: guard.check("db", b"a"),
    )
    assert a == [_effect(0, b"a")]
    assert len(b) == 1 and isinstance(b[0], LedgerGuardError)
    assert guard.attempted == (_effect(0, b"a"), _effect(1, b"a"))  # B's, at position 1


def test_one_token_resolved_by_two_threads_is_served_once() -> None:
    """Before: both threads were served token 0 (a re-read) and token 1 was left."""
    recorded = PackedTokens.from_tokens(Token(i, "rng", 10 + i) for i in range(2))
    cursor = ReplayCursor(recorded)
    a, b = _paused(
        ReplayCursor.resolve,
        "j = i - self._block_first",
        lambda: cursor.resolve("rng"),
        lambda: cursor.resolve("rng"),
    )
    assert (a, b) == ([10], [11])
    assert bytes(cursor.replayed().view()) == bytes(recorded.view())


class _Recording:
    """A PayloadSource: (5, "cfg") read twice, with two payloads."""

    def __init__(self) -> None:
        self.payloads = [b"v1", b"v2"]

    def observations(self) -> Sequence[tuple[int, str, str, float | None]]:
        return [(5, "cfg", bytes(digest(p)).hex(), 1.0) for p in self.payloads]

    def payload(self, step: int, source: str, *, occurrence: int = 0) -> bytes:
        if (step, source) != (5, "cfg") or occurrence >= len(self.payloads):
            raise RecordingGapError("no recorded observation")
        return self.payloads[occurrence]


def test_one_recorded_read_taken_by_two_threads_is_served_once() -> None:
    """Before: both threads were served the first occurrence."""
    reads = PinnedObservations(_Recording())
    a, b = _paused(
        PinnedObservations._read_locked,
        "dig, pinned = entries[used]",
        lambda: reads.read(5, "cfg"),
        lambda: reads.read(5, "cfg"),
    )
    assert (a, b) == ([b"v1"], [b"v2"])
    assert [o.payload_digest for o in reads.observations] == [
        bytes(digest(p)).hex() for p in (b"v1", b"v2")
    ]


@pytest.mark.parametrize("threads", [2, 8])
def test_free_running_threads_admit_each_ledger_entry_once(threads: int) -> None:
    """Real threads, no pause: whatever the interleaving, an effect the ledger holds n
    times is admitted exactly n times, and everything after is refused."""
    n = 400
    guard = LedgerGuard([_effect(i, b"same") for i in range(n)], sealed=True)
    admitted: list[Effect] = []
    barrier = threading.Barrier(threads)

    def work() -> None:
        barrier.wait()
        for _ in range(2 * n // threads):
            with contextlib.suppress(LedgerGuardError):
                admitted.append(guard.check("db", b"same"))

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert sorted(e.seq for e in admitted) == list(range(n))
    assert [e.seq for e in guard.attempted] == list(range(2 * n))


@pytest.mark.parametrize("threads", [2, 8])
def test_free_running_threads_resolve_each_token_once(threads: int) -> None:
    """Real threads sharing one STRICT cursor resolve the recording exactly: every value
    served once, P byte-identical to R and an ACCEPT; one more resolve is refused."""
    n = 4000
    recorded = PackedTokens.from_tokens(Token(i, "clock", i) for i in range(n))
    cursor = ReplayCursor(recorded)
    served: list[int] = []
    barrier = threading.Barrier(threads)

    def work() -> None:
        barrier.wait()
        for _ in range(n // threads):
            served.append(cursor.resolve("clock"))

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert sorted(served) == list(range(n))
    replay = cursor.replayed()
    assert bytes(replay.view()) == bytes(recorded.view())
    assert list(replay.values or ()) == list(range(n))
    r = Run("run", 1, STATE, tokens=recorded, ledger_sealed=True)
    p = Run("run", 1, STATE, tokens=replay, mode=ReplayMode.STRICT)
    assert validate(r, p).verdict is Verdict.ACCEPT
    with pytest.raises(ReplayDivergenceError, match="exhausted"):
        cursor.resolve("clock")
