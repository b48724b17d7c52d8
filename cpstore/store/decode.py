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
from typing import Any, cast

import msgpack
import msgspec

from cpstore.errors import IntegrityError
from cpstore.native.canonical import _ext_hook

__all__ = ["ALIKE_SCALARS", "DECODE_ERRORS", "decode_manifest_map", "decode_part", "decoded_alike"]

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


def decoded_alike(value: Any) -> bool:
    """True when msgpack.unpackb (``strict_map_key=False``, ``_ext_hook``) builds exactly
    ``value`` from the bytes msgspec decoded to it.

    The two decoders differ only where cpstore's canonical encoder never
    writes: msgspec makes an array map key a tuple (msgpack refuses it), an
    ext -1 a datetime (msgpack: a ``msgpack.Timestamp``), and nests deeper.
    Such a value holds a tuple or a datetime, or is too deep to walk here.
    """
    try:
        return _alike(value)
    except RecursionError:
        return False


def _alike(value: Any) -> bool:
    kind = type(value)
    if kind in ALIKE_SCALARS:
        return True
    if kind is list:
        return all(map(_alike, value))
    if kind is dict:
        return all(type(k) in ALIKE_SCALARS for k in value) and all(map(_alike, value.values()))
    return False


def _alike_manifest(m: dict[str, Any]) -> bool:
    """:func:`decoded_alike` of a manifest map, walked only where values are free.

    Every field but ``metadata`` has a fixed shape that the state and rest
    checks enforce (a tuple or datetime there is refused by them too); so the
    keys of the map and of ``state``, and ``metadata`` whole, are checked here.
    """
    try:
        "".join(m)
        state = m.get("state")
        if type(state) is dict:
            "".join(state)
    except TypeError:
        return False  # a non-str key (msgpack's decode tells what it is)
    meta = m.get("metadata")
    return not meta or decoded_alike(meta)


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
    try:
        m = _decode(data)
    except (ValueError, TypeError, RecursionError, msgspec.MsgspecError):
        return _decode_manifest_slow(cid, data)
    if type(m) is not dict or not _alike_manifest(m):
        return _decode_manifest_slow(cid, data)
    return m
