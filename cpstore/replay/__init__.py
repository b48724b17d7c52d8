"""Replaying a recorded run: token cursor, pinned observations, ledger guard, session."""

from __future__ import annotations

from cpstore.replay.session import (
    LedgerGuard,
    PayloadSource,
    PinnedObservations,
    ReplayCursor,
    ReplaySession,
)
from cpstore.replay.source import CheckpointManifest, CheckpointSource

__all__ = [
    "CheckpointManifest",
    "CheckpointSource",
    "LedgerGuard",
    "PayloadSource",
    "PinnedObservations",
    "ReplayCursor",
    "ReplaySession",
]
