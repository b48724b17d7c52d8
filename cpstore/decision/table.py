"""The findings table: verdicts, fidelity, finding codes and their rules, and the Decision.

Pure data and its rules (docs/decision-table.md); :mod:`cpstore.decision.validate`
produces these, the gates and the store read them.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cpstore.errors import (
    ValidationFailedError,
)
from cpstore.native.binding import digest
from cpstore.native.canonical import MAX_DEPTH, encode_value
from cpstore.native.records import RECORD_SIZE, RecordType
from cpstore.run.model import ReplayMode

__all__ = [
    "AUDIT_DECISION",
    "FINDING_RULES",
    "FINDING_VALUE_DEPTH",
    "TOKEN_FIELDS",
    "TOKEN_SIZE",
    "Decision",
    "Fidelity",
    "Finding",
    "FindingCode",
    "RecordingGap",
    "Subject",
    "Verdict",
    "verdict_for",
]

#: Audit-log kind of a recorded decision.
AUDIT_DECISION = "decision"

#: Size of one packed token record.
TOKEN_SIZE = RECORD_SIZE[RecordType.TOKEN]
#: The fields a token finding shows, in order.
TOKEN_FIELDS = ("seq", "kind", "value")


class Verdict(enum.IntEnum):
    """The outcome of a validation; ordered so that ``max`` is the worst."""

    ACCEPT = 0
    """Every check passed: the replay is evidence."""
    QUARANTINE = 1
    """Unverified: a hypothesis only; resumable after an operator sign-off."""
    REJECT = 2
    """Divergent or damaged."""

    def __str__(self) -> str:
        return self.name


class Fidelity(enum.Enum):
    """Seed 004's classification, reported beside the verdict."""

    FAITHFUL = "FAITHFUL"
    """No finding at all."""
    DIVERGENT_PERTURBED = "DIVERGENT_PERTURBED"
    """Harness perturbation, or a call-graph divergence hidden by an equal recorded transcript."""
    DIVERGENT_CAUSAL = "DIVERGENT_CAUSAL"
    """Call graph and transcript both differ: the recording is insufficient."""
    UNVERIFIED = "UNVERIFIED"
    """Some other finding: not shown faithful, not one of seed 004's divergence classes."""

    def __str__(self) -> str:
        return self.value  # as str(Verdict.X) prints the bare name


class FindingCode(str, enum.Enum):  # noqa: UP042 - StrEnum would change str() of every code in printed output
    """Codes of the decision table, one per row."""

    INTEGRITY = "INTEGRITY"
    RUN_MISMATCH = "RUN_MISMATCH"
    STEP_MISMATCH = "STEP_MISMATCH"
    REPLAY_OF_REPLAY = "REPLAY_OF_REPLAY"
    STATE_MISMATCH = "STATE_MISMATCH"
    TOKEN_MISMATCH = "TOKEN_MISMATCH"
    TOKEN_COUNT = "TOKEN_COUNT"
    CALL_GRAPH_MISMATCH = "CALL_GRAPH_MISMATCH"
    OBSERVATION_MISMATCH = "OBSERVATION_MISMATCH"
    CHECKPOINT_MISMATCH = "CHECKPOINT_MISMATCH"
    UNPINNED_OBSERVATION = "UNPINNED_OBSERVATION"
    LIVE_RESOLUTION = "LIVE_RESOLUTION"
    BEST_EFFORT = "BEST_EFFORT"
    TOKEN_SEQUENCE = "TOKEN_SEQUENCE"
    LEDGER_UNSEALED = "LEDGER_UNSEALED"
    UNRECORDED_EFFECT = "UNRECORDED_EFFECT"
    HARNESS_PERTURBATION = "HARNESS_PERTURBATION"
    TRANSCRIPT_MISMATCH = "TRANSCRIPT_MISMATCH"


_R, _Q, _A = Verdict.REJECT, Verdict.QUARANTINE, Verdict.ACCEPT

#: The table: each code's level and whether an operator sign-off can release it.
FINDING_RULES: Mapping[FindingCode, tuple[Verdict, bool]] = {
    FindingCode.INTEGRITY: (_R, False),
    FindingCode.RUN_MISMATCH: (_R, False),
    FindingCode.STEP_MISMATCH: (_R, False),
    FindingCode.REPLAY_OF_REPLAY: (_R, False),
    FindingCode.STATE_MISMATCH: (_R, False),
    FindingCode.TOKEN_MISMATCH: (_R, False),
    FindingCode.TOKEN_COUNT: (_R, False),
    FindingCode.CALL_GRAPH_MISMATCH: (_R, False),
    FindingCode.OBSERVATION_MISMATCH: (_R, True),
    FindingCode.CHECKPOINT_MISMATCH: (_Q, True),
    FindingCode.UNPINNED_OBSERVATION: (_Q, True),
    FindingCode.LIVE_RESOLUTION: (_Q, True),
    FindingCode.BEST_EFFORT: (_Q, True),
    FindingCode.TOKEN_SEQUENCE: (_Q, True),
    FindingCode.LEDGER_UNSEALED: (_Q, True),
    FindingCode.UNRECORDED_EFFECT: (_Q, True),
    FindingCode.HARNESS_PERTURBATION: (_Q, True),
    FindingCode.TRANSCRIPT_MISMATCH: (_Q, True),
}


#: Containers a finding's ``expected`` or ``observed`` may nest in its plain data: the
#: decision's audit record holds it four containers down (record, body, findings, the
#: finding) and canonical encoding stops at :data:`MAX_DEPTH`.
FINDING_VALUE_DEPTH = MAX_DEPTH - 4


def _nests_past(value: Any, limit: int) -> bool:
    """Whether ``value`` nests more than ``limit`` lists, tuples and maps (itself
    counted), walked without recursion."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if not isinstance(item, (dict, list, tuple)):
            continue
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children)
    return False


def _plain(value: Any) -> Any:
    """``value`` as a finding's plain data shows it: itself, or, nested past
    :data:`FINDING_VALUE_DEPTH` (a call-graph node or token value at a run's depth limit),
    its canonical digest, so the decision can still be recorded (left86's xfail)."""
    if not _nests_past(value, FINDING_VALUE_DEPTH):
        return value
    return {"nested_too_deeply": True, "digest": bytes(digest(encode_value(value))).hex()}


@dataclass(frozen=True)
class Finding:
    """One row of the table that fired, located in its stream."""

    code: FindingCode
    """The table row."""
    stream: str
    """``identity``, ``state``, ``tokens``, ``observations``, ``call_graph``,
    ``transcript``, ``effects``, ``ledger``, ``harness``, ``mode``, ``provenance``
    or ``integrity``."""
    side: str
    """Whose data shows it: ``recorded``, ``replayed`` or ``both`` (a comparison)."""
    position: int | None
    """Where: a seq, step or index (see :attr:`unit`); None when not positional."""
    unit: str
    """What :attr:`position` counts: ``seq``, ``step``, ``index`` or ``""``."""
    expected: Any
    """What R says (or what the rule requires) at that position."""
    observed: Any
    """What P (or R, for a rule about R) has there."""
    message: str
    """One readable sentence."""
    count: int = 1
    """How many positions show this finding (only the first is located)."""

    @property
    def level(self) -> Verdict:
        """The verdict this finding forces at least."""
        return FINDING_RULES[self.code][0]

    @property
    def releasable(self) -> bool:
        """Whether an operator sign-off can release it for a resume."""
        return FINDING_RULES[self.code][1]

    def to_dict(self) -> dict[str, Any]:
        """Plain data (canonical-encodable) for the audit log and ``--json``."""
        return {
            "code": self.code.value,
            "level": self.level.name,
            "releasable": self.releasable,
            "stream": self.stream,
            "side": self.side,
            "position": self.position,
            "unit": self.unit,
            "expected": _plain(self.expected),
            "observed": _plain(self.observed),
            "message": self.message,
            "count": self.count,
        }


@dataclass(frozen=True)
class RecordingGap:
    """Seed 004's recording-gap report for a DIVERGENT_CAUSAL replay."""

    step: int
    """The step where the call graph first diverges."""
    unpinned_sources: tuple[str, ...]
    """Sources read at that step without a pin (in R or P): re-fetched, unprovable."""
    unrecorded_sources: tuple[str, ...]
    """Sources P read at that step that R never recorded there."""

    def to_dict(self) -> dict[str, Any]:
        """Plain data for the audit log and ``--json``."""
        return {
            "step": self.step,
            "unpinned_sources": list(self.unpinned_sources),
            "unrecorded_sources": list(self.unrecorded_sources),
        }


@dataclass(frozen=True)
class Subject:
    """Which run one side of a validation was."""

    run_id: str
    """The run id."""
    step: int
    """Checkpoint step (R) or the step the replay reached (P)."""
    checkpoint_id: str | None
    """The stored checkpoint, or None for a run document."""
    branch: str | None
    """The branch of a stored checkpoint."""
    token_count: int
    """Tokens in the stream (0 when it could not be read)."""

    def to_dict(self) -> dict[str, Any]:
        """Plain data for the audit log and ``--json``."""
        return {
            "run_id": self.run_id,
            "step": self.step,
            "checkpoint_id": self.checkpoint_id,
            "branch": self.branch,
            "token_count": self.token_count,
        }


def verdict_for(findings: Sequence[Finding]) -> Verdict:
    """The verdict a set of findings forces: the maximum level, ACCEPT for none."""
    return max((f.level for f in findings), default=Verdict.ACCEPT)


@dataclass(frozen=True)
class Decision:
    """The result of one validation: a verdict, all findings, and where it was recorded."""

    id: str
    """Decision id (32 hex characters), unique per validation."""
    verdict: Verdict
    """ACCEPT, QUARANTINE or REJECT: the worst level over :attr:`findings`."""
    fidelity: Fidelity
    """Seed 004's classification."""
    findings: tuple[Finding, ...]
    """Every finding, in table order."""
    recording_gaps: tuple[RecordingGap, ...]
    """Recording-gap reports (DIVERGENT_CAUSAL only)."""
    recorded: Subject
    """R."""
    replayed: Subject
    """P."""
    mode: ReplayMode | None
    """How P resolved its tokens; None when it did not say."""
    created_at: float
    """Wall-clock time of the decision (seconds since the epoch)."""
    audit_digest: str | None = None
    """Digest of the audit record holding this decision, when one was written."""
    verified: bool = True
    """False when ``validate(verify=False)`` read a side from the store: nothing proved it."""

    @property
    def evidence(self) -> bool:
        """True only for a :attr:`verified` ACCEPT: anything else is at most a hypothesis."""
        return self.verdict is Verdict.ACCEPT and self.verified

    @property
    def standing(self) -> str:
        """``"evidence"`` or ``"hypothesis"``, as the decision may be cited."""
        return "evidence" if self.evidence else "hypothesis"

    @property
    def releasable(self) -> bool:
        """A non-ACCEPT decision whose findings an operator sign-off can all release."""
        return self.verdict is not Verdict.ACCEPT and all(f.releasable for f in self.findings)

    @property
    def codes(self) -> frozenset[FindingCode]:
        """The codes of the findings."""
        return frozenset(f.code for f in self.findings)

    @property
    def divergences(self) -> Mapping[str, Finding]:
        """The first finding of each stream (first divergence per stream)."""
        out: dict[str, Finding] = {}
        for f in self.findings:
            out.setdefault(f.stream, f)
        return out

    def raise_for_verdict(self) -> None:
        """Raise :class:`ValidationFailedError` unless the verdict is ACCEPT."""
        if self.verdict is Verdict.ACCEPT:
            return
        first = self.findings[0] if self.findings else None
        where = None if first is None else first.stream
        if first is not None and first.position is not None:
            where = " ".join(str(p) for p in (first.stream, first.unit, first.position) if p != "")
        err = ValidationFailedError(
            f"replay validation ended in {self.verdict.name}",
            where=where,
            expected="ACCEPT",
            got=", ".join(sorted({f.code.value for f in self.findings})),
        )
        err.decision = self
        raise err

    def to_dict(self) -> dict[str, Any]:
        """Plain data (canonical-encodable): the audit body and the CLI's ``--json``
        (``"verified": false`` only for an unverified one, which is never recorded)."""
        out: dict[str, Any] = {
            "decision_id": self.id,
            "verdict": self.verdict.name,
            "fidelity": self.fidelity.value,
            "standing": self.standing,
            "releasable": self.releasable,
            "mode": None if self.mode is None else self.mode.value,
            "recorded": self.recorded.to_dict(),
            "replayed": self.replayed.to_dict(),
            "findings": [f.to_dict() for f in self.findings],
            "recording_gaps": [g.to_dict() for g in self.recording_gaps],
            "created_at": self.created_at,
        }
        if not self.verified:
            out["verified"] = False
        return out
