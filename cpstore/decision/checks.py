"""The checks, one per stream: tokens, observations, call graph, effects, identity.

Each appends its findings; :func:`find_all` runs them all in the order of
docs/decision-table.md. The token stream's check is in
:mod:`cpstore.decision.token_checks`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cpstore.decision.sides import Side, canonical_or_repr
from cpstore.decision.table import Finding, FindingCode
from cpstore.decision.token_checks import check_tokens, scan_findings, token_scan
from cpstore.errors import CpstoreError
from cpstore.native.args import full_checkpoint_id
from cpstore.native.canonical import encode_value
from cpstore.run.model import Observation, ReplayMode

__all__ = ["find_all", "find_alone", "sort_findings"]

# -- the checks, one per stream -------------------------------------------------


def _obs_key(o: Observation) -> list[Any]:
    return [o.step, o.source, o.payload_digest]


def _first_difference(a: Sequence[Any], b: Sequence[Any], key: Callable[[Any], Any]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if key(x) != key(y):
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _pin(o: Observation) -> float | None:
    """The pin as every input path holds it: a float (a document's and the store's
    are; a ``Run`` built in Python may hold an int, ``2**53 + 1`` pins 2**53 anywhere else)."""
    return None if o.pinned_at is None else float(o.pinned_at)


def _repinned(ro: Observation, po: Observation) -> bool:
    """Both pinned, at different times: the replayed read was not served from the log."""
    a, b = _pin(ro), _pin(po)
    return a is not None and b is not None and a != b


def _check_observations(r: Side, p: Side, out: list[Finding]) -> None:
    i = _first_difference(r.observations, p.observations, _obs_key)
    if i is not None:
        ro = r.observations[i] if i < len(r.observations) else None
        po = p.observations[i] if i < len(p.observations) else None
        # The replay departed at the earlier of the two steps (audit51: R's was taken,
        # so a read P inserted at step 5 before R's step-12 read was located at 12).
        step = min(o.step for o in (ro, po) if o is not None)
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
        _pin_findings(side, r if side is p else None, out)


def _pin_findings(side: Side, r: Side | None, out: list[Finding]) -> None:
    """UNPINNED_OBSERVATION for ``side``: its null pins, and (``r`` given: ``side`` is P)
    its reads pinned at another time than R's otherwise equal read at that position."""
    unpinned = [i for i, o in enumerate(side.observations) if o.pinned_at is None]
    # A replayed read pinned at another time than the recording's read at that
    # position (otherwise equal) was fetched and pinned anew, not "replayed from the
    # log rather than re-fetched" (seed 000, condition 3): re-fetched, equivalence
    # unprovable, as a null pin. audit51: only a null pin counted, so it was an ACCEPT.
    repinned = (
        [
            i
            for i, (x, y) in enumerate(zip(r.observations, side.observations, strict=False))
            if _obs_key(x) == _obs_key(y) and _repinned(x, y)
        ]
        if r is not None
        else []
    )
    if not unpinned and not repinned:
        return
    at = min(unpinned[:1] + repinned[:1])
    first = side.observations[at]
    if first.pinned_at is None or r is None:  # without R only null pins are found
        expected: Any = "pinned_at set"
        observed: Any = None
        what = "was re-fetched, not pinned"
    else:
        expected, observed = _pin(r.observations[at]), _pin(first)
        what = (
            f"was pinned at {observed!r}, not at the recording's pin {expected!r}: "
            "re-fetched, not replayed from the log"
        )
    tally = f"{len(unpinned)} unpinned" + (f", {len(repinned)} re-pinned" if repinned else "")
    out.append(
        Finding(
            FindingCode.UNPINNED_OBSERVATION,
            "observations",
            side.label,
            first.step,
            "step",
            expected,
            observed,
            f"{side.label} observation {first.source} at step {first.step} {what} ({tally})",
            len(unpinned) + len(repinned),
        )
    )


def _node_bytes(node: Mapping[str, Any]) -> bytes:
    return encode_value(dict(node))


def _same_value(a: Any, b: Any) -> bool:
    """Equal as the canonical encoding sees them (1 and 1.0, True and 1 differ)."""
    try:
        return encode_value(a) == encode_value(b)
    except CpstoreError:
        return bool(a == b)


def _node_difference(rn: Mapping[str, Any] | None, pn: Mapping[str, Any] | None) -> str:
    """The keys whose values differ, each with both values (``tool: 'a' vs 'b'``)."""
    if rn is None or pn is None:
        node = rn if rn is not None else pn
        name = None if node is None else node.get("node")
        return f"only the {'recorded' if pn is None else 'replayed'} side took {name!r}"
    missing = object()
    parts = []
    for key in sorted(set(rn) | set(pn), key=str):
        a, b = rn.get(key, missing), pn.get(key, missing)
        if a is missing or b is missing or not _same_value(a, b):
            shown_a = "(absent)" if a is missing else repr(a)
            shown_b = "(absent)" if b is missing else repr(b)
            parts.append(f"{key}: recorded {shown_a} vs replayed {shown_b}")
    return "; ".join(parts) or f"recorded {rn.get('node')!r} vs replayed {pn.get('node')!r}"


def _check_call_graph(r: Side, p: Side, out: list[Finding]) -> int | None:
    i = _first_difference(r.call_graph, p.call_graph, _node_bytes)
    if i is None:
        return None
    # Shown as read back from their canonical encoding (as from a file or the store).
    rn = canonical_or_repr(dict(r.call_graph[i])) if i < len(r.call_graph) else None
    pn = canonical_or_repr(dict(p.call_graph[i])) if i < len(p.call_graph) else None
    # Where the replay departed: the earlier of the two nodes' steps (audit51: R's was
    # taken, so the recording gap of a decision P inserted before R's named R's step).
    step = min(int(n["step"]) for n in (rn, pn) if n is not None)
    out.append(
        Finding(
            FindingCode.CALL_GRAPH_MISMATCH,
            "call_graph",
            "both",
            i,
            "index",
            rn,
            pn,
            f"decision {i} (step {step}) differs: {_node_difference(rn, pn)}",
        )
    )
    return step


def _check_effects(r: Side, p: Side, out: list[Finding]) -> None:
    bad = [i for i, e in enumerate(p.effects) if i >= len(r.effects) or r.effects[i] != e]
    if bad:
        i = bad[0]
        e = p.effects[i]
        entry = r.effects[i] if i < len(r.effects) else None
        expected = None if entry is None else [entry.seq, entry.target, entry.payload_digest]
        out.append(
            Finding(
                FindingCode.UNRECORDED_EFFECT,
                "effects",
                "replayed",
                i,  # the ledger position violated, not the seq P claims (audit57)
                "seq",
                expected,
                [e.seq, e.target, e.payload_digest],
                f"replay attempted effect seq={e.seq} on {e.target} that is not in the sealed "
                f"ledger at that position ({len(bad)} such effects)",
                len(bad),
            )
        )


def _check_identity(r: Side, p: Side, out: list[Finding]) -> None:
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
    _check_replayed_checkpoint(r, p, out)


_REPLAY = "replay:"


def _tagged_checkpoint(tag: str) -> str | None:
    """The checkpoint id a replay tag names (lowercase), or None when it names none.

    A tag names one when, surrounding whitespace dropped, it starts with ``replay:`` in
    any case and the rest, whitespace dropped again, is a 32-character hex id in any case
    (as ``Store.resolve`` reads a typed id); a free-form rest names no checkpoint.
    review74: only ``replay:`` exactly, followed by exactly the id, was read, so a
    replay of A tagged ``Replay:<A>``, or with a trailing newline, was an ACCEPT against B."""
    text = tag.strip()
    if text[: len(_REPLAY)].lower() != _REPLAY:
        return None
    return full_checkpoint_id(text[len(_REPLAY) :].strip())


def _check_replayed_checkpoint(r: Side, p: Side, out: list[Finding]) -> None:
    # A ReplaySession tags its run replay:<the checkpoint it replayed>. Validated
    # against another checkpoint R (same run and step, equal streams: a fork at that
    # step, a re-recording), the replay never started from R's state, so it is no
    # evidence about R; review70: it was an ACCEPT, recorded as R's standing decision.
    # Only a tag naming a checkpoint id is compared, and only when R is a stored one.
    # A replay of what R replayed (R a recording of a replay, REPLAY_OF_REPLAY
    # already) replayed the same checkpoint: seed 004's replay validated against itself.
    # Only R's tags that make it a REPLAY_OF_REPLAY (a REJECT) exempt: one spelled
    # otherwise (``Replay:<A>``) is no replay tag of R's, so it must not let a replay of
    # A pass (review74).
    if r.checkpoint_id is None:
        return
    want = r.checkpoint_id.lower()
    same = {want} | {_tagged_checkpoint(t) for t in r.provenance_tags if t.startswith(_REPLAY)}
    named = [(i, t, _tagged_checkpoint(t)) for i, t in enumerate(p.provenance_tags)]
    bad = [(i, t, c) for i, t, c in named if c is not None and c not in same]
    if bad:
        i, tag, other = bad[0]
        out.append(
            Finding(
                FindingCode.CHECKPOINT_MISMATCH,
                "identity",
                "replayed",
                i,
                "index",
                f"replay:{want}",
                tag,
                f"replay is of checkpoint {other}, not the recorded checkpoint {want}",
                len(bad),
            )
        )


def _recorded_alone(r: Side, out: list[Finding]) -> None:
    """What R shows on its own: a replay: tag, a best_effort mode, an unsealed ledger."""
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
    if r.mode is ReplayMode.BEST_EFFORT:
        # The recording says it is a best-effort replay: evidence of nothing, and
        # seed 002's tag that rollback must not act on (audit51: it was an ACCEPT).
        out.append(
            Finding(
                FindingCode.BEST_EFFORT,
                "mode",
                "recorded",
                None,
                "",
                "strict or undeclared",
                r.mode.value,
                "the recording declares itself a best_effort replay: evidence of nothing",
            )
        )
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


def _replayed_alone(p: Side, out: list[Finding]) -> None:
    """What P shows on its own: a mode other than strict, the harness's own accesses."""
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
    if p.harness_accesses:
        out.append(
            Finding(
                FindingCode.HARNESS_PERTURBATION,
                "harness",
                "replayed",
                0,
                "index",
                [],
                canonical_or_repr(p.harness_accesses[0]),
                f"the replay harness made {len(p.harness_accesses)} access(es) of its own",
                len(p.harness_accesses),
            )
        )


def sort_findings(out: list[Finding]) -> list[Finding]:
    """``out`` in table order (the order of :class:`FindingCode`), stably."""
    order = list(FindingCode)
    out.sort(key=lambda f: order.index(f.code))
    return out


def find_alone(side: Side) -> list[Finding]:
    """The findings ``side`` shows without the other side, which could not be read
    (its own INTEGRITY findings included). audit54: the decision held only INTEGRITY,
    so a recording's replay: tag or unsealed ledger, a replay's best-effort mode, went
    unlisted, and a branch such a decision should quarantine was not."""
    out: list[Finding] = list(side.integrity)
    if side.label == "recorded":
        _recorded_alone(side, out)
    else:
        _replayed_alone(side, out)
    scan_findings(side, token_scan(side, out), out)
    _pin_findings(side, None, out)
    return sort_findings(out)


def find_all(r: Side, p: Side) -> tuple[list[Finding], int | None]:
    out: list[Finding] = [*r.integrity, *p.integrity]
    _check_identity(r, p, out)
    _replayed_alone(p, out)  # before R's: a replayed BEST_EFFORT is listed first
    _recorded_alone(r, out)
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
    check_tokens(r, p, out)
    cg_step = _check_call_graph(r, p, out)
    _check_observations(r, p, out)
    _check_effects(r, p, out)
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
    return sort_findings(out), cg_step
