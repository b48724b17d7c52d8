"""The decision table (docs/decision-table.md): validate a replay against its recording.

:func:`validate` compares a recorded run R with a replay P stream by stream,
lists *every* finding (not just the first problem, unlike the seeds'
sketches), and ends in exactly one :class:`Verdict`: the worst level over the
findings. Token streams are compared whole, in one native call over the
packed buffers (zero-copy from LMDB when R is a stored checkpoint). With a
store, every decision is appended to the store's hash-chained audit log, and
the gates (:mod:`cpstore.decision.gates`) act only on decisions found there.

A failed validation is data, not an exception: ``raise_on_failure=True`` (or
:meth:`Decision.raise_for_verdict`) opts in to raising. Errors in the *inputs*
(a malformed document, a bad argument) always raise; damage to what R
references in the store is a finding (INTEGRITY), never an exception.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import replace
from typing import Any

from cpstore.decision.checks import find_all, find_alone, sort_findings
from cpstore.decision.ports import CheckpointStore
from cpstore.decision.sides import RunSource, Side, load_side
from cpstore.decision.table import (
    AUDIT_DECISION,
    Decision,
    Fidelity,
    Finding,
    FindingCode,
    RecordingGap,
    Subject,
    verdict_for,
)
from cpstore.errors import (
    IntegrityError,
    InvalidInputError,
    NotFoundError,
    ReadHeldDuringResizeError,
)
from cpstore.native.args import full_checkpoint_id
from cpstore.native.binding import digest
from cpstore.native.canonical import encode_value

__all__ = ["RunSource", "validate"]

#: Loads of the two sides tried when another process's map growth refused the second.
_LOAD_TRIES = 3


def fidelity_of(
    findings: Sequence[Finding], cg_step: int | None, r: Side | None, p: Side | None
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
    # Seed 004's idempotent-branch case needs the transcripts shown *equal*: two
    # missing transcripts are not equal transcripts, so a call-graph divergence
    # without any transcript is not classified (UNVERIFIED), never PERTURBED.
    no_transcripts = (
        r is not None
        and p is not None
        and r.transcript_digest is None
        and p.transcript_digest is None
    )
    if FindingCode.HARNESS_PERTURBATION in codes or (cg and not tr and not no_transcripts):
        return Fidelity.DIVERGENT_PERTURBED, ()
    return Fidelity.UNVERIFIED, ()


def _empty_subject(source: object) -> Subject:
    # The id as the store names it, read as load_side read it (its characters: verdict94,
    # a str subclass's own lower() named another checkpoint, whose standing decision the
    # unreadable one's REJECT then became, while the unreadable one's stood).
    return Subject("", 0, full_checkpoint_id(source) if isinstance(source, str) else None, None, 0)


def _body_digest(body: Mapping[str, Any]) -> str:
    """A decision's id: the hex digest of its canonical body (nonce included)."""
    return bytes(digest(encode_value(dict(body)))).hex()


def validate(
    recorded: RunSource,
    replayed: RunSource,
    *,
    store: CheckpointStore | None = None,
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
    verify-on-read, an explicit choice for looking only: with ``record`` (and a
    store) it is refused, since the gates would act on it, and a decision that read a
    stored side so is never evidence (:attr:`Decision.verified`). ``raise_on_failure`` raises
    :class:`ValidationFailedError` for anything but ACCEPT.
    """
    if not isinstance(verify, bool) or not isinstance(record, bool):
        raise InvalidInputError("verify and record must be bools", got=(verify, record))
    if store is not None and record and not verify:
        # A recorded decision is what the gates act on, and its record does not say
        # verification was skipped: an ACCEPT over a damaged checkpoint resumed and
        # certified a rollback (audit31). Looking without verifying stays allowed.
        raise InvalidInputError(
            "a decision recorded for the gates must be made with verification",
            where="validate(verify=False, record=True)",
            expected="verify=True, or record=False to look only",
            got="verify=False",
        )
    # The recorded side's read view stays open while the replayed side's begins: when
    # another process grew the LMDB map in between, that second read cannot adopt the
    # new size (no read of this process may be open then) and is refused with
    # ReadHeldDuringResizeError, though the caller holds no view. Both views closed, the
    # next first read adopts it: loaded again (chaos seed 26011; a caller's own open
    # view still gets the error, after the tries).
    for attempt in range(_LOAD_TRIES):
        try:
            with ExitStack() as stack:
                r, r_bad = load_side(stack, recorded, "recorded", store, verify)
                p, p_bad = load_side(stack, replayed, "replayed", store, verify)
                if r is not None and r.mode is not None and (p is None or p.from_store):
                    # A replay's Run as R against a stored recording as P would be judged
                    # backwards (and end in QUARANTINE for a mode the checkpoint lacks).
                    # Only a checkpoint id gives no side (p None): swapped too, though
                    # unreadable (audit56: R's own findings were listed as a recording's).
                    raise InvalidInputError(
                        "the sides look swapped: RECORDED is a replay (it declares a replay "
                        "mode) and REPLAYED is a stored checkpoint",
                        where="validate(recorded, replayed)",
                        expected="validate(checkpoint_id, replay_run)",
                        got=f"validate(replay_run with mode={r.mode.value}, "
                        f"{p.checkpoint_id if p is not None else repr(replayed)})",
                    )
                cg_step: int | None = None
                if r is None or p is None:
                    # The side that was read still shows what it shows alone (audit54:
                    # only INTEGRITY was listed, and such a decision quarantined no branch).
                    findings = sort_findings(
                        [
                            *r_bad,
                            *p_bad,
                            *(find_alone(r) if r else ()),
                            *(find_alone(p) if p else ()),
                        ]
                    )
                else:
                    try:
                        findings, cg_step = find_all(r, p)
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
                            ),
                        ]
                fidelity, gaps = fidelity_of(findings, cg_step, r, p)
                r_subj = r.subject() if r is not None else _empty_subject(recorded)
                p_subj = p.subject() if p is not None else _empty_subject(replayed)
                mode = p.mode if p is not None else None
                stored = any(side is not None and side.from_store for side in (r, p))
            break
        except ReadHeldDuringResizeError:
            if attempt == _LOAD_TRIES - 1:
                raise
    created = time.time()
    verdict = verdict_for(findings)
    ident = _body_digest(
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
        ident,
        verdict,
        fidelity,
        tuple(findings),
        gaps,
        r_subj,
        p_subj,
        mode,
        created,
        verified=verify or not stored,  # an unverified stored side proves nothing
    )
    if store is not None and record:
        rec = store.append_audit(AUDIT_DECISION, decision.to_dict())
        decision = replace(decision, audit_digest=str(rec.digest))
    if raise_on_failure:
        decision.raise_for_verdict()
    return decision
