"""After the ledger guard refuses an effect (not in the sealed ledger at that position), the
replay is halted: every later effect is refused too (seed 002: a replay that observes a side
effect not in the sealed ledger "must halt before the effect is committed"). Before
(audit52's doubt), the next attempt was compared with the next ledger entry, and one equal
to it was admitted and escaped from a replay already known to diverge."""

from __future__ import annotations

import pytest

from cpstore.errors import LedgerGuardError
from cpstore.native.binding import digest
from cpstore.replay import LedgerGuard
from cpstore.run.model import Effect


def _effect(seq: int, target: str, payload: bytes) -> Effect:
    return Effect(seq, target, bytes(digest(payload)).hex())


def _guard() -> LedgerGuard:
    ledger = [_effect(0, "db", b"a"), _effect(1, "mail", b"b"), _effect(2, "db", b"c")]
    return LedgerGuard(ledger, sealed=True)


def test_an_effect_equal_to_the_next_entry_after_a_refusal_is_refused() -> None:
    guard = _guard()
    with pytest.raises(LedgerGuardError, match="not in the sealed ledger at this position"):
        guard.check("db", b"x")  # unrecorded at seq 0
    ran: list[str] = []
    with pytest.raises(LedgerGuardError, match="halted") as told:
        guard.perform("mail", b"b", lambda: ran.append("sent"))  # before: admitted
    assert ran == []  # the effect never ran
    assert "seq=0" in str(told.value.expected)
    with pytest.raises(LedgerGuardError, match="halted"):
        guard.check("db", b"c")
    assert [e.seq for e in guard.attempted] == [0, 1, 2]  # each attempt at its position


def test_a_faithful_replay_is_admitted_whole() -> None:
    guard = _guard()
    for target, payload in [("db", b"a"), ("mail", b"b"), ("db", b"c")]:
        guard.check(target, payload)
    with pytest.raises(LedgerGuardError, match="end of the ledger"):
        guard.check("db", b"d")  # past the end: refused, then halted
    with pytest.raises(LedgerGuardError, match="halted"):
        guard.check("db", b"e")
