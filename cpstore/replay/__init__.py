"""Replaying a recorded run: token cursor, pinned observations, ledger guard, session."""

from __future__ import annotations

from cpstore.replay.cursor import ReplayCursor
from cpstore.replay.guards import LedgerGuard, PayloadSource, PinnedObservations
from cpstore.replay.session import ReplaySession
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
