"""The two sides of a validation: R and P loaded from a run document or a stored checkpoint.

Both map to one :class:`Side`; damage to what a stored side references
becomes INTEGRITY findings, never an exception.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, Union

from cpstore.decision.ports import CheckpointStore, StoredCheckpoint
from cpstore.decision.table import (
    TOKEN_SIZE,
    Finding,
    FindingCode,
    Subject,
)
from cpstore.errors import (
    CpstoreError,
    IntegrityError,
    InvalidInputError,
    NotFoundError,
)
from cpstore.native.args import full_checkpoint_id
from cpstore.native.canonical import decode_value, encode_value
from cpstore.native.records import kind_name, unpack_token
from cpstore.run.document import load_document, parse_document
from cpstore.run.model import Effect, Observation, ReplayMode, Run, TokenInfo

__all__ = ["DamagedSideError", "RunSource", "Side", "canonical_or_repr", "load_side"]

#: What :func:`~cpstore.decision.validate.validate` accepts for R or P.
RunSource = Union[Run, Mapping[str, Any], str, "os.PathLike[str]", bytes]

# -- one side of a validation ---------------------------------------------------


@dataclass
class Side:
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
            self.tokens.nbytes // TOKEN_SIZE,
        )


# A Run built in Python may hold str, int and float *subclasses* (the caller's own id or
# digest type); the checks compare with ==, != and startswith, which such a subclass can
# override. Its value is what a document of it holds, so that is what is compared
# (audit68: a str subclass equal to every str hid a changed run id, state digest,
# observation, effect, kind name or replay: tag, an ACCEPT its document rejected).


def _text(value: str) -> str:
    return str.__str__(value) if isinstance(value, str) and type(value) is not str else value


def _int(value: int) -> int:
    if isinstance(value, int) and type(value) is not int and type(value) is not bool:
        return int.__index__(value)
    return value


def _pin(value: float | None) -> float | None:
    if value is None or type(value) is float or type(value) is int:
        return value
    return float.__float__(value) if isinstance(value, float) else int.__index__(value)


def _observation(o: Observation) -> Observation:
    exact = type(o.step) is int and type(o.source) is str and type(o.payload_digest) is str
    if exact and (o.pinned_at is None or type(o.pinned_at) is float):
        return o
    return Observation(_int(o.step), _text(o.source), _text(o.payload_digest), _pin(o.pinned_at))


def _effect(e: Effect) -> Effect:
    if type(e.seq) is int and type(e.target) is str and type(e.payload_digest) is str:
        return e
    return Effect(_int(e.seq), _text(e.target), _text(e.payload_digest))


def _side_from_run(run: Run, label: str) -> Side:
    transcript = run.transcript_digest
    return Side(
        label=label,
        run_id=_text(run.run_id),
        step=_int(run.step),
        state_digest=_text(run.state_digest),
        tokens=run.tokens.view(),
        token_info=run.tokens.info,
        kind_names={_int(k): _text(v) for k, v in run.tokens.kind_names.items()},
        observations=[_observation(o) for o in run.observations],
        call_graph=run.call_graph,
        transcript_digest=None if transcript is None else _text(transcript),
        effects=[_effect(e) for e in run.effects],
        ledger_sealed=run.ledger_sealed,
        harness_accesses=run.harness_accesses,
        provenance_tags=tuple(_text(t) for t in run.provenance_tags),
        mode=run.mode,
    )


def _store_token_info(cp: StoredCheckpoint, view: memoryview) -> Callable[[int], TokenInfo]:
    def info(index: int) -> TokenInfo:
        seq, code, prov, dig = unpack_token(
            bytes(view[index * TOKEN_SIZE : (index + 1) * TOKEN_SIZE])
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
        canonical_or_repr(problem.expected),
        canonical_or_repr(problem.got),
        f"{label} checkpoint: {problem.what} at {problem.where}",
    )


class DamagedSideError(Exception):
    """The side could not be built; the integrity findings found first travel with it."""

    def __init__(self, findings: list[Finding]) -> None:
        super().__init__()
        self.findings = findings


def _side_from_store(
    stack: ExitStack, store: CheckpointStore, checkpoint_id: str, label: str, verify: bool
) -> Side:
    cp = stack.enter_context(store.read(checkpoint_id, verify=verify))
    view = memoryview(cp.token_records(leased=True)).cast("B")  # zero-copy: inside the block
    # Re-hash everything R names only by digest, in this read txn (the records
    # blob was just checked by token_records() and is not hashed again). Token value
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
        raise DamagedSideError(integrity) from exc


def _fill_side(
    cp: StoredCheckpoint, view: memoryview, label: str, integrity: list[Finding]
) -> Side:
    man = cp.manifest
    log = man.raw.get("tokens") if isinstance(man.raw, Mapping) else None
    kinds = log.get("kinds") if isinstance(log, Mapping) else None
    return Side(
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


def _checkpoint_ref(source: object, store: CheckpointStore | None) -> str | None:
    """The id ``source`` names when it is a str of exactly 32 hex characters (either case).

    Such a str is always an id, never a path: which recording is validated
    must not depend on what files the working directory holds. A document
    whose file name looks like an id is passed as ``Path(name)`` or ``./name``.
    audit68: only lowercase hex was an id, so an uppercase one read a file named so.
    """
    if not isinstance(source, str):
        return None
    cid = full_checkpoint_id(source)
    if cid is None:
        return None
    if store is None:
        raise InvalidInputError(
            "a checkpoint id needs a store (store= or --store); "
            "for a document file named like an id, pass ./NAME",
            got=source,
        )
    return cid


def load_side(
    stack: ExitStack, source: object, label: str, store: CheckpointStore | None, verify: bool
) -> tuple[Side | None, list[Finding]]:
    """The side, or (None, INTEGRITY findings) when the store cannot give it."""
    if isinstance(source, Run):
        return _side_from_run(source, label), []
    if isinstance(source, Mapping):
        return _side_from_run(parse_document(source), label), []
    if isinstance(source, (bytes, bytearray, memoryview)):
        return _side_from_run(load_document(source), label), []
    ref = _checkpoint_ref(source, store)
    if ref is not None and store is not None:  # _checkpoint_ref refused ref without a store
        try:
            return _side_from_store(stack, store, ref, label, verify), []
        except DamagedSideError as exc:
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


def canonical_or_repr(value: Any) -> Any:
    """``value`` as its canonical encoding reads back (as a ``.cprun`` file or the store
    holds it), or its repr when it has none. audit68: the caller's object was shown, so
    ``-0.0`` (a tuple, another key order) from a mapping and ``0.0`` from a file made
    one decision's findings differ by input path."""
    try:
        return decode_value(encode_value(value))
    except CpstoreError:
        return repr(value)
