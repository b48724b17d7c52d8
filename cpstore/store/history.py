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

from cpstore.errors import InvalidInputError
from cpstore.store.backend import Backend
from cpstore.store.manifest import Manifest
from cpstore.store.model import check_name, ref_key
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
    if limit is not None and (
        not isinstance(limit, int) or isinstance(limit, bool) or limit < 0
    ):
        raise InvalidInputError("limit must be a non-negative int or None", got=limit)
    key = ref_key(check_name(run_id, "run_id"), check_name(branch, "branch"))
    out: list[HistoryEntry] = []
    cps = backend.db("checkpoints")
    with backend.read_txn() as txn:
        cid = backend.head(txn, key)
        while cid is not None and (limit is None or len(out) < limit):
            if txn.get(cid, db=cps) is None:
                break  # pruned: history ends here
            with CheckpointView(backend, cid, verify=verify, txn=txn) as view:
                manifest = view.manifest
                out.append(HistoryEntry(manifest, view.state()))
            cid = None if manifest.parent is None else bytes.fromhex(manifest.parent)
    return out
