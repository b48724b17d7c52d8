"""A branch's history with every checkpoint's state, read in one read txn.

:meth:`Store.history` returns manifests only; a caller that wants the states
too would need one :meth:`Store.read` (one txn) per entry, and the branch may
move in between. :func:`history_states` walks the same path as
:func:`~cpstore.store.branches.history` in one txn and reads each state through
:meth:`CheckpointView.state`, so every object is hash-checked and decoded
exactly as a single read does, and nothing decoded is shared between entries
or calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cpstore.store.backend import Backend, Txn
from cpstore.store.branches import walk_history
from cpstore.store.manifest import Manifest
from cpstore.store.reader import CheckpointView

__all__ = ["HistoryEntry", "history_states"]


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One checkpoint of a branch's history and its state, from :meth:`Store.history_states`."""

    #: The checkpoint's manifest (equal to the one :meth:`Store.history` returns).
    manifest: Manifest
    #: The whole state, as ``store.read(manifest.id).state()`` returns it:
    #: bytes, or part name -> value. Decoded for this entry alone (never shared).
    state: bytes | dict[str, Any]

    @property
    def id(self) -> str:
        """The checkpoint id."""
        return self.manifest.id


def history_states(
    backend: Backend,
    run_id: str,
    branch: str = "main",
    *,
    limit: int | None = None,
    verify: bool = True,
) -> list[HistoryEntry]:
    """Checkpoints with their states from the head of ``branch`` back, newest first.

    One read txn for the whole walk, so the entries are one consistent
    snapshot even while another process moves the head. Stops where
    :func:`~cpstore.store.branches.history` stops: at ``limit``, at a run's
    first checkpoint or at a pruned one. A damaged object raises
    :class:`IntegrityError` naming the object and the checkpoint, and no
    entry is returned.
    """

    def load(txn: Txn[memoryview], cid: bytes) -> tuple[HistoryEntry, str | None]:
        with CheckpointView(backend, cid, verify=verify, txn=txn) as view:
            manifest = view.manifest
            entry = HistoryEntry(manifest, view.state())
        return entry, manifest.parent

    return walk_history(backend, run_id, branch, limit, load)
