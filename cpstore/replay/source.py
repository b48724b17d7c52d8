"""What a replay reads from: an open checkpoint view, as a Protocol.

:class:`cpstore.CheckpointView` (``with store.read(id) as cp``) is the one
cpstore ships; the replay room imports nothing of the store. The zero-copy
members (``token_records``, ``token_value_views``) hand out views into the
store's map; with ``leased=True`` (what the replay cursor asks) they are valid only
while ``lease`` is non-empty, and ``closed_error()`` is what to raise once it is empty.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

__all__ = ["CheckpointManifest", "CheckpointSource"]


class CheckpointManifest(Protocol):
    """The manifest fields a replay reads."""

    @property
    def run_id(self) -> str:
        """The run the checkpoint belongs to."""

    @property
    def step(self) -> int:
        """The step the checkpoint was taken at."""

    @property
    def ledger_sealed(self) -> bool:
        """True when the checkpoint sealed the side-effect ledger."""

    @property
    def raw(self) -> Any:
        """The decoded manifest map."""


class CheckpointSource(Protocol):
    """An open checkpoint: its manifest, logs and zero-copy token views."""

    @property
    def id(self) -> str:
        """The checkpoint id (hex)."""

    @property
    def manifest(self) -> CheckpointManifest:
        """The checkpoint's manifest."""

    @property
    def verified(self) -> bool:
        """True when every read of the view is hash-checked (not ``verify=False``)."""

    @property
    def lease(self) -> Sequence[bool]:
        """Non-empty exactly while the view's txn is open."""

    def closed_error(self) -> Exception:
        """The error to raise for a use after the view closed."""

    def token_records(self, *, leased: bool = False) -> memoryview:
        """The packed TOKEN records (hash-checked), zero-copy."""

    def token_value_views(self, *, leased: bool = False) -> tuple[memoryview, memoryview]:
        """The token values blob and its offsets, zero-copy."""

    def effects(self) -> list[tuple[int, str, str]]:
        """The side-effect ledger: (seq, target, payload digest hex)."""

    def observations(self) -> list[tuple[int, str, str, float | None]]:
        """(step, source, payload digest hex, pinned_at) in recorded order."""

    def payload(self, step: int, source: str, *, occurrence: int = 0) -> bytes:
        """The ``occurrence``-th pinned payload of ``source`` at ``step``."""
