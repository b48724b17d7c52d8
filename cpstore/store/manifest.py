"""The manifest codec (docs/store.md, "Manifest format version 1") and the Manifest.

Pure: shape checks of a decoded manifest, the canonical encoders the recorder
writes with, and the references a manifest makes (for verify and retention).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, NoReturn

import msgpack

from cpstore.errors import (
    CanonicalEncodingError,
    FormatVersionError,
    IntegrityError,
)
from cpstore.native.canonical import _ext_hook, encode_value, map_header
from cpstore.native.records import DIGEST_SIZE
from cpstore.store.decode import decode_manifest_map, decode_manifest_typed
from cpstore.store.model import MANIFEST_VERSION

__all__ = [
    "Manifest",
    "check_manifest",
    "check_manifest_rest",
    "check_manifest_state",
    "decode_manifest",
    "decode_trusted",
    "digest_map_and_order",
    "digests_in_map_order",
    "encode_digest_map",
    "encode_manifest",
    "encode_recorded_manifest",
    "encode_state",
    "manifest_from_raw",
    "manifest_references",
    "referenced_digests",
]


@dataclass(frozen=True)
class Manifest:
    """A checkpoint's manifest: what it names, each part by digest (hex)."""

    id: str
    """Checkpoint id: hex digest of the canonical manifest bytes."""
    run_id: str
    """The run this checkpoint belongs to."""
    branch: str
    """The branch it was recorded on."""
    step: int
    """The runtime's step number."""
    parent: str | None
    """The checkpoint this one follows (or was forked from); None for a run's first."""
    state_digest: str
    """Digest of the state (bytes: of the bytes; parts: of the name -> part digest map)."""
    state_kind: str
    """``"bytes"`` or ``"parts"``."""
    state_parts: dict[str, str]
    """Part name -> part digest (digest of the part's canonical encoding); empty for bytes."""
    provenance_tags: tuple[str, ...]
    """Provenance tags, inherited from the parent and sticky within a recorder."""
    ledger_sealed: bool
    """True when the side-effect ledger was sealed by this checkpoint."""
    transcript_digest: str | None
    """Digest of the transcript bytes, None when none was recorded."""
    metadata: dict[str, Any]
    """User metadata (canonical values)."""
    created_at: float
    """When this checkpoint was first written (not part of the id)."""
    tokens_digest: str | None
    """Digest of the packed TOKEN records blob, None when no token was recorded."""
    token_count: int
    """Number of recorded tokens."""
    observations_digest: str | None
    """Digest of the observation log object."""
    call_graph_digest: str | None
    """Digest of the call-graph object."""
    effects_digest: str | None
    """Digest of the side-effect ledger object."""
    harness_digest: str | None
    """Digest of the harness-access stream object."""
    raw: dict[str, Any] = field(repr=False, compare=False)
    """The decoded manifest map itself (raw digests), for the store's own use."""


def decode_trusted(data: bytes | memoryview) -> Any:
    """Decode canonical bytes already proven by their digest (no re-encode check).

    Only for bytes read under a digest that was checked (or deliberately not):
    the writer produced them with encode_value, and the digest certifies them.
    """
    try:
        return msgpack.unpackb(
            data, raw=False, strict_map_key=False, ext_hook=_ext_hook, use_list=True
        )
    except CanonicalEncodingError:
        raise
    except (ValueError, TypeError, msgpack.UnpackException, RecursionError) as exc:
        raise CanonicalEncodingError("bytes are not a msgpack value", got=str(exc)) from None


_unpackb = msgpack.unpackb
_DIGEST_LEN = {DIGEST_SIZE}
_LOG_FIELDS = ("parent", "transcript", "observations", "call_graph", "effects", "harness")


def _is_digest(value: object) -> bool:
    return type(value) is bytes and len(value) == DIGEST_SIZE


def _opt_hex(m: Mapping[str, Any], name: str, cid: bytes) -> str | None:
    value = m.get(name)
    if value is None:
        return None
    if not _is_digest(value):
        _bad(cid, name, value, "manifest field is not a digest")
    return bytes(value).hex()


def _bad(
    cid: bytes, field: str, got: object, what: str = "manifest field has the wrong shape"
) -> NoReturn:
    raise IntegrityError(what, where=f"checkpoint {bytes(cid).hex()}.{field}", got=got)


def decode_manifest(cid: bytes, data: bytes | memoryview, created_at: float) -> Manifest:
    """Decode and shape-check a manifest; unknown versions are refused."""
    return manifest_from_raw(cid, check_manifest(cid, data), created_at)


def check_manifest(cid: bytes, data: bytes | memoryview) -> dict[str, Any]:
    """The decoded manifest map after every shape check :class:`Manifest` relies on."""
    m = check_manifest_state(cid, data)
    check_manifest_rest(cid, m)
    return m


def check_manifest_state(cid: bytes, data: bytes | memoryview) -> dict[str, Any]:
    """Decode a manifest and check its version and ``state`` map; nothing else.

    Enough for a reader that only wants the state; it runs
    :func:`check_manifest_rest` before it touches any other field. Runs on
    every checkpoint read, so the common shape is proven in a few C-level
    steps and the messages are built only when a check fails; a manifest of the
    common shape in one typed decode (:func:`~cpstore.store.decode.decode_manifest_typed`).
    """
    typed = decode_manifest_typed(data)
    if typed is not None:
        return typed
    return _check_manifest_state_generic(cid, data)


def _check_manifest_state_generic(cid: bytes, data: bytes | memoryview) -> dict[str, Any]:
    """:func:`check_manifest_state` of any manifest: a generic decode, then the checks."""
    m = decode_manifest_map(cid, data)  # msgspec, or msgpack where they differ (decode.py)
    if type(m) is not dict:
        raise IntegrityError(
            "manifest is not a map", where=f"checkpoint {bytes(cid).hex()}", got=type(m).__name__
        )
    version = m.get("cpstore")
    if version != MANIFEST_VERSION or type(version) is not int:
        raise FormatVersionError(
            "unknown manifest version",
            where=f"checkpoint {bytes(cid).hex()}",
            expected=MANIFEST_VERSION,
            got=version,
        )
    state: Any = m.get("state")
    if type(state) is not dict:
        _bad(cid, "state", state)
    get = state.get
    parts: Any = get("parts")
    kind = get("kind")
    digest = get("digest")
    chunked: Any = get("chunked")
    if (
        type(parts) is dict
        and kind == "parts"
        and type(kind) is str
        and type(digest) is bytes
        and len(digest) == DIGEST_SIZE
        and not chunked
        and parts
    ):
        # The common shape: str names, 16-byte digests. "".join refuses any
        # name that is not a str, b"".join any digest that is not bytes
        # (msgpack decodes nothing else to a bytes-like object).
        try:
            "".join(parts)
            b"".join(parts.values())
        except TypeError:
            pass
        else:
            if set(map(len, parts.values())) == _DIGEST_LEN:
                return m
    _check_state_slow(cid, state)
    return m


def _check_state_slow(cid: bytes, state: dict[str, Any]) -> None:
    """Every check of a manifest's ``state`` map, one by one, naming what fails."""
    kind = state.get("kind")
    if kind not in ("bytes", "parts") or type(kind) is not str:
        _bad(cid, "state.kind", kind)
    parts: Any = state.get("parts") or {}
    if type(parts) is not dict or (kind == "parts" and "parts" not in state):
        _bad(cid, "state.parts", state.get("parts"))
    state_digest = state.get("digest")
    if not _is_digest(state_digest):
        _bad(cid, "state.digest", state_digest)
    for name, value in parts.items():
        if type(name) is not str:
            _bad(cid, "state.parts", name)
        if not _is_digest(value):
            _bad(cid, f"state.parts[{name!r}]", value, "manifest field is not a digest")
    chunked: Any = state.get("chunked") or {}
    if type(chunked) is not dict:
        _bad(cid, "state.chunked", chunked)
    for name, value in chunked.items():
        if not (name in parts or (kind == "bytes" and name == "bytes")):
            _bad(cid, "chunked", name)
        if not _is_digest(value):
            _bad(cid, f"state.chunked[{name!r}]", value, "manifest field is not a digest")


def check_manifest_rest(cid: bytes, m: dict[str, Any]) -> None:
    """The shape checks of every field but the version and ``state``."""
    tags: Any = m.get("tags")
    if type(tags) is not list or not all(type(t) is str for t in tags):
        _bad(cid, "tags", tags)
    meta: Any = m.get("metadata")
    if type(meta) is not dict:
        _bad(cid, "metadata", meta)
    for name in ("run_id", "branch"):
        if type(m.get(name)) is not str:
            _bad(cid, name, m.get(name))
    step: Any = m.get("step")
    if type(step) is not int:
        _bad(cid, "step", step)
    if type(m.get("ledger_sealed")) is not bool:
        _bad(cid, "ledger_sealed", m.get("ledger_sealed"))
    tokens: Any = m.get("tokens")
    if tokens is not None:
        if type(tokens) is not dict:
            _bad(cid, "tokens", tokens)
        _opt_hex(tokens, "records", cid)
        for name in ("values", "offsets"):
            if not _is_digest(tokens.get(name)):
                _bad(cid, f"tokens.{name}", tokens.get(name))
        if type(tokens.get("kinds")) is not dict:
            _bad(cid, "tokens.kinds", tokens.get("kinds"))
        token_count = tokens.get("count")
        if type(token_count) is not int or token_count < 0:
            _bad(cid, "tokens.count", token_count)
    get = m.get
    for name in _LOG_FIELDS:
        value = get(name)
        if value is not None and (type(value) is not bytes or len(value) != DIGEST_SIZE):
            _bad(cid, name, value, "manifest field is not a digest")


def _hex_or_none(m: Mapping[str, Any], name: str, cid: bytes) -> str | None:
    value = m.get(name)
    if value is None:
        return None
    if type(value) is bytes and len(value) == DIGEST_SIZE:
        return value.hex()
    return _opt_hex(m, name, cid)  # raises, naming the field


def manifest_from_raw(cid: bytes, m: dict[str, Any], created_at: float) -> Manifest:
    """The :class:`Manifest` of a map that passed :func:`check_manifest`.

    Built without the frozen dataclass's ``__init__`` (twenty
    ``object.__setattr__`` calls, the larger part of a history entry's cost):
    the instance's ``__dict__`` is filled with the same fields, so it is equal
    to, and behaves as, one built by ``Manifest(...)`` (a test pins it).
    """
    state = m["state"]
    tokens = m.get("tokens")
    out = _new_manifest(Manifest)
    out.__dict__.update(
        id=bytes(cid).hex(),
        run_id=m["run_id"],
        branch=m["branch"],
        step=m["step"],
        parent=_hex_or_none(m, "parent", cid),
        state_digest=state["digest"].hex(),
        state_kind=state["kind"],
        state_parts={name: d.hex() for name, d in (state.get("parts") or {}).items()},
        provenance_tags=tuple(m["tags"]),
        ledger_sealed=m["ledger_sealed"],
        transcript_digest=_hex_or_none(m, "transcript", cid),
        metadata=m["metadata"],
        created_at=created_at,
        tokens_digest=None if tokens is None else _opt_hex(tokens, "records", cid),
        token_count=0 if tokens is None else tokens["count"],
        observations_digest=_hex_or_none(m, "observations", cid),
        call_graph_digest=_hex_or_none(m, "call_graph", cid),
        effects_digest=_hex_or_none(m, "effects", cid),
        harness_digest=_hex_or_none(m, "harness", cid),
        raw=m,
    )
    return out


_new_manifest = object.__new__


def manifest_references(m: Mapping[str, Any]) -> list[tuple[str, bytes]]:
    """(field, digest) of every object a decoded manifest names directly
    (:func:`referenced_digests` gives the digests alone, as a set)."""
    refs: list[tuple[str, bytes]] = []
    state = m["state"]
    chunked: Mapping[str, bytes] = state.get("chunked") or {}
    if state["kind"] == "bytes":
        if "bytes" in chunked:
            refs.append(("state.chunked", chunked["bytes"]))
        else:
            refs.append(("state.digest", state["digest"]))
    else:
        for name, d in (state.get("parts") or {}).items():
            if name in chunked:
                refs.append((f"state.chunked[{name!r}]", chunked[name]))
            else:
                refs.append((f"state.parts[{name!r}]", d))
    tokens: Any = m.get("tokens")
    if tokens is not None:
        for name in ("records", "values", "offsets"):
            refs.append((f"tokens.{name}", tokens[name]))
    for name in ("observations", "call_graph", "effects", "harness", "transcript"):
        if m.get(name) is not None:
            refs.append((name, m[name]))
    return refs


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
    """Canonical bytes of a manifest's ``state`` map, the parts map pre-encoded."""
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
    step is an int in [0, 2**63). Keys are written in ``_RECORDED_ORDER``, which
    the module checks is the canonical one; a test pins equality with
    :func:`encode_manifest`.
    """
    d = _enc_digest
    return b"".join(
        (
            _MANIFEST_HEAD,
            _MK["step"],
            msgpack.packb(step),
            _MK["tags"],
            tags,
            _MK["state"],
            state,
            _MK["branch"],
            branch,
            _MK["parent"],
            d(parent),
            _MK["run_id"],
            run_id,
            _MK["tokens"],
            tokens,
            _VERSION_PIECE,
            d(logs["effects"]),
            _MK["harness"],
            d(logs["harness"]),
            _MK["metadata"],
            metadata,
            _MK["call_graph"],
            d(logs["call_graph"]),
            _MK["transcript"],
            d(logs["transcript"]),
            _MK["observations"],
            d(logs["observations"]),
            _MK["ledger_sealed"],
            b"\xc3" if ledger_sealed else b"\xc2",
        )
    )


if tuple(k for _, k in _MANIFEST_KEYS) != _RECORDED_ORDER or tuple(k for _, k in _STATE_KEYS) != (
    "kind",
    "parts",
    "digest",
    "chunked",
):  # pragma: no cover - fixed by the format
    raise RuntimeError("manifest keys changed their canonical order")


def referenced_digests(m: Mapping[str, Any]) -> set[bytes]:
    """The digests :func:`manifest_references` gives for ``m``, as a set (the recorder's)."""
    state = m["state"]
    chunked: Mapping[str, bytes] = state.get("chunked") or {}
    if state["kind"] == "bytes":
        refs = {chunked["bytes"] if "bytes" in chunked else state["digest"]}
    elif chunked:
        refs = {chunked.get(name, d) for name, d in (state.get("parts") or {}).items()}
    else:
        refs = set((state.get("parts") or {}).values())
    tokens: Any = m.get("tokens")
    if tokens is not None:
        refs.update((tokens["records"], tokens["values"], tokens["offsets"]))
    get = m.get
    for name in ("observations", "call_graph", "effects", "harness", "transcript"):
        value = get(name)
        if value is not None:
            refs.add(value)
    return refs
