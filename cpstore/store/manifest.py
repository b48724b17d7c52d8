"""The manifest codec (docs/store.md, "Manifest format version 1") and the Manifest.

Pure: shape checks of a decoded manifest and the references a manifest makes (for
verify and retention). The canonical encoders the recorder writes with are
:mod:`cpstore.store.manifest_encode`'s, importable from here too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

import msgpack

from cpstore.errors import (
    CanonicalEncodingError,
    FormatVersionError,
    IntegrityError,
)
from cpstore.native.canonical import _ext_hook
from cpstore.native.records import DIGEST_SIZE
from cpstore.store.decode import decode_manifest_map, decode_manifest_typed
from cpstore.store.manifest_encode import (
    digest_map_and_order,
    digests_in_map_order,
    encode_digest_map,
    encode_manifest,
    encode_recorded_manifest,
    encode_state,
)
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
