"""What differs between two checkpoints (or run documents): the engine of ``cpstore diff``.

A diff compares *content*; it is not a replay validation. It runs the decision
table's comparisons (:func:`~cpstore.decision.validate.validate`, never
recorded) and keeps only the findings that say the two sides differ
(:data:`DIFF_CODES`); findings about one side's own qualities (replay mode,
an unsealed ledger, unpinned reads, harness accesses, provenance tags) are
not differences, so ``diff X X`` finds nothing. Where both sides are stored
checkpoints, a state difference is broken down into the state parts that
differ. Reusable by other front ends (a LangGraph thread diff) through
:func:`diff`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cpstore.decision.table import Finding, FindingCode
from cpstore.decision.validate import RunSource, validate
from cpstore.errors import CpstoreError, IntegrityError, NotFoundError
from cpstore.store.facade import Store

__all__ = ["DIFF_CODES", "Diff", "PartDiff", "diff"]

#: Finding codes that mean "the two sides differ" (the rest describe one side).
DIFF_CODES = frozenset(
    {
        FindingCode.RUN_MISMATCH,
        FindingCode.STEP_MISMATCH,
        FindingCode.STATE_MISMATCH,
        FindingCode.TOKEN_MISMATCH,
        FindingCode.TOKEN_COUNT,
        FindingCode.TOKEN_SEQUENCE,
        FindingCode.CALL_GRAPH_MISMATCH,
        FindingCode.OBSERVATION_MISMATCH,
        FindingCode.UNRECORDED_EFFECT,
        FindingCode.TRANSCRIPT_MISMATCH,
    }
)


@dataclass(frozen=True)
class PartDiff:
    """One state part that differs between the two checkpoints."""

    name: str
    """The part's name."""
    expected: str | None
    """Its digest on side A (None: A has no such part)."""
    observed: str | None
    """Its digest on side B (None: B has no such part)."""
    expected_value: Any = None
    """Its decoded value on side A (None when absent)."""
    observed_value: Any = None
    """Its decoded value on side B (None when absent)."""


@dataclass(frozen=True)
class Diff:
    """What differs between A (expected) and B (observed)."""

    a: str
    """Side A as named (a checkpoint id or a document)."""
    b: str
    """Side B as named."""
    findings: tuple[Finding, ...]
    """Every difference, in the decision table's order (first per stream first)."""
    state_parts: tuple[PartDiff, ...]
    """The state parts that differ (stored checkpoints only; () otherwise)."""

    @property
    def differs(self) -> bool:
        """True when the sides differ anywhere."""
        return bool(self.findings)

    def first_per_stream(self) -> dict[str, Finding]:
        """The first difference of each stream."""
        out: dict[str, Finding] = {}
        for f in self.findings:
            out.setdefault(f.stream, f)
        return out


def _refuse_missing(store: Store, source: str) -> None:
    """A side that names no stored checkpoint (pruned, never stored) is NotFoundError:
    validate's fail-closed INTEGRITY finding for it is no damage to report."""
    try:
        store.manifest(source, verify=False)
    except NotFoundError:
        raise
    except CpstoreError:
        pass  # not a checkpoint id (a document's path), or damaged: the finding stands


def diff(a: RunSource, b: RunSource, *, store: Store | None = None, verify: bool = True) -> Diff:
    """The differences between ``a`` and ``b`` (checkpoint ids need ``store``).

    Damage that stops either side being read is an :class:`IntegrityError`
    (a diff of unreadable data would be a guess), never a difference; a checkpoint id
    the store does not hold (pruned, never stored) is :class:`NotFoundError`.
    """
    decision = validate(a, b, store=store, record=False, verify=verify)
    damaged = [f for f in decision.findings if f.code is FindingCode.INTEGRITY]
    for label, source in (("recorded", a), ("replayed", b)):
        if store is not None and isinstance(source, str) and any(f.side == label for f in damaged):
            _refuse_missing(store, source)
    if damaged:
        raise IntegrityError(
            "cannot diff: stored data is damaged", where=damaged[0].side, got=damaged[0].message
        )
    findings = tuple(f for f in decision.findings if f.code in DIFF_CODES)
    parts: tuple[PartDiff, ...] = ()
    if (
        store is not None
        and any(f.code is FindingCode.STATE_MISMATCH for f in findings)
        and decision.recorded.checkpoint_id is not None
        and decision.replayed.checkpoint_id is not None
    ):
        parts = _part_diffs(store, decision.recorded.checkpoint_id, decision.replayed.checkpoint_id)
    return Diff(
        str(decision.recorded.checkpoint_id or a),
        str(decision.replayed.checkpoint_id or b),
        findings,
        parts,
    )


def _part_diffs(store: Store, a: str, b: str) -> tuple[PartDiff, ...]:
    with store.read(a) as ca, store.read(b) as cb:
        pa, pb = ca.manifest.state_parts, cb.manifest.state_parts
        out = []
        for name in sorted(set(pa) | set(pb)):
            da, db = pa.get(name), pb.get(name)
            if da == db:
                continue
            out.append(
                PartDiff(
                    name,
                    da,
                    db,
                    None if da is None else ca.state_part(name),
                    None if db is None else cb.state_part(name),
                )
            )
    return tuple(out)
