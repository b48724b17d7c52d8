"""The manifest's canonical encoders (docs/store.md, "Manifest format version 1").

Pure: the bytes the recorder writes a manifest with, each equal to
``encode_value`` of the same map (tests pin it), built from per-name plans
cached by the part names' order. The manifest codec's read side, the
:class:`~cpstore.store.manifest.Manifest`, its shape checks and the references
it makes, is :mod:`cpstore.store.manifest`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from operator import itemgetter
from typing import Any

import msgpack

from cpstore.errors import InvalidInputError
from cpstore.native.canonical import encode_value, map_header
from cpstore.store.model import MANIFEST_VERSION

__all__ = [
    "digest_map_and_order",
    "digests_in_map_order",
    "encode_digest_map",
    "encode_manifest",
    "encode_recorded_manifest",
    "encode_state",
]


def encode_manifest(fields: Mapping[str, Any]) -> bytes:
    """Canonical bytes of a manifest map (version key added here)."""
    return encode_value({"cpstore": MANIFEST_VERSION, **fields})


def _enc_digest(value: bytes | None) -> bytes:
    return b"\xc0" if value is None else b"\xc4\x10" + value


#: Manifest keys in canonical order (sorted by their encoded bytes).
_MANIFEST_KEYS = sorted(
    (encode_value(k), k)
    for k in (
        "cpstore",
        "run_id",
        "branch",
        "step",
        "parent",
        "state",
        "tokens",
        "observations",
        "call_graph",
        "effects",
        "ledger_sealed",
        "harness",
        "transcript",
        "tags",
        "metadata",
    )
)
_STATE_KEYS = sorted((encode_value(k), k) for k in ("kind", "digest", "parts", "chunked"))
_ENCODED_NAMES: dict[str, bytes] = {}


#: Names tuple -> (map header, ((name, encoded name + bin8 header of a digest), ...)
#: in canonical order): a recorder writes the same part names every step.
_DIGEST_MAP_PLANS: dict[tuple[str, ...], tuple[bytes, tuple[tuple[str, bytes], ...]]] = {}


def encode_digest_map(names: Mapping[str, bytes]) -> bytes:
    """Canonical bytes of a str -> raw digest map (``encode_value`` of it, faster)."""
    if not names:
        return b"\x80"
    head, entries = _digest_map_plan(names)
    return head + b"".join([prefix + names[name] for name, prefix in entries])


def digests_in_map_order(names: Mapping[str, bytes]) -> tuple[bytes, ...]:
    """The digests of a str -> raw digest map in its canonical order (the order a
    reader decodes the map in), from the plan :func:`encode_digest_map` cached."""
    if not names:
        return ()
    return tuple([names[name] for name, _ in _digest_map_plan(names)[1]])


def digest_map_and_order(names: Mapping[str, bytes]) -> tuple[bytes, tuple[bytes, ...]]:
    """(:func:`encode_digest_map`, :func:`digests_in_map_order`) of ``names``: one plan
    lookup, the digests taken in canonical order and written between the encoded
    names by one bytes ``%`` format (a recorder's per-step call)."""
    if not names:
        return b"\x80", ()
    key = tuple(names)
    plan = _ORDER_PLANS.get(key)
    if plan is None:
        head, entries = _digest_map_plan(names)
        getter: Callable[[Mapping[str, bytes]], Any] = itemgetter(*[name for name, _ in entries])
        # The map header, then each encoded name and bin8 header followed by a %b
        # for its digest; a "%" in those bytes is escaped (written as it is).
        template = head.replace(b"%", b"%%") + b"".join(
            [prefix.replace(b"%", b"%%") + b"%b" for _, prefix in entries]
        )
        plan = (template, getter, len(entries) == 1)
        if len(_ORDER_PLANS) >= 256:
            _ORDER_PLANS.clear()
        _ORDER_PLANS[key] = plan
    template, getter, single = plan
    ordered: tuple[bytes, ...] = (getter(names),) if single else getter(names)
    return template % ordered, ordered


#: Names tuple -> (the ``%`` template of the encoded map, itemgetter of the names in
#: canonical order, one name?): digest_map_and_order's plans.
_ORDER_PLANS: dict[tuple[str, ...], tuple[bytes, Callable[[Mapping[str, bytes]], Any], bool]] = {}


def _digest_map_plan(names: Mapping[str, bytes]) -> tuple[bytes, tuple[tuple[str, bytes], ...]]:
    """(map header, (name, encoded name + bin header) in canonical order), cached by the
    names' order."""
    order = tuple(names)
    plan = _DIGEST_MAP_PLANS.get(order)
    if plan is None:
        items: list[tuple[bytes, str]] = []
        for name in order:
            enc = _ENCODED_NAMES.get(name)
            if enc is None:
                enc = encode_value(name)
                if len(_ENCODED_NAMES) < 4096:
                    _ENCODED_NAMES[name] = enc
            items.append((enc, name))
        items.sort()
        plan = (map_header(len(items)), tuple((name, enc + b"\xc4\x10") for enc, name in items))
        if len(_DIGEST_MAP_PLANS) >= 256:
            _DIGEST_MAP_PLANS.clear()
        _DIGEST_MAP_PLANS[order] = plan
    return plan


#: Encoded keys of the manifest and ``state`` maps.
_MK = {key: enc for enc, key in _MANIFEST_KEYS}
_SK = {key: enc for enc, key in _STATE_KEYS}
_STATE_PARTS_HEAD = bytes((0x80 | len(_STATE_KEYS),)) + _SK["kind"] + encode_value("parts")


def encode_state(state: Mapping[str, Any], parts_bytes: bytes) -> bytes:
    """Canonical bytes of a manifest's ``state`` map, the parts map pre-encoded.

    A recorder's common state (parts, a 16-byte digest, nothing chunked) is one bytes
    ``%`` format of :data:`_PARTS_STATE` (the same bytes as the join below; put86)."""
    digest, chunked = state["digest"], state["chunked"]
    if (
        not chunked
        and state["kind"] == "parts"
        and type(digest) is bytes
        and len(digest) == 16
        and type(parts_bytes) is bytes
    ):
        return _PARTS_STATE % (parts_bytes, digest)
    kind = (
        _STATE_PARTS_HEAD
        if state["kind"] == "parts"
        else (bytes((0x80 | len(_STATE_KEYS),)) + _SK["kind"] + encode_value(state["kind"]))
    )
    return b"".join(
        (
            kind,
            _SK["parts"],
            parts_bytes,
            _SK["digest"],
            _enc_digest(state["digest"]),
            _SK["chunked"],
            encode_digest_map(state["chunked"]),
        )
    )


#: encode_state's bytes of a parts state with nothing chunked: ``%b`` the parts map's
#: bytes, then the digest's 16 (a ``%`` in the fixed bytes escaped).
_PARTS_STATE = b"%b".join(
    piece.replace(b"%", b"%%")
    for piece in (
        _STATE_PARTS_HEAD + _SK["parts"],
        _SK["digest"] + b"\xc4\x10",
        _SK["chunked"] + b"\x80",
    )
)

#: The manifest's keys in canonical order, as encode_recorded_manifest writes them.
_RECORDED_ORDER = (
    "step",
    "tags",
    "state",
    "branch",
    "parent",
    "run_id",
    "tokens",
    "cpstore",
    "effects",
    "harness",
    "metadata",
    "call_graph",
    "transcript",
    "observations",
    "ledger_sealed",
)
_MANIFEST_HEAD = bytes((0x80 | len(_MANIFEST_KEYS),))
_VERSION_PIECE = _MK["cpstore"] + encode_value(MANIFEST_VERSION) + _MK["effects"]


def encode_recorded_manifest(
    logs: Mapping[str, Any],
    *,
    run_id: bytes,
    branch: bytes,
    step: int,
    parent: bytes | None,
    state: bytes,
    tokens: bytes,
    ledger_sealed: bool,
    tags: bytes,
    metadata: bytes,
) -> bytes:
    """:func:`encode_manifest` of the recorder's fields, pre-encoded: its per-step call.

    ``logs`` holds the digest (or None) of observations, call_graph, effects,
    harness and transcript (other keys are ignored); ``run_id``, ``branch``,
    ``state``, ``tokens``, ``tags`` and ``metadata`` are canonical bytes; the
    step is an int in [0, 2**63), as the recorder checks it first (naming its run): a
    negative or too large one is InvalidInputError here too, never read from the step
    table's end. Keys are written in ``_RECORDED_ORDER``, which
    the module checks is the canonical one; a test pins equality with
    :func:`encode_manifest`.
    """
    # One bytes ``%`` format of a template holding every fixed key (_RECORDED_TEMPLATE);
    # a digest is its bin8 header and bytes, an absent one nil (_enc_digest's bytes).
    effects, harness = logs["effects"], logs["harness"]
    call_graph, transcript, observations = (
        logs["call_graph"],
        logs["transcript"],
        logs["observations"],
    )
    return _RECORDED_TEMPLATE % (
        _STEPS[step] if 0 <= step < _STEPS_CACHED else _step_bytes(step),
        tags,
        state,
        branch,
        _NIL if parent is None else _BIN16 + parent,
        run_id,
        tokens,
        _NIL if effects is None else _BIN16 + effects,
        _NIL if harness is None else _BIN16 + harness,
        metadata,
        _NIL if call_graph is None else _BIN16 + call_graph,
        _NIL if transcript is None else _BIN16 + transcript,
        _NIL if observations is None else _BIN16 + observations,
        b"\xc3" if ledger_sealed else b"\xc2",
    )


_NIL, _BIN16 = b"\xc0", b"\xc4\x10"
#: msgpack's bytes of the steps below this (a step is an int in [0, 2**63)): no Packer.
_STEPS_CACHED = 4096
_STEPS = tuple(msgpack.packb(i) for i in range(_STEPS_CACHED))


def _step_bytes(step: int) -> bytes:
    """msgpack's bytes of a step past the table; InvalidInputError for anything not a step
    (a negative one would have indexed the table from its end)."""
    if not isinstance(step, int) or isinstance(step, bool) or not 0 <= step < 2**63:
        raise InvalidInputError(
            "step must be an int in [0, 2**63)",
            where="manifest step",
            expected="an int (not a bool) in [0, 2**63)",
            got=step,
        )
    return bytes(msgpack.packb(step))


def _recorded_template() -> bytes:
    """The manifest's bytes in ``_RECORDED_ORDER`` with a ``%b`` for each value (a ``%``
    in the fixed bytes escaped): ``cpstore``'s value is fixed, written with its key."""
    pieces = [_MANIFEST_HEAD]
    for key in _RECORDED_ORDER:
        if key == "cpstore":
            continue  # in _VERSION_PIECE, with the key that follows it
        if key == "effects":
            pieces.append(_VERSION_PIECE.replace(b"%", b"%%") + b"%b")
            continue
        pieces.append(_MK[key].replace(b"%", b"%%") + b"%b")
    return b"".join(pieces)


_RECORDED_TEMPLATE = _recorded_template()


if tuple(k for _, k in _MANIFEST_KEYS) != _RECORDED_ORDER or tuple(k for _, k in _STATE_KEYS) != (
    "kind",
    "parts",
    "digest",
    "chunked",
):  # pragma: no cover - fixed by the format
    raise RuntimeError("manifest keys changed their canonical order")
