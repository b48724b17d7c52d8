"""The read path's decoders: msgspec where it builds exactly msgpack's value, msgpack elsewhere.

msgspec decodes a manifest in under half msgpack's time (the manifest decode
was the largest single cost of a read, issue 12) and a state part ~25 %
faster. Both decode cpstore's canonical encodings to the same values; they
differ only on bytes the canonical encoder never writes (:func:`decoded_alike`),
and there msgpack decodes, so a forged or damaged object reads (or is refused,
named) exactly as before.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import repeat
from sys import getrecursionlimit as _recursion_limit
from typing import Annotated, Any, Literal, cast

import msgpack
import msgspec
from msgspec import Meta, Struct

from cpstore.errors import IntegrityError
from cpstore.native.canonical import _ext_hook

__all__ = [
    "ALIKE_SCALARS",
    "DECODE_ERRORS",
    "MSGPACK_MAX_DEPTH",
    "MSGSPEC_SAFE_LIMIT",
    "decode_manifest_map",
    "decode_manifest_typed",
    "decode_part",
    "decoded_alike",
    "msgspec_safe",
]

_unpackb = msgpack.unpackb
#: msgspec hands ext data as a memoryview: _ext_hook reads it with int.from_bytes.
_EXT_HOOK: Callable[[int, memoryview], Any] = cast(Any, _ext_hook)
_decode = msgspec.msgpack.Decoder(ext_hook=_EXT_HOOK).decode

#: A state part's decoder (ext 1 for big ints through msgpack's hook): bytes
#: that are not exactly one msgpack value raise. A value it returns is msgpack's
#: only when :func:`decoded_alike` says so (always, for these scalar types).
decode_part = _decode
#: What a decode of damaged bytes may raise (CanonicalEncodingError is a ValueError).
DECODE_ERRORS = (TypeError, ValueError, IndexError, RecursionError, msgspec.MsgspecError)


#: Values msgspec and msgpack decode alike from any bytes.
ALIKE_SCALARS = frozenset({str, bytes, int, float, bool, type(None)})


#: msgpack's unpacker nests at most this many arrays and maps (its stack: deeper raises
#: StackError). msgspec's limit is the interpreter's recursion limit, which a program
#: may raise past it: a value nested deeper is not msgpack's (a test pins both).
MSGPACK_MAX_DEPTH = 1024


#: msgspec nests by C recursion, bounded only by the interpreter's recursion limit:
#: under a limit far above msgpack's depth, forged deeply nested bytes overflow the
#: C stack (a segfault where msgpack refuses them at 1024; ~300 bytes of stack a
#: level). Above this limit msgpack decodes everything (:func:`msgspec_safe`).
MSGSPEC_SAFE_LIMIT = 2 * MSGPACK_MAX_DEPTH


def msgspec_safe() -> bool:
    """True when msgspec may decode stored bytes: the recursion limit bounds its nesting
    to a C stack any default thread has (threads made with a stack below ~1 MiB may
    still overflow: tests/test_audit9_read_path.py)."""
    return _recursion_limit() <= MSGSPEC_SAFE_LIMIT


def decoded_alike(value: Any) -> bool:
    """True when msgpack.unpackb (``strict_map_key=False``, ``_ext_hook``) builds exactly
    ``value`` from the bytes msgspec decoded to it.

    The two decoders differ only where cpstore's canonical encoder never
    writes: msgspec makes an array map key a tuple (msgpack refuses it), an
    ext -1 a datetime (msgpack: a ``msgpack.Timestamp``), and nests deeper
    than msgpack's :data:`MSGPACK_MAX_DEPTH` when the recursion limit allows.
    Such a value holds a tuple or a datetime, or is nested deeper than that
    (or too deep to walk here).
    """
    try:
        return _alike(value, 0)
    except RecursionError:
        return False


_scalars_only = ALIKE_SCALARS.issuperset


def _alike(value: Any, depth: int) -> bool:
    """:func:`decoded_alike` of ``value`` inside ``depth`` arrays or maps."""
    kind = type(value)
    if kind in ALIKE_SCALARS:
        return True
    if depth >= MSGPACK_MAX_DEPTH:
        return False  # a container below msgpack's deepest: msgpack refuses the bytes
    if kind is list:
        return _scalars_only(map(type, value)) or all(map(_alike, value, repeat(depth + 1)))
    if kind is dict:
        return _scalars_only(map(type, value)) and (
            _scalars_only(map(type, value.values()))
            or all(map(_alike, value.values(), repeat(depth + 1)))
        )
    return False


#: The manifest fields cpstore writes. All but ``metadata`` and ``tokens`` (whose
#: ``kinds`` map is free) have a fixed shape of scalars, str-keyed maps and lists
#: that the state and rest checks enforce, so a value msgspec builds otherwise
#: there is refused by them too; the two free ones, and any field a forger adds
#: (here or in ``state``), are walked whole.
_FIELDS = frozenset(
    {
        "cpstore", "state", "tags", "run_id", "branch", "step", "ledger_sealed", "parent",
        "transcript", "observations", "call_graph", "effects", "harness", "metadata", "tokens",
    }
)  # fmt: skip
_STATE_FIELDS = frozenset({"kind", "parts", "digest", "chunked"})
#: Walked whole: the free fields, and the version (so one msgpack refuses is refused
#: as not canonical, not as an unknown version).
_FREE_FIELDS = ("metadata", "tokens", "cpstore")


def _alike_manifest(m: dict[str, Any]) -> bool:
    """:func:`decoded_alike` of a manifest map, walked only where values are free.

    The keys of the map and of ``state`` are checked here, :data:`_FREE_FIELDS`
    are walked whole, and so is any field outside :data:`_FIELDS`
    (or, in ``state``, outside :data:`_STATE_FIELDS`). RecursionError: too
    deep to walk.
    """
    try:
        "".join(m)
        state = m.get("state")
        if type(state) is dict:
            "".join(state)
    except TypeError:
        return False  # a non-str key (msgpack's decode tells what it is)
    if not _FIELDS.issuperset(m) or (type(state) is dict and not _STATE_FIELDS.issuperset(state)):
        # A field cpstore never writes: walk it too (in state, one level deeper).
        extra = [v for k, v in m.items() if k not in _FIELDS or k in _FREE_FIELDS]
        if type(state) is dict:
            inner = [v for k, v in state.items() if k not in _STATE_FIELDS]
            if not all(map(_alike, inner, repeat(2))):
                return False
        return all(map(_alike, extra, repeat(1)))
    for name in _FREE_FIELDS:
        value = m.get(name)
        if type(value) not in ALIKE_SCALARS and not _alike(value, 1):
            return False
    return True


def _decode_manifest_slow(cid: bytes, data: bytes | memoryview) -> Any:
    """msgpack's decode of a manifest: its value, or its error named."""
    try:
        return _unpackb(data, strict_map_key=False, ext_hook=_ext_hook)
    except (ValueError, TypeError, msgpack.UnpackException, RecursionError) as exc:
        # CanonicalEncodingError (an unknown ext) is a ValueError too.
        raise IntegrityError(
            "manifest is not canonical", where=f"checkpoint {bytes(cid).hex()}", got=str(exc)
        ) from None


def decode_manifest_map(cid: bytes, data: bytes | memoryview) -> Any:
    """The decoded manifest ``data`` of checkpoint ``cid`` (any value; the caller checks it).

    msgspec first; msgpack decodes again when msgspec refuses the bytes or
    built something msgpack would build otherwise, so a failure is named as it
    always was (IntegrityError "manifest is not canonical").
    """
    if _recursion_limit() > MSGSPEC_SAFE_LIMIT:
        return _decode_manifest_slow(cid, data)  # msgspec_safe(), inline
    try:
        m = _decode(data)
    except DECODE_ERRORS:
        return _decode_manifest_slow(cid, data)
    try:
        alike = type(m) is dict and _alike_manifest(m)
    except RecursionError:
        alike = False  # too deep to walk here: msgpack's decode says what it is
    if not alike:
        return _decode_manifest_slow(cid, data)
    return m


# -- the typed manifest decode (the common shape in one C pass) -------------------

#: A 16-byte digest, checked by msgspec while it decodes.
_Digest = Annotated[bytes, Meta(min_length=16, max_length=16)]


class _CommonState(Struct, forbid_unknown_fields=True):
    """The ``state`` map of a parts state, not chunked: exactly these four fields."""

    kind: Literal["parts"]
    parts: Annotated[dict[str, _Digest], Meta(min_length=1)]
    digest: _Digest
    chunked: Annotated[dict[str, bytes], Meta(max_length=0)]


class _CommonManifest(Struct, forbid_unknown_fields=True):
    """A manifest of the common shape: every field cpstore writes, no other, in
    canonical (length, then bytes) order, the fixed ones typed, the free ones Any."""

    step: int
    tags: list[str]
    state: _CommonState
    branch: str
    parent: bytes | None
    run_id: str
    tokens: Any
    cpstore: Literal[1]
    effects: bytes | None
    harness: bytes | None
    metadata: Any
    call_graph: bytes | None
    transcript: bytes | None
    observations: bytes | None
    ledger_sealed: bool


_decode_common = msgspec.msgpack.Decoder(_CommonManifest, ext_hook=_EXT_HOOK).decode


def decode_manifest_typed(data: bytes | memoryview) -> dict[str, Any] | None:
    """The manifest map of ``data`` when it has the common shape, else None.

    The common shape: the fifteen fields cpstore writes and no other, manifest
    version 1, a parts state (at least one part, 16-byte digests, nothing
    chunked) with exactly its four fields, and the fixed fields' types
    (``step`` an int, ``tags`` a list of str, ``run_id`` and ``branch`` str,
    the log fields bytes or nil, ``ledger_sealed`` a bool). One typed msgspec
    decode checks all of it in C; the free fields (``metadata``, ``tokens``)
    are walked by :func:`decoded_alike`'s rule. Whatever it returns is exactly
    the map (same values, types and key order for canonical bytes)
    :func:`decode_manifest_map` returns and ``check_manifest_state`` accepts
    (tests/test_store_read_typed_manifest.py); None leaves every other input to
    that path, which names any failure as before. The other fields' shape
    checks stay where they were (``check_manifest_rest``, before first use).
    """
    if _recursion_limit() > MSGSPEC_SAFE_LIMIT:
        return None  # msgspec_safe(), inline: the generic path decodes with msgpack
    try:
        m = _decode_common(data)
    except DECODE_ERRORS:
        return None
    meta, tokens = m.metadata, m.tokens
    try:
        if (type(meta) is not dict or meta) and not _alike(meta, 1):
            return None
        if tokens is not None and not _alike(tokens, 1):
            return None
    except RecursionError:
        return None
    s = m.state
    return {
        "step": m.step,
        "tags": m.tags,
        "state": {"kind": s.kind, "parts": s.parts, "digest": s.digest, "chunked": s.chunked},
        "branch": m.branch,
        "parent": m.parent,
        "run_id": m.run_id,
        "tokens": tokens,
        "cpstore": m.cpstore,
        "effects": m.effects,
        "harness": m.harness,
        "metadata": meta,
        "call_graph": m.call_graph,
        "transcript": m.transcript,
        "observations": m.observations,
        "ledger_sealed": m.ledger_sealed,
    }
