"""Replaying a recorded run: token cursor, pinned observations, ledger guard, session."""

from __future__ import annotations

from cpstore.replay.session import (
    LedgerGuard,
    PayloadSource,
    PinnedObservations,
    ReplayCursor,
    ReplaySession,
)

__all__ = [
    "LedgerGuard",
    "PayloadSource",
    "PinnedObservations",
    "ReplayCursor",
    "ReplaySession",
]
