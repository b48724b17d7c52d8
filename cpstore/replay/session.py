"""The replay session: the cursor, pinned reads and the ledger guard of one replay, together.

The decision table (:mod:`cpstore.decision.validate`) judges a replay afterwards;
this module stops a replay at the moment it would go wrong (seed 002's
decision boundary):

* :class:`ReplayCursor` resolves each nondeterminism token from the recorded
  log. In ``STRICT`` mode (the default) a kind mismatch, an exhausted log or
  any fall-through to a live source raises at that token, with its seq,
  expected and observed. ``BEST_EFFORT`` is an explicit opt-in for debugging:
  it may call a live source, and every such token is tagged ``live`` so the
  decision ends in QUARANTINE and can never certify a rollback.
* :class:`PinnedObservations` serves each external read from the recording
  by (step, source); a missing one raises :class:`RecordingGapError`, it is
  never re-fetched (seed 000, condition 3).
* :class:`LedgerGuard` checks each side effect against the sealed ledger and
  raises *before* the effect escapes when it is not there at that position.
* :class:`ReplaySession` ties the three together and builds the replay
  :class:`Run` that :func:`validate` takes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, BinaryIO

from cpstore.errors import CanonicalEncodingError, InvalidInputError
from cpstore.native.canonical import encode_value
from cpstore.native.records import step_value
from cpstore.replay.cursor import ReplayCursor
from cpstore.replay.guards import LedgerGuard, PinnedObservations
from cpstore.replay.source import CheckpointSource
from cpstore.run.model import ReplayMode, Run
from cpstore.run.nodes import decision_node
from cpstore.run.writer import write_document

__all__ = ["ReplaySession"]


class ReplaySession:
    """One replay of a stored checkpoint: cursor, pinned reads, guard, and the result.

    Use it inside ``with store.read(checkpoint_id) as cp:``; :meth:`finish`
    builds the replay :class:`Run` (P) for :func:`validate`. Its cursor, reads and
    guard may be shared by the replay's threads (each call is one step under a lock);
    :meth:`finish` is a snapshot, for when they are done.
    """

    def __init__(
        self,
        cp: CheckpointSource,
        *,
        mode: ReplayMode = ReplayMode.STRICT,
        allow_unsealed: bool = False,
    ) -> None:
        self._cp = cp
        self.cursor = ReplayCursor.from_checkpoint(cp, mode=mode)
        """The token cursor."""
        self.observations = PinnedObservations(cp)
        """The pinned-observation reader."""
        self.guard = LedgerGuard.from_checkpoint(cp, allow_unsealed=allow_unsealed)
        """The ledger guard."""
        self._decisions: list[dict[str, Any]] = []
        self._harness: list[Any] = []

    def decision(self, step: int, node: str | Mapping[str, Any], /, **fields: Any) -> None:
        """Record a decision node the replay took; the recorder's signature exactly:
        ``decision(step, "select_tool", tool="search")`` or ``decision(step, {"node":
        "select_tool", "tool": "search"})`` make the same entry."""
        self._decisions.append(decision_node(step, node, fields))

    def harness_access(self, access: Any) -> None:
        """Record an access the replay harness itself made (seed 004): any canonical value
        (:class:`InvalidInputError` otherwise, here rather than at :meth:`finish`)."""
        try:
            encode_value(access)
        except CanonicalEncodingError as exc:
            raise InvalidInputError(
                "a harness access must be a canonical value",
                where="harness_access(access)",
                expected="None, bool, int, float, str, bytes, or lists and maps of them",
                got=exc.what,
            ) from None
        self._harness.append(access)

    def observe_live(self, step: int, source: str, payload: bytes) -> None:
        """Record a read this replay made live (unpinned): validation will report it."""
        self.observations.record_live(step, source, payload)

    def write(
        self,
        out: BinaryIO | str | os.PathLike[str],
        state_digest: str,
        *,
        transcript_digest: str | None = None,
        step: int | None = None,
        encoding: str = "cprun",
    ) -> int:
        """Write the replay (:meth:`finish`'s run) to a binary stream or a path; returns
        bytes written.

        ``write_document(self.finish(state_digest, ...), out, encoding=encoding)``: a path
        is written through a temporary file renamed only once complete, a failed write
        on a seekable stream is taken back (:func:`cpstore.run.writer.write_document`).
        ``cprun`` (the default) writes the packed records as they are, so a
        replay validated in another process needs no document at all:
        ``validate(cp_id, load_document(path), store=store)``.
        """
        run = self.finish(state_digest, transcript_digest=transcript_digest, step=step)
        return write_document(run, out, encoding=encoding)

    def finish(
        self, state_digest: str, *, transcript_digest: str | None = None, step: int | None = None
    ) -> Run:
        """The replay as a :class:`Run`, ready for :func:`validate`.

        ``state_digest`` is the replayed post-state's digest, as
        :func:`cpstore.state_digest` computes it from the state. ``step`` is the step
        the replay reached, as the runtime counts it: a step other than the checkpoint's
        is a STEP_MISMATCH (REJECT); omitted, the checkpoint's step is taken (a runtime
        that does not count steps; audit68: it was always taken, so STEP_MISMATCH could
        not fire through a session). The run is tagged
        ``replay:<checkpoint id>``: validated as the *recording* of a later replay it
        is a REPLAY_OF_REPLAY (seed 004's recursion guard); as P against another stored
        checkpoint it is a CHECKPOINT_MISMATCH (QUARANTINE: a replay is evidence only
        about the checkpoint it replayed).
        """
        if not isinstance(state_digest, str):
            raise InvalidInputError(
                "finish takes the replayed state's digest, not the state",
                where="finish(state_digest)",
                expected="session.finish(cpstore.state_digest(state))",
                got=type(state_digest).__name__,
            )
        # Judged by its value, as every step is (review83: its own comparisons were asked,
        # and 2**63 passed here to be refused by Run as a DocumentError at "step").
        reached = None if step is None else step_value(step)
        if step is not None and reached is None:
            raise InvalidInputError(
                "step must be an int in [0, 2**63) (the step the replay reached) or None",
                where="finish(step)",
                got=step,
            )
        man = self._cp.manifest
        return Run(
            man.run_id,
            man.step if reached is None else reached,
            state_digest,
            tokens=self.cursor.replayed(),
            observations=self.observations.observations,
            call_graph=tuple(self._decisions),
            transcript_digest=transcript_digest,
            effects=self.guard.attempted,
            harness_accesses=tuple(self._harness),
            # A replay is marked as one, so it can never pass as a recording (audit43:
            # untagged, a replay used as R was at most a releasable QUARANTINE).
            provenance_tags=(f"replay:{self._cp.id}",),
            mode=self.cursor.mode,
        )
