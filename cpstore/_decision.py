"""The decision table (docs/decision-table.md): validate a replay against its recording.

:func:`validate` compares a recorded run R with a replay P stream by stream,
lists *every* finding (not just the first problem, unlike the seeds'
sketches), and ends in exactly one :class:`Verdict`: the worst level over the
findings. Token streams are compared whole, in one native call over the
packed buffers (zero-copy from LMDB when R is a stored checkpoint). With a
store, every decision is appended to the store's hash-chained audit log, and
the gates (:mod:`cpstore._gates`) act only on decisions found there.

A failed validation is data, not an exception: ``raise_on_failure=True`` (or
:meth:`Decision.raise_for_verdict`) opts in to raising. Errors in the *inputs*
(a malformed document, a bad argument) always raise; damage to what R
references in the store is a finding (INTEGRITY), never an exception.
"""

from __future__ import annotations

import enum
import os
import re
import secrets
import struct
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace
from typing import Any, Union

from ._canonical import encode_value
from ._document import (
    Effect,
    Observation,
    ReplayMode,
    Run,
    TokenInfo,
    load_document,
    parse_document,
)
from ._errors import (
    CpstoreError,
    IntegrityError,
    InvalidInputError,
    NotFoundError,
    RecordFormatError,
    ValidationFailedError,
)
from ._native import digest, first_divergence, scan_tokens
from ._records import RECORD_SIZE, DivergenceKind, RecordType, kind_name, unpack_token

__all__ = [
    "AUDIT_DECISION",
    "FINDING_RULES",
    "Decision",
    "Fidelity",
    "Finding",
    "FindingCode",
    "RecordingGap",
    "Subject",
    "Verdict",
    "validate",
    "verdict_for",
]

#: Audit-log kind of a recorded decision.
AUDIT_DECISION = "decision"

_TOKEN_SIZE = RECORD_SIZE[RecordType.TOKEN]
_CHECKPOINT_ID = re.compile(r"[0-9a-f]{32}")
_TOKEN_FIELDS = ("seq", "kind", "value")

#: What :func:`validate` accepts for R or P.
RunSource = Union[Run, Mapping[str, Any], str, "os.PathLike[str]", bytes]


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
    """Harness perturbation, or a call-graph divergence hidden by an equal transcript."""
    DIVERGENT_CAUSAL = "DIVERGENT_CAUSAL"
    """Call graph and transcript both differ: the recording is insufficient."""
    UNVERIFIED = "UNVERIFIED"
    """Some other finding: not shown faithful, not one of seed 004's divergence classes."""


class FindingCode(str, enum.Enum):
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
    FindingCode.UNPINNED_OBSERVATION: (_Q, True),
    FindingCode.LIVE_RESOLUTION: (_Q, True),
    FindingCode.BEST_EFFORT: (_Q, True),
    FindingCode.TOKEN_SEQUENCE: (_Q, True),
    FindingCode.LEDGER_UNSEALED: (_Q, True),
    FindingCode.UNRECORDED_EFFECT: (_Q, True),
    FindingCode.HARNESS_PERTURBATION: (_Q, True),
    FindingCode.TRANSCRIPT_MISMATCH: (_Q, True),
}


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
            "expected": self.expected,
            "observed": self.observed,
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

    @property
    def evidence(self) -> bool:
        """True only for ACCEPT: anything else is at most a hypothesis."""
        return self.verdict is Verdict.ACCEPT

    @property
    def standing(self) -> str:
        """``"evidence"`` or ``"hypothesis"``, as the decision may be cited."""
        return "evidence" if self.evidence else "hypothesis"

    @property
    def releasable(self) -> bool:
        """A non-ACCEPT decision whose findings an operator sign-off can all release."""
        return not self.evidence and all(f.releasable for f in self.findings)

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
        if self.evidence:
            return
        first = self.findings[0] if self.findings else None
        err = ValidationFailedError(
            f"replay validation ended in {self.verdict.name}",
            where=None if first is None else f"{first.stream} {first.unit} {first.position}",
            expected="ACCEPT",
            got=", ".join(sorted({f.code.value for f in self.findings})),
        )
        err.decision = self
        raise err

    def to_dict(self) -> dict[str, Any]:
        """Plain data (canonical-encodable): the audit body and the CLI's ``--json``."""
        return {
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


# -- one side of a validation ---------------------------------------------------


@dataclass
class _Side:
    """R or P normalised: the shape both run documents and checkpoints map to."""

    label: str
    run_id: str
    step: int
    state_digest: str
    tokens: memoryview
    token_info: Callable[[int], TokenInfo]
    kind_names: Mapping[int, str]
    observations: Sequence[Observation]
    call_graph: Sequence[Mapping[str, Any]]
    transcript_digest: str | None
    effects: Sequence[Effect]
    ledger_sealed: bool
    harness_accesses: Sequence[Any]
    provenance_tags: Sequence[str]
    mode: ReplayMode | None
    checkpoint_id: str | None = None
    branch: str | None = None
    from_store: bool = False
    integrity: Sequence[Finding] = ()

    def subject(self) -> Subject:
        return Subject(
            self.run_id,
            self.step,
            self.checkpoint_id,
            self.branch,
            self.tokens.nbytes // _TOKEN_SIZE,
        )


def _side_from_run(run: Run, label: str) -> _Side:
    return _Side(
        label=label,
        run_id=run.run_id,
        step=run.step,
        state_digest=run.state_digest,
        tokens=run.tokens.view(),
        token_info=run.tokens.info,
        kind_names=run.tokens.kind_names,
        observations=run.observations,
        call_graph=run.call_graph,
        transcript_digest=run.transcript_digest,
        effects=run.effects,
        ledger_sealed=run.ledger_sealed,
        harness_accesses=run.harness_accesses,
        provenance_tags=run.provenance_tags,
        mode=run.mode,
    )


def _store_token_info(cp: Any, view: memoryview) -> Callable[[int], TokenInfo]:
    def info(index: int) -> TokenInfo:
        seq, code, prov, dig = unpack_token(
            bytes(view[index * _TOKEN_SIZE : (index + 1) * _TOKEN_SIZE])
        )
        pname = {1: "recorded", 2: "live"}.get(int(prov), f"invalid#{int(prov)}")
        try:
            _, kind, _, value = cp.token(index)
            return TokenInfo(seq, str(kind), pname, dig.hex(), value, True)
        except CpstoreError:
            return TokenInfo(seq, kind_name(code) or f"kind#{code}", pname, dig.hex())

    return info


#: Streams a store problem can be located in (the field after the checkpoint id).
_STORE_STREAMS = frozenset(
    ("state", "tokens", "observations", "call_graph", "effects", "harness", "transcript")
)


def _integrity_finding(problem: Any, label: str) -> Finding:
    """An INTEGRITY finding for one problem :meth:`Store.verify_checkpoint` reported."""
    field = problem.where.partition(".")[2]
    stream = field[: len(field) - len(field.lstrip("abcdefghijklmnopqrstuvwxyz_"))]
    position = problem.position
    return Finding(
        FindingCode.INTEGRITY,
        stream if stream in _STORE_STREAMS else "integrity",
        label,
        position,
        "" if position is None else "index",
        _canonical_or_repr(problem.expected),
        _canonical_or_repr(problem.got),
        f"{label} checkpoint: {problem.what} at {problem.where}",
    )


class _DamagedSideError(Exception):
    """The side could not be built; the integrity findings found first travel with it."""

    def __init__(self, findings: list[Finding]) -> None:
        super().__init__()
        self.findings = findings


def _side_from_store(
    stack: ExitStack, store: Any, checkpoint_id: str, label: str, verify: bool
) -> _Side:
    cp = stack.enter_context(store.read(checkpoint_id, verify=verify))
    view = memoryview(cp._token_records()).cast("B")  # zero-copy: used inside the block
    # Re-hash everything R names only by digest, in this read txn (the records
    # blob was just checked by _token_records() and is not hashed again). Token value
    # digests are not re-derived one by one: the values and offsets objects
    # are re-hashed whole, and the verified manifest names them.
    integrity = (
        [_integrity_finding(p, label) for p in cp.verify_objects(derive_tokens=False)]
        if verify
        else []
    )
    try:
        return _fill_side(cp, view, label, integrity)
    except (NotFoundError, IntegrityError) as exc:
        if not integrity:
            raise
        raise _DamagedSideError(integrity) from exc


def _fill_side(cp: Any, view: memoryview, label: str, integrity: list[Finding]) -> _Side:
    man = cp.manifest
    log = man.raw.get("tokens") if isinstance(man.raw, Mapping) else None
    kinds = log.get("kinds") if isinstance(log, Mapping) else None
    return _Side(
        label=label,
        run_id=man.run_id,
        step=man.step,
        state_digest=man.state_digest,
        tokens=view,
        token_info=_store_token_info(cp, view),
        kind_names=(
            {k: v for k, v in kinds.items() if isinstance(k, int)}
            if isinstance(kinds, Mapping)
            else {}
        ),
        observations=[Observation(s, src, d, p) for s, src, d, p in cp.observations()],
        call_graph=list(cp.call_graph()),
        transcript_digest=man.transcript_digest,
        effects=[Effect(s, t, d) for s, t, d in cp.effects()],
        ledger_sealed=bool(man.ledger_sealed),
        harness_accesses=list(cp.harness_accesses()),
        provenance_tags=tuple(man.provenance_tags),
        # A stored checkpoint records how a run executed, never how a replay
        # resolved its tokens: its mode is undeclared, whatever its user
        # metadata says (metadata is the caller's, not the replay's).
        mode=None,
        checkpoint_id=man.id,
        branch=man.branch,
        from_store=True,
        integrity=integrity,
    )


def _checkpoint_ref(source: object, store: Any) -> str | None:
    """``source`` when it names a checkpoint: a str that is exactly a checkpoint id.

    Such a str is always an id, never a path: which recording is validated
    must not depend on what files the working directory holds. A document
    whose file name looks like an id is passed as ``Path(name)`` or ``./name``.
    """
    if not isinstance(source, str) or not _CHECKPOINT_ID.fullmatch(source):
        return None
    if store is None:
        raise InvalidInputError(
            "a checkpoint id needs a store (store= or --store); "
            "for a document file named like an id, pass ./NAME",
            got=source,
        )
    return source


def _load_side(
    stack: ExitStack, source: object, label: str, store: Any, verify: bool
) -> tuple[_Side | None, list[Finding]]:
    """The side, or (None, INTEGRITY findings) when the store cannot give it."""
    if isinstance(source, Run):
        return _side_from_run(source, label), []
    if isinstance(source, Mapping):
        return _side_from_run(parse_document(source), label), []
    if isinstance(source, (bytes, bytearray, memoryview)):
        return _side_from_run(load_document(source), label), []
    ref = _checkpoint_ref(source, store)
    if ref is not None:
        try:
            return _side_from_store(stack, store, ref, label, verify), []
        except _DamagedSideError as exc:
            return None, exc.findings
        except (NotFoundError, IntegrityError) as exc:
            return None, [
                Finding(
                    FindingCode.INTEGRITY,
                    "integrity",
                    label,
                    None,
                    "",
                    "readable and verified",
                    str(exc),
                    f"{label} checkpoint {source} cannot be read: {exc}",
                )
            ]
    if isinstance(source, (str, os.PathLike)):
        return _side_from_run(load_document(source), label), []
    raise InvalidInputError(
        f"{label} must be a Run, a run document (mapping, bytes or path) or a checkpoint id",
        got=type(source).__name__,
    )


# -- the checks, one per stream -------------------------------------------------


def _token_dict(info: TokenInfo) -> dict[str, Any]:
    out: dict[str, Any] = {"seq": info.seq, "kind": info.kind, "provenance": info.provenance}
    if info.has_value:
        out["value"] = info.value
    out["value_digest"] = info.value_digest
    return out


def _canonical_or_repr(value: Any) -> Any:
    try:
        encode_value(value)
        return value
    except CpstoreError:
        return repr(value)


def _check_tokens(r: _Side, p: _Side, out: list[Finding]) -> None:
    scans = {}
    for side in (r, p):
        scan = scan_tokens(side.tokens)
        if scan.first_malformed is not None:
            where = f"{side.label}.tokens[{scan.first_malformed}]"
            if not side.from_store:
                raise RecordFormatError(
                    "malformed token record (kind 0, unknown provenance or reserved bytes set)",
                    where=where,
                )
            out.append(
                Finding(
                    FindingCode.INTEGRITY,
                    "tokens",
                    side.label,
                    scan.first_malformed,
                    "index",
                    "a well-formed token record",
                    "malformed",
                    f"stored token record {where} is malformed",
                )
            )
        scans[side.label] = scan
    div = first_divergence(RecordType.TOKEN, r.tokens, p.tokens, fields=_TOKEN_FIELDS)
    index = div.index if div.kind is DivergenceKind.RECORD else None
    fields = div.fields
    limit = min(div.count_a, div.count_b) if index is None else index
    # The kernel compares kind *codes*; a hashed code is 31 bits of a name's
    # hash, so equal codes prove nothing until the names behind them agree.
    renamed = _kind_name_divergence(r, p, limit)
    if renamed is not None:
        index, fields = renamed, ("kind",)
    if index is not None:
        ri, pi = r.token_info(index), p.token_info(index)
        out.append(
            Finding(
                FindingCode.TOKEN_MISMATCH,
                "tokens",
                "both",
                ri.seq,
                "seq",
                _canonical_or_repr(_token_dict(ri)),
                _canonical_or_repr(_token_dict(pi)),
                f"token {index} differs in {', '.join(fields)}: recorded {ri.kind} "
                f"{_short(ri)} vs replayed {pi.kind} {_short(pi)}",
            )
        )
    if div.count_a != div.count_b:
        more = "more" if div.count_b > div.count_a else "fewer"
        out.append(
            Finding(
                FindingCode.TOKEN_COUNT,
                "tokens",
                "both",
                min(div.count_a, div.count_b),
                "index",
                div.count_a,
                div.count_b,
                f"replay consumed {div.count_b} tokens, {more} than the {div.count_a} recorded",
            )
        )
    for side in (r, p):
        scan = scans[side.label]
        if scan.first_live is not None:
            info = side.token_info(scan.first_live)
            out.append(
                Finding(
                    FindingCode.LIVE_RESOLUTION,
                    "tokens",
                    side.label,
                    info.seq,
                    "seq",
                    "recorded",
                    info.provenance,
                    f"{side.label} token seq={info.seq} kind={info.kind} was resolved from a live "
                    f"source ({scan.live_count} such tokens)",
                    scan.live_count,
                )
            )
    rscan = scans[r.label]
    if rscan.first_seq_break is not None:
        info = r.token_info(rscan.first_seq_break)
        out.append(
            Finding(
                FindingCode.TOKEN_SEQUENCE,
                "tokens",
                "recorded",
                rscan.first_seq_break,
                "index",
                rscan.first_seq_break,
                info.seq,
                f"recorded token {rscan.first_seq_break} has seq {info.seq}; "
                "seqs must be 0, 1, 2, ...",
            )
        )


_HASHED_KIND = 0x80000000
_KIND_FIELD = struct.Struct("<8xI20x")


def _kind_column(tokens: memoryview, limit: int) -> Sequence[int]:
    """The kind code of each of the first ``limit`` token records."""
    if sys.byteorder == "little":
        return tokens[: limit * _TOKEN_SIZE].cast("I")[2::8]
    return [c for (c,) in _KIND_FIELD.iter_unpack(tokens[: limit * _TOKEN_SIZE])]


def _kind_name_divergence(r: _Side, p: _Side, limit: int) -> int | None:
    """First token before ``limit`` whose equal hashed kind code stands for different names.

    Before ``limit`` the records are equal field by field, so only R's codes
    are read. A stored R names every hashed code it uses (its recorder's kind
    table refuses two names with one code); any other R is scanned, and a
    hashed code it does not name is bad input. A code P does not name, or
    names differently, is not proven the same kind: a TOKEN_MISMATCH.
    """
    if r.from_store:
        used: Sequence[int] | set[int] = [c for c in r.kind_names if c & _HASHED_KIND]
    else:
        count = r.tokens.nbytes // _TOKEN_SIZE
        used = {c for c in _kind_column(r.tokens, count) if c & _HASHED_KIND}
        unnamed = sorted(c for c in used if c not in r.kind_names)
        if unnamed:
            raise InvalidInputError(
                "a hashed token kind code has no name; kind identity cannot rest on a hash",
                where=f"{r.label}.tokens.kind_names",
                expected="a name for every hashed code used",
                got=f"0x{unnamed[0]:08x}",
            )
    suspect = {c for c in used if p.kind_names.get(c) != r.kind_names.get(c)}
    if not suspect or limit == 0:
        return None
    for i, code in enumerate(_kind_column(r.tokens, limit)):
        if code in suspect:
            return i
    return None


def _short(info: TokenInfo) -> str:
    if info.has_value:
        text = repr(info.value)
        return text if len(text) <= 40 else text[:37] + "..."
    return f"#{info.value_digest[:12]}"


def _obs_key(o: Observation) -> list[Any]:
    return [o.step, o.source, o.payload_digest]


def _first_difference(a: Sequence[Any], b: Sequence[Any], key: Callable[[Any], Any]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if key(x) != key(y):
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _check_observations(r: _Side, p: _Side, out: list[Finding]) -> None:
    i = _first_difference(r.observations, p.observations, _obs_key)
    if i is not None:
        ro = r.observations[i] if i < len(r.observations) else None
        po = p.observations[i] if i < len(p.observations) else None
        step = (ro or po).step  # type: ignore[union-attr]  # one exists at a difference
        out.append(
            Finding(
                FindingCode.OBSERVATION_MISMATCH,
                "observations",
                "both",
                step,
                "step",
                None if ro is None else _obs_key(ro),
                None if po is None else _obs_key(po),
                f"observation {i} differs at step {step}: recorded "
                f"{'nothing' if ro is None else f'{ro.source}={ro.payload_digest}'} vs replayed "
                f"{'nothing' if po is None else f'{po.source}={po.payload_digest}'}",
            )
        )
    for side in (r, p):
        unpinned = [o for o in side.observations if o.pinned_at is None]
        if unpinned:
            first = unpinned[0]
            out.append(
                Finding(
                    FindingCode.UNPINNED_OBSERVATION,
                    "observations",
                    side.label,
                    first.step,
                    "step",
                    "pinned_at set",
                    None,
                    f"{side.label} observation {first.source} at step {first.step} was re-fetched, "
                    f"not pinned ({len(unpinned)} unpinned)",
                    len(unpinned),
                )
            )


def _node_bytes(node: Mapping[str, Any]) -> bytes:
    return encode_value(dict(node))


def _check_call_graph(r: _Side, p: _Side, out: list[Finding]) -> int | None:
    i = _first_difference(r.call_graph, p.call_graph, _node_bytes)
    if i is None:
        return None
    rn = r.call_graph[i] if i < len(r.call_graph) else None
    pn = p.call_graph[i] if i < len(p.call_graph) else None
    node = rn if rn is not None else pn
    step = int(node["step"]) if node is not None else 0
    out.append(
        Finding(
            FindingCode.CALL_GRAPH_MISMATCH,
            "call_graph",
            "both",
            i,
            "index",
            None if rn is None else _canonical_or_repr(dict(rn)),
            None if pn is None else _canonical_or_repr(dict(pn)),
            f"decision {i} (step {step}) differs: recorded "
            f"{'nothing' if rn is None else rn.get('node')!r} vs replayed "
            f"{'nothing' if pn is None else pn.get('node')!r}",
        )
    )
    return step


def _check_effects(r: _Side, p: _Side, out: list[Finding]) -> None:
    if not r.ledger_sealed:
        out.append(
            Finding(
                FindingCode.LEDGER_UNSEALED,
                "ledger",
                "recorded",
                None,
                "",
                True,
                False,
                "the recorded side-effect ledger was not sealed at checkpoint time",
            )
        )
    bad = [i for i, e in enumerate(p.effects) if i >= len(r.effects) or r.effects[i] != e]
    if bad:
        i = bad[0]
        e = p.effects[i]
        expected = (
            None
            if i >= len(r.effects)
            else [r.effects[i].seq, r.effects[i].target, r.effects[i].payload_digest]
        )
        out.append(
            Finding(
                FindingCode.UNRECORDED_EFFECT,
                "effects",
                "replayed",
                e.seq,
                "seq",
                expected,
                [e.seq, e.target, e.payload_digest],
                f"replay attempted effect seq={e.seq} on {e.target} that is not in the sealed "
                f"ledger at that position ({len(bad)} such effects)",
                len(bad),
            )
        )


def _check_identity(r: _Side, p: _Side, out: list[Finding]) -> None:
    # A replay is of one run and reaches the step of the checkpoint it
    # replays. The branch is not compared: a replay recorded on a fork of the
    # run is still a replay of that run.
    if r.run_id != p.run_id:
        out.append(
            Finding(
                FindingCode.RUN_MISMATCH,
                "identity",
                "both",
                None,
                "",
                r.run_id,
                p.run_id,
                f"replay is of run {p.run_id!r}, not the recorded run {r.run_id!r}",
            )
        )
    if r.step != p.step:
        out.append(
            Finding(
                FindingCode.STEP_MISMATCH,
                "identity",
                "both",
                p.step,
                "step",
                r.step,
                p.step,
                f"replay reached step {p.step}, not the recorded checkpoint's step {r.step}",
            )
        )


def _findings(r: _Side, p: _Side) -> tuple[list[Finding], int | None]:
    out: list[Finding] = [*r.integrity, *p.integrity]
    _check_identity(r, p, out)
    tags = [(i, t) for i, t in enumerate(r.provenance_tags) if t.startswith("replay:")]
    if tags:
        out.append(
            Finding(
                FindingCode.REPLAY_OF_REPLAY,
                "provenance",
                "recorded",
                tags[0][0],
                "index",
                "no replay: tag",
                tags[0][1],
                f"recorded run carries replay-provenance tag {tags[0][1]!r}: "
                "replay-of-replay is not evidence",
                len(tags),
            )
        )
    if r.state_digest != p.state_digest:
        out.append(
            Finding(
                FindingCode.STATE_MISMATCH,
                "state",
                "both",
                r.step,
                "step",
                r.state_digest,
                p.state_digest,
                f"post-state digest differs at step {r.step}",
            )
        )
    _check_tokens(r, p, out)
    cg_step = _check_call_graph(r, p, out)
    _check_observations(r, p, out)
    if p.mode is not ReplayMode.STRICT:
        observed = "undeclared" if p.mode is None else p.mode.value
        out.append(
            Finding(
                FindingCode.BEST_EFFORT,
                "mode",
                "replayed",
                None,
                "",
                "strict",
                observed,
                f"replay mode is {observed}, not strict: evidence of nothing",
            )
        )
    _check_effects(r, p, out)
    if p.harness_accesses:
        out.append(
            Finding(
                FindingCode.HARNESS_PERTURBATION,
                "harness",
                "replayed",
                0,
                "index",
                [],
                _canonical_or_repr(p.harness_accesses[0]),
                f"the replay harness made {len(p.harness_accesses)} access(es) of its own",
                len(p.harness_accesses),
            )
        )
    if r.transcript_digest != p.transcript_digest:
        out.append(
            Finding(
                FindingCode.TRANSCRIPT_MISMATCH,
                "transcript",
                "both",
                None,
                "",
                r.transcript_digest,
                p.transcript_digest,
                "transcript digest differs",
            )
        )
    order = list(FindingCode)
    out.sort(key=lambda f: order.index(f.code))
    return out, cg_step


def _fidelity(
    findings: Sequence[Finding], cg_step: int | None, r: _Side | None, p: _Side | None
) -> tuple[Fidelity, tuple[RecordingGap, ...]]:
    if not findings:
        return Fidelity.FAITHFUL, ()
    codes = {f.code for f in findings}
    cg = FindingCode.CALL_GRAPH_MISMATCH in codes
    tr = FindingCode.TRANSCRIPT_MISMATCH in codes
    if cg and tr and r is not None and p is not None and cg_step is not None:
        at = [o for o in (*r.observations, *p.observations) if o.step == cg_step]
        unpinned = tuple(sorted({o.source for o in at if o.pinned_at is None}))
        recorded = {o.source for o in r.observations if o.step == cg_step}
        unrecorded = tuple(
            sorted({o.source for o in p.observations if o.step == cg_step} - recorded)
        )
        return Fidelity.DIVERGENT_CAUSAL, (RecordingGap(cg_step, unpinned, unrecorded),)
    if FindingCode.HARNESS_PERTURBATION in codes or (cg and not tr):
        return Fidelity.DIVERGENT_PERTURBED, ()
    return Fidelity.UNVERIFIED, ()


def _empty_subject(source: object) -> Subject:
    cid = source if isinstance(source, str) else None
    return Subject("", 0, cid, None, 0)


def _decision_id(body: Mapping[str, Any]) -> str:
    return bytes(digest(encode_value(dict(body)))).hex()


def validate(
    recorded: RunSource,
    replayed: RunSource,
    *,
    store: Any = None,
    verify: bool = True,
    record: bool = True,
    raise_on_failure: bool = False,
) -> Decision:
    """Validate replay ``replayed`` (P) against recording ``recorded`` (R).

    Each of R and P is a :class:`Run`, a run-document mapping, the bytes or
    path of a run document, or (with ``store``) a checkpoint id; a str that is
    exactly 32 hex characters is always an id, never a path. Every finding
    is reported; the verdict is the worst level among them. With ``store`` and
    ``record`` (the default) the decision is appended to the store's audit
    log, and :attr:`Decision.audit_digest` names the record; the gates act
    only on recorded decisions. ``verify=False`` skips the store's
    verify-on-read, an explicit choice. ``raise_on_failure`` raises
    :class:`ValidationFailedError` for anything but ACCEPT.
    """
    if not isinstance(verify, bool) or not isinstance(record, bool):
        raise InvalidInputError("verify and record must be bools", got=(verify, record))
    with ExitStack() as stack:
        r, r_bad = _load_side(stack, recorded, "recorded", store, verify)
        p, p_bad = _load_side(stack, replayed, "replayed", store, verify)
        cg_step: int | None = None
        if r is None or p is None:
            findings = [*r_bad, *p_bad, *(r.integrity if r else ()), *(p.integrity if p else ())]
        else:
            try:
                findings, cg_step = _findings(r, p)
            except (NotFoundError, IntegrityError) as exc:
                # Lazy store reads (payloads, token values) can still find damage.
                findings = [
                    *r.integrity,
                    *p.integrity,
                    Finding(
                        FindingCode.INTEGRITY,
                        "integrity",
                        "recorded",
                        None,
                        "",
                        "readable and verified",
                        str(exc),
                        f"stored data cannot be read: {exc}",
                    )
                ]
        fidelity, gaps = _fidelity(findings, cg_step, r, p)
        r_subj = r.subject() if r is not None else _empty_subject(recorded)
        p_subj = p.subject() if p is not None else _empty_subject(replayed)
        mode = p.mode if p is not None else None
    created = time.time()
    verdict = verdict_for(findings)
    ident = _decision_id(
        {
            "recorded": r_subj.to_dict(),
            "replayed": p_subj.to_dict(),
            "verdict": verdict.name,
            "findings": [f.to_dict() for f in findings],
            "created_at": created,
            "nonce": secrets.token_bytes(16),
        }
    )
    decision = Decision(
        ident, verdict, fidelity, tuple(findings), gaps, r_subj, p_subj, mode, created
    )
    if store is not None and record:
        rec = store.append_audit(AUDIT_DECISION, decision.to_dict())
        decision = replace(decision, audit_digest=str(rec.digest))
    if raise_on_failure:
        decision.raise_for_verdict()
    return decision
