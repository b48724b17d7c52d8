"""Packed record formats (docs/format.md, version 1) and their result types.

Records are fixed width and little-endian so that millions of them live in one
contiguous buffer the native core can walk and LMDB can hand out without a
copy. Every layout here must match ``csrc/cpstore.c``; the golden tests pin
the bytes.
"""

from __future__ import annotations

import contextlib
import enum
import math
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NewType

import xxhash

from cpstore.errors import RecordFormatError
from cpstore.native.canonical import encode_value

__all__ = [
    "DIGEST_SIZE",
    "FORMAT_VERSION",
    "NONE",
    "PROVENANCE_CODES",
    "RECORD_FIELDS",
    "RECORD_SIZE",
    "REFUSED_TAIL",
    "SEQ_MAGIC",
    "STEP_LIMIT",
    "Digest",
    "Divergence",
    "DivergenceKind",
    "KindTable",
    "Provenance",
    "RecordType",
    "TokenScan",
    "field_names",
    "kind_code",
    "kind_name",
    "number_value",
    "pack_decision",
    "pack_effect",
    "pack_observation",
    "pack_refused",
    "pack_token",
    "pack_token_value",
    "provenance_name",
    "record_count",
    "seq_prefix",
    "seq_trailer",
    "step_value",
    "string_digest",
    "unpack_decision",
    "unpack_effect",
    "unpack_observation",
    "unpack_token",
    "value_digest",
]

#: Version of every format in docs/format.md; bumped on any change of bytes.
FORMAT_VERSION = 1
#: Bytes in a digest (XXH3-128, big-endian canonical form).
DIGEST_SIZE = 16
#: The first four bytes hashed by every sequence digest.
SEQ_MAGIC = b"CPSQ"
#: "No such record" in scan results (``CP_NONE`` in C).
NONE = 2**64 - 1

#: A raw 16-byte XXH3-128 digest; hex strings are plain ``str``.
Digest = NewType("Digest", bytes)


class RecordType(enum.IntEnum):
    """Record types of the packed formats (``CP_REC_*`` in C)."""

    TOKEN = 1
    OBSERVATION = 2
    DECISION = 3
    EFFECT = 4


class Provenance(enum.IntEnum):
    """Where a nondeterminism token's value came from (seed 002)."""

    RECORDED = 1
    LIVE = 2


#: Provenance as run documents and the recorder name it.
PROVENANCE_CODES: Mapping[str, Provenance] = MappingProxyType(
    {"recorded": Provenance.RECORDED, "live": Provenance.LIVE}
)
_PROVENANCE_NAMES = {int(code): name for name, code in PROVENANCE_CODES.items()}


def provenance_name(code: int) -> str:
    """The name of provenance ``code``; ``invalid#N`` for a code no recorder writes."""
    return _PROVENANCE_NAMES.get(int(code), f"invalid#{int(code)}")


#: Steps are ints in ``[0, STEP_LIMIT)`` wherever they are taken (recorder, run
#: documents, records): a step fits a signed 64-bit column, and never meets the
#: all-ones ``NONE`` of the record formats.
STEP_LIMIT = 2**63


def step_value(value: object) -> int | None:
    """``value`` as a step: its int value when it is an int (not a bool) in
    ``[0, STEP_LIMIT)``, judged by that value (an int subclass's own comparisons may lie:
    one answering True to every bound check was stored as -1, review81); else None. Every
    place a step is taken asks this and raises its own error. Its type is asked, not
    ``isinstance``: an object answers that through its ``__class__`` (``Mock(spec=int)``
    does), and ``int.__index__`` then raised a bare TypeError (review83)."""
    kind = type(value)
    if issubclass(kind, int) and kind is not bool:
        step = int.__index__(value)  # type: ignore[arg-type]
        if 0 <= step < STEP_LIMIT:
            return step
    return None


def number_value(value: object) -> Any:
    """An int or float subclass's own value (``int.__index__``, ``float.__float__``: never
    its own ``__int__``, ``__float__``, comparisons or arithmetic, any of which may lie);
    a plain int, float or bool, or any other object, as it is. The one reading of a
    number a run holds (a step, a seq, a pin) wherever it is taken (review83: the
    recorder read a pin by its ``__float__``, so a NaN whose ``__float__`` said 2.0 was
    recorded pinned at 2.0)."""
    kind = type(value)
    if kind is int or kind is float or kind is bool:
        return value
    if issubclass(kind, int):
        return int.__index__(value)  # type: ignore[arg-type]
    if issubclass(kind, float):
        return float.__float__(value)  # type: ignore[arg-type]
    return value


class DivergenceKind(enum.IntEnum):
    """Outcome of a first-divergence comparison (``CP_DIV_*`` in C)."""

    EQUAL = 0
    RECORD = 1
    COUNT = 2


RECORD_SIZE: Mapping[RecordType, int] = {
    RecordType.TOKEN: 32,
    RecordType.OBSERVATION: 56,
    RecordType.DECISION: 32,
    RecordType.EFFECT: 48,
}

#: Field (name, offset, size) per record type; field i is bit i of a mask.
RECORD_FIELDS: Mapping[RecordType, tuple[tuple[str, int, int], ...]] = {
    RecordType.TOKEN: (
        ("seq", 0, 8),
        ("kind", 8, 4),
        ("provenance", 12, 1),
        ("value", 16, 16),
        ("reserved", 13, 3),
    ),
    RecordType.OBSERVATION: (
        ("step", 0, 8),
        ("pinned_at", 8, 8),
        ("flags", 16, 4),
        ("source", 24, 16),
        ("payload", 40, 16),
        ("reserved", 20, 4),
    ),
    RecordType.DECISION: (
        ("step", 0, 8),
        ("node", 16, 16),
        ("reserved", 8, 8),
    ),
    RecordType.EFFECT: (
        ("seq", 0, 8),
        ("target", 16, 16),
        ("payload", 32, 16),
        ("reserved", 8, 8),
    ),
}

_TOKEN = struct.Struct("<QIB3x16s")
_OBSERVATION = struct.Struct("<QdII16s16s")
_DECISION = struct.Struct("<Q8x16s")
_EFFECT = struct.Struct("<Q8x16s16s")
_SEQ_PREFIX = struct.Struct("<4sHHII")
_SEQ_TRAILER = struct.Struct("<Q")

#: Kinds with fixed codes; any other kind name gets a hashed code (docs/format.md).
STANDARD_KINDS: Mapping[str, int] = {"rng": 1, "clock": 2, "tool": 3, "env": 4}
_KIND_NAMES = {code: name for name, code in STANDARD_KINDS.items()}
_OBS_PINNED = 1


def field_names(record_type: RecordType, mask: int) -> tuple[str, ...]:
    """Names of the fields whose bits are set in ``mask``."""
    return tuple(name for i, (name, _, _) in enumerate(RECORD_FIELDS[record_type]) if mask >> i & 1)


def value_digest(value: Any) -> Digest:
    """Digest of the canonical encoding of ``value``."""
    return Digest(xxhash.xxh3_128_digest(encode_value(value)))


def encoding_digest(encoded: bytes) -> Digest:
    """Digest of a canonical encoding (:func:`value_digest` of the value it encodes)."""
    return Digest(xxhash.xxh3_128_digest(encoded))


_REFUSED_DIGEST = value_digest(None)
#: Bytes 12..32 of every :func:`pack_refused` record (provenance, reserved, digest).
REFUSED_TAIL = bytes((int(Provenance.RECORDED), 0, 0, 0)) + _REFUSED_DIGEST


def string_digest(text: str) -> Digest:
    """Digest standing for an opaque string (a source, target or digest string)."""
    return value_digest(text)


def kind_code(kind: str) -> int:
    """The 32-bit code of a token kind: fixed for the standard kinds, hashed otherwise."""
    if not isinstance(kind, str) or not kind:
        raise RecordFormatError("token kind must be a non-empty str", got=kind)
    code = STANDARD_KINDS.get(kind)
    if code is not None:
        return code
    try:
        raw = kind.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise RecordFormatError(
            "token kind must be valid Unicode text (it holds a lone surrogate)",
            got=kind[exc.start : exc.end],
        ) from None
    return 0x80000000 | (xxhash.xxh3_64_intdigest(raw) & 0x7FFFFFFF)


def kind_name(code: int) -> str | None:
    """The name of a standard kind code, or ``None`` for a hashed one."""
    return _KIND_NAMES.get(code)


class KindTable:
    """Kind names and codes of one token log; two names never share a hashed code.

    Standard kinds have fixed codes; any other name gets a 31-bit hashed code
    (docs/format.md), and the table keeps the name so the log can say it back.
    A second name hashing to a code already taken would compare equal to the
    first, so it is refused.
    """

    def __init__(self, names: Mapping[int, str] | None = None) -> None:
        self.names: dict[int, str] = dict(names or {})
        """Hashed code -> kind name."""
        self._codes: dict[str, int] = {}

    def code(self, kind: str) -> int:
        """The code of ``kind``; RecordFormatError when its hash collides with another kind."""
        code = self._codes.get(kind) if isinstance(kind, str) else None  # kind_code says why
        if code is None:
            code = kind_code(kind)
            if kind_name(code) is None:
                known = self.names.setdefault(code, kind)
                if known != kind:
                    raise RecordFormatError(
                        "two token kinds hash to the same code", expected=known, got=kind
                    )
            self._codes[kind] = code
        return code

    def mark(self) -> tuple[int, int]:
        """Where the table stands now, for :meth:`undo`."""
        return len(self.names), len(self._codes)

    def undo(self, mark: tuple[int, int]) -> None:
        """Forget every kind learned since ``mark`` (a refused batch records no kind)."""
        for code in list(self.names)[mark[0] :]:  # dicts keep insertion order
            del self.names[code]
        for name in list(self._codes)[mark[1] :]:
            del self._codes[name]

    def label(self, code: int) -> str:
        """The kind's name, or ``kind#<code>`` for a hashed code this table never saw."""
        return kind_name(code) or self.names.get(code) or f"kind#{code}"


def _u64(value: int, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**64:
        raise RecordFormatError(f"{name} must be an int in [0, 2**64)", got=value)
    return value


def _digest(value: bytes, name: str) -> bytes:
    if not isinstance(value, (bytes, bytearray)) or len(value) != DIGEST_SIZE:
        raise RecordFormatError(
            f"{name} must be a {DIGEST_SIZE}-byte digest", expected=DIGEST_SIZE, got=value
        )
    return bytes(value)


def pack_token(seq: int, kind: str | int, provenance: Provenance | int, digest: bytes) -> bytes:
    """One 32-byte token record; ``digest`` is the value digest."""
    code = kind if isinstance(kind, int) and not isinstance(kind, bool) else kind_code(kind)  # type: ignore[arg-type]
    if not 0 < code < 2**32:
        raise RecordFormatError("token kind code must be in [1, 2**32)", got=code)
    prov = Provenance(provenance)
    return _TOKEN.pack(_u64(seq, "seq"), code, prov, _digest(digest, "value digest"))


def pack_token_value(seq: int, kind: str, provenance: Provenance | int, value: Any) -> bytes:
    """One token record for ``value`` (hashed through the canonical encoding)."""
    return pack_token(seq, kind, provenance, value_digest(value))


def pack_refused(seq: int, kind: str | int) -> bytes:
    """The record a replay cursor keeps for a request it refused (audit31): at the
    cursor's position, the kind asked for, recorded provenance and the value None, so
    a replay that swallowed the refusal is never equal to its recording there."""
    return pack_token(seq, kind, Provenance.RECORDED, _REFUSED_DIGEST)


def unpack_token(record: bytes) -> tuple[int, int, Provenance | int, Digest]:
    """(seq, kind code, provenance, value digest) of one token record."""
    seq, kind, prov, digest = _TOKEN.unpack(record)
    with contextlib.suppress(ValueError):  # unknown bytes stay ints for the caller to see
        prov = Provenance(prov)
    return seq, kind, prov, Digest(digest)


def pack_observation(
    step: int, source_digest: bytes, payload_digest: bytes, pinned_at: float | None
) -> bytes:
    """One 56-byte observation record; ``pinned_at`` None means re-fetched."""
    if pinned_at is None:
        flags, when = 0, 0.0
    else:
        if isinstance(pinned_at, bool) or not isinstance(pinned_at, (int, float)):
            raise RecordFormatError("pinned_at must be a number or None", got=pinned_at)
        when = float(pinned_at)
        if not math.isfinite(when):
            raise RecordFormatError("pinned_at must be finite", got=pinned_at)
        flags, when = _OBS_PINNED, when + 0.0
    return _OBSERVATION.pack(
        _u64(step, "step"),
        when,
        flags,
        0,
        _digest(source_digest, "source digest"),
        _digest(payload_digest, "payload digest"),
    )


def unpack_observation(record: bytes) -> tuple[int, Digest, Digest, float | None]:
    """(step, source digest, payload digest, pinned_at or None)."""
    step, when, flags, _, source, payload = _OBSERVATION.unpack(record)
    return step, Digest(source), Digest(payload), (when if flags & _OBS_PINNED else None)


def pack_decision(step: int, node_digest: bytes) -> bytes:
    """One 32-byte call-graph decision record."""
    return _DECISION.pack(_u64(step, "step"), _digest(node_digest, "node digest"))


def unpack_decision(record: bytes) -> tuple[int, Digest]:
    """(step, node digest)."""
    step, node = _DECISION.unpack(record)
    return step, Digest(node)


def pack_effect(seq: int, target_digest: bytes, payload_digest: bytes) -> bytes:
    """One 48-byte side-effect record."""
    return _EFFECT.pack(
        _u64(seq, "seq"),
        _digest(target_digest, "target digest"),
        _digest(payload_digest, "payload digest"),
    )


def unpack_effect(record: bytes) -> tuple[int, Digest, Digest]:
    """(seq, target digest, payload digest)."""
    seq, target, payload = _EFFECT.unpack(record)
    return seq, Digest(target), Digest(payload)


def record_type(value: Any) -> RecordType:
    """Coerce to :class:`RecordType` or raise :class:`RecordFormatError`."""
    # bool and float would coerce silently (True -> TOKEN); a record type is an int.
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return RecordType(value)
        except ValueError:
            pass
    raise RecordFormatError(
        "unknown record type", where="rtype", expected=[int(t) for t in RecordType], got=value
    )


def record_count(rtype: RecordType, length: int, *, where: str = "buffer") -> int:
    """Records in ``length`` bytes, or :class:`RecordFormatError` if not whole."""
    size = RECORD_SIZE[rtype]
    count, rest = divmod(length, size)
    if rest:
        raise RecordFormatError(
            f"length is not a whole number of {rtype.name.lower()} records",
            where=where,
            expected=f"a multiple of {size} bytes",
            got=f"{length} bytes",
        )
    return count


def seq_prefix(rtype: RecordType) -> bytes:
    """The 16 bytes a sequence digest hashes before the records."""
    return _SEQ_PREFIX.pack(SEQ_MAGIC, FORMAT_VERSION, rtype, RECORD_SIZE[rtype], 0)


def seq_trailer(count: int) -> bytes:
    """The 8 bytes a sequence digest hashes after the records."""
    return _SEQ_TRAILER.pack(count)


def pack_tokens(tokens: Iterable[tuple[int, str, Provenance | int, Any]]) -> bytes:
    """Pack (seq, kind, provenance, value) tuples into one token buffer."""
    return b"".join(pack_token_value(s, k, p, v) for s, k, p, v in tokens)


@dataclass(frozen=True)
class Divergence:
    """Where two packed record arrays first differ."""

    kind: DivergenceKind
    """EQUAL, RECORD (a record differs) or COUNT (one is a prefix of the other)."""
    index: int | None
    """The first differing record, or the shorter count; None when EQUAL."""
    fields: tuple[str, ...]
    """Names of the fields that differ at ``index`` (empty unless RECORD)."""
    count_a: int
    """Records in the first array."""
    count_b: int
    """Records in the second array."""

    @property
    def equal(self) -> bool:
        """True when the arrays are equal in every compared field."""
        return self.kind is DivergenceKind.EQUAL


@dataclass(frozen=True)
class TokenScan:
    """What one pass over a packed token log found (``cp_token_scan``)."""

    count: int
    """Records in the log."""
    first_live: int | None
    """First record whose provenance is not RECORDED."""
    live_count: int
    """Records whose provenance is not RECORDED."""
    first_seq_break: int | None
    """First record ``i`` whose seq is not ``i``."""
    first_malformed: int | None
    """First record with kind 0, an unknown provenance or non-zero reserved bytes."""
