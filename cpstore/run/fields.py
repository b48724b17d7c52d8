"""A run's top-level fields checked one by one, in the order they lie (docs/run-document.md).

A run document (JSON or msgpack, read whole or streamed) and a packed run file's metadata
map hold the fields of one :class:`Run`; each field's check gives the value the Run holds
and refuses a bad one with :class:`DocumentError` naming it. Fields are checked in the
order they lie in the document (or the metadata map, which is in canonical key order), so
a document with several bad fields is refused for the first, whichever loader read it
(run88: the whole-document loader checked the token list first, the streamed one last,
and a ``.cprun``'s metadata went in an order of its own).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from cpstore.errors import DocumentError
from cpstore.run.model import (
    Effect,
    Observation,
    PackedTokens,
    ReplayMode,
    Run,
    TokenPacker,
    check_canonical,
    check_node,
    check_step,
    check_str,
    check_uint,
    fields_of,
    list_of,
    pinned_or_none,
)

__all__ = ["DOCUMENT_CHECKS", "PACKED_CHECKS", "StreamedTokens", "run_of_fields"]


@dataclasses.dataclass(frozen=True)
class StreamedTokens:
    """A streamed token list (:mod:`cpstore.run.stream`), in its field's place: its
    packed tokens, or the refusal of its first bad token, raised when the fields are
    checked in the document's order (run88: raised after every other field's)."""

    result: PackedTokens | DocumentError


def _tokens(value: Any) -> PackedTokens:
    if isinstance(value, StreamedTokens):  # the streamed loader's, already packed
        if isinstance(value.result, DocumentError):
            raise value.result
        return value.result
    packer = TokenPacker()
    for i, item in enumerate(list_of(value, "tokens")):
        where = f"tokens[{i}]"
        tok = fields_of(item, where, ("seq", "kind", "value", "provenance"))
        packer.add(tok["seq"], tok["kind"], tok["value"], tok["provenance"], where)
    return packer.finish()


_OBSERVATION_FIELDS = ("step", "source", "payload_digest", "pinned_at")
_EFFECT_FIELDS = ("seq", "target", "payload_digest")


def _observations(value: Any) -> tuple[Observation, ...]:
    return tuple(
        _observation(
            fields_of(item, f"observations[{i}]", _OBSERVATION_FIELDS), f"observations[{i}]"
        )
        for i, item in enumerate(list_of(value, "observations"))
    )


def _call_graph(value: Any) -> tuple[dict[Any, Any], ...]:
    call_graph = []
    for i, node in enumerate(list_of(value, "call_graph")):
        check_node(node, f"call_graph[{i}]")
        call_graph.append(dict(node))
    return tuple(call_graph)


def _effects(value: Any) -> tuple[Effect, ...]:
    return tuple(
        _effect(fields_of(item, f"effects[{i}]", _EFFECT_FIELDS), f"effects[{i}]")
        for i, item in enumerate(list_of(value, "effects"))
    )


def _harness(value: Any) -> tuple[Any, ...]:
    harness = list_of(value, "harness_accesses")
    for i, access in enumerate(harness):
        check_canonical(access, f"harness_accesses[{i}]")
    return tuple(harness)


def _tags(value: Any) -> tuple[str, ...]:
    tags = list_of(value, "provenance_tags")
    for i, tag in enumerate(tags):
        check_str(tag, f"provenance_tags[{i}]")
    return tuple(tags)


def _transcript(value: Any) -> str | None:
    return None if value is None else check_str(value, "transcript_digest")


def _sealed(value: Any) -> bool:
    if not isinstance(value, bool):
        raise DocumentError("must be true or false", where="ledger_sealed", got=value)
    return value


def _mode(value: Any) -> ReplayMode | None:
    if value is None:
        return None
    try:
        # Only a str is looked up: Enum's own error repr()s any other value, and a list
        # nested ~1 000 deep raised RecursionError out of the loaders (left83).
        if not isinstance(value, str):
            raise ValueError(value)
        return ReplayMode(value)
    except ValueError:
        raise DocumentError(
            "unknown replay mode",
            where="mode",
            expected=["strict", "best_effort", None],
            got=value,
        ) from None


#: Each top-level field's check in a run document, giving the value the Run holds.
DOCUMENT_CHECKS: dict[str, Callable[[Any], Any]] = {
    "run_id": lambda value: check_str(value, "run_id"),
    "step": lambda value: check_step(value, "step"),
    "state_digest": lambda value: check_str(value, "state_digest"),
    "observations": _observations,
    "tokens": _tokens,
    "call_graph": _call_graph,
    "transcript_digest": _transcript,
    "effects": _effects,
    "ledger_sealed": _sealed,
    "harness_accesses": _harness,
    "provenance_tags": _tags,
    "mode": _mode,
}
#: What an optional field left out means (docs/run-document.md, "Fields").
_DEFAULTS: dict[str, Any] = {
    "ledger_sealed": False,
    "harness_accesses": (),
    "provenance_tags": (),
    "mode": None,
}


def _observation(obs: Mapping[str, Any] | list[Any], where: str) -> Observation:
    step, source, payload, pinned = (
        obs if isinstance(obs, list) else [obs[k] for k in _OBSERVATION_FIELDS]
    )
    return Observation(
        check_step(step, f"{where}.step"),
        check_str(source, f"{where}.source"),
        check_str(payload, f"{where}.payload_digest"),
        pinned_or_none(pinned, f"{where}.pinned_at"),
    )


def _effect(eff: Mapping[str, Any] | list[Any], where: str) -> Effect:
    seq, target, payload = eff if isinstance(eff, list) else [eff[k] for k in _EFFECT_FIELDS]
    return Effect(
        check_uint(seq, f"{where}.seq"),
        check_str(target, f"{where}.target"),
        check_str(payload, f"{where}.payload_digest"),
    )


def _packed_items(
    value: Any, field: str, names: tuple[str, ...], make: Callable[[Any, str], Any]
) -> tuple[Any, ...]:
    """A packed run file's observations or effects: each a list of the item's fields."""
    items = []
    for i, item in enumerate(list_of(value, field)):
        where = f"{field}[{i}]"
        if not isinstance(item, list) or len(item) != len(names):
            raise DocumentError(
                f"must be [{', '.join(names)}]",
                where=where,
                got=type(item).__name__ if not isinstance(item, list) else f"{len(item)} items",
            )
        items.append(make(item, where))
    return tuple(items)


#: A packed run file's metadata fields (``kind_names`` is checked by the file's reader,
#: which builds the tokens with them).
PACKED_CHECKS: dict[str, Callable[[Any], Any]] = {
    **{k: v for k, v in DOCUMENT_CHECKS.items() if k != "tokens"},
    "observations": lambda value: _packed_items(
        value, "observations", _OBSERVATION_FIELDS, _observation
    ),
    "effects": lambda value: _packed_items(value, "effects", _EFFECT_FIELDS, _effect),
}


def run_of_fields(
    fields: Mapping[str, Any],
    checks: Mapping[str, Callable[[Any], Any]],
    *,
    into: str = "tokens",
) -> Run:
    """The :class:`Run` of ``fields`` (known and complete: ``fields_of`` said so), each
    checked by ``checks`` in the order ``fields`` holds them (a field without a check,
    ``format``, is skipped); the tokens are the check of the field ``into`` (a packed run
    file's ``kind_names``, which its tokens are built with)."""
    got = dict(_DEFAULTS)
    for key, value in fields.items():
        check = checks.get(key)
        if check is not None:
            got["tokens" if key == into else key] = check(value)
    return Run(
        got["run_id"],
        got["step"],
        got["state_digest"],
        tokens=got["tokens"],
        observations=got["observations"],
        call_graph=got["call_graph"],
        transcript_digest=got["transcript_digest"],
        effects=got["effects"],
        ledger_sealed=got["ledger_sealed"],
        harness_accesses=got["harness_accesses"],
        provenance_tags=got["provenance_tags"],
        mode=got["mode"],
    )
