"""The run model: a run as a runtime, a replay engine and the validator hold it.

A :class:`Run` holds its token stream *packed* (32-byte TOKEN records in one
buffer, :class:`PackedTokens`) so that validating millions of tokens never
builds one Python object per token. Constructing one checks every field the
way a run document is checked (:mod:`cpstore.run.document`).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from cpstore.errors import (
    CanonicalEncodingError,
    DocumentError,
    InvalidInputError,
    RecordFormatError,
)
from cpstore.native.args import as_bytes_view, check_text
from cpstore.native.canonical import decode_value, encode_value
from cpstore.native.records import (
    PROVENANCE_CODES,
    RECORD_SIZE,
    KindTable,
    RecordType,
    encoding_digest,
    kind_name,
    number_value,
    pack_token,
    provenance_name,
    record_count,
    step_value,
    unpack_token,
    value_digest,
)

__all__ = [
    "Effect",
    "Observation",
    "PackedTokens",
    "ReplayMode",
    "Run",
    "Token",
    "TokenInfo",
    "TokenPacker",
    "check_canonical",
    "check_items",
    "check_node",
    "check_step",
    "check_str",
    "check_uint",
    "fields_of",
    "list_of",
    "pinned_or_none",
]

_TOKEN_SIZE = RECORD_SIZE[RecordType.TOKEN]


class ReplayMode(enum.Enum):
    """How a replay resolved nondeterminism tokens (seed 002)."""

    STRICT = "strict"
    """Every token from the recorded log; anything else raises."""
    BEST_EFFORT = "best_effort"
    """Debugging only: may fall through to live sources; evidence of nothing."""


@dataclass(frozen=True)
class Token:
    """One nondeterminism token as a replay engine or a document states it."""

    seq: int
    """Position in the token log; a recording numbers them 0, 1, 2, ..."""
    kind: str
    """Kind of nondeterminism: ``rng``, ``clock``, ``tool``, ``env`` or any other name."""
    value: Any
    """The resolved value; compared by type and by value (canonical encoding)."""
    provenance: str = "recorded"
    """``"recorded"`` (resolved from the log) or ``"live"`` (from a live source)."""


@dataclass(frozen=True)
class TokenInfo:
    """What is known of one packed token, for findings and messages."""

    seq: int
    """The record's seq field."""
    kind: str
    """Kind name, or ``"kind#<code>"`` for a hashed kind whose name is unknown."""
    provenance: str
    """``"recorded"``, ``"live"`` or ``"invalid#<byte>"``."""
    value_digest: str
    """Hex digest of the value's canonical encoding."""
    value: Any = None
    """The value itself when known (see :attr:`has_value`)."""
    has_value: bool = False
    """True when :attr:`value` holds the real value (it may legitimately be None)."""


@dataclass(frozen=True)
class Observation:
    """One external read (seed 000): compared on (step, source, payload_digest); a replayed
    read pinned at another time than the recorded one was re-fetched (as a null pin)."""

    step: int
    """Agent step that made the read."""
    source: str
    """What was read (tool, clock, config...)."""
    payload_digest: str
    """Digest of what the read returned; an opaque string compared exactly."""
    pinned_at: float | None
    """When the payload was pinned in the log; None means re-fetched (unprovable)."""


@dataclass(frozen=True)
class Effect:
    """One side effect: an entry of the sealed ledger, or one a replay attempted."""

    seq: int
    """Position in the ledger."""
    target: str
    """Where the effect goes."""
    payload_digest: str
    """Digest of what was written; an opaque string compared exactly."""


@dataclass(frozen=True, eq=False)
class PackedTokens:
    """A token stream as one buffer of packed TOKEN records (docs/format.md).

    ``records`` is used as given (no copy), so a replay engine can hand over
    the buffer it built and the validator compares it in one native call.
    ``values`` (one per record) and ``kind_names`` (names of hashed kind
    codes) are optional: validate compares the records alone, and uses values only to
    make findings readable; a :class:`ReplayCursor` serves them, each block checked
    against its records' digests first.
    """

    records: bytes | bytearray | memoryview
    """Packed 32-byte TOKEN records."""
    _: KW_ONLY
    values: Sequence[Any] | None = None
    """The value of each record, or None when only digests are known."""
    kind_names: Mapping[int, str] = field(default_factory=dict)
    """Names of kind codes that are not standard (``rng``, ``clock``, ``tool``, ``env``)."""

    def __post_init__(self) -> None:
        view = as_bytes_view(self.records, "tokens.records")
        count = record_count(RecordType.TOKEN, len(view), where="tokens.records")
        if self.values is not None and len(self.values) != count:
            raise InvalidInputError(
                "tokens.values must hold one value per record",
                where="tokens.values",
                expected=count,
                got=len(self.values),
            )
        self._check_kind_names()

    def _check_kind_names(self) -> None:
        """Kind codes: ints in [0, 2**32), by value, held as plain ints (the names are
        left as given: audit68).

        review83: taken unchecked, a str or ``Mock(spec=int)`` key was kept, and the
        ``.cprun`` writer's ``int(k)`` raised a bare ValueError or TypeError, the
        validator's a TypeError; an int subclass's code was its ``__int__`` there."""
        names = self.kind_names
        if not isinstance(names, Mapping):
            raise InvalidInputError(
                "tokens.kind_names must map kind codes to names",
                where="tokens.kind_names",
                got=type(names).__name__,
            )
        plain = True
        for code in names:
            kind = type(code)
            if not issubclass(kind, int) or kind is bool or not 0 <= int.__index__(code) < 2**32:
                raise InvalidInputError(
                    "tokens.kind_names must be keyed by kind codes (ints in [0, 2**32))",
                    where="tokens.kind_names",
                    got=code,
                )
            plain = plain and kind is int
        if not plain:
            object.__setattr__(self, "kind_names", {int.__index__(c): n for c, n in names.items()})

    def __len__(self) -> int:
        return memoryview(self.records).nbytes // _TOKEN_SIZE

    def view(self) -> memoryview:
        """A flat byte view of the records (no copy)."""
        return as_bytes_view(self.records, "tokens.records")

    def info(self, index: int) -> TokenInfo:
        """What is known of record ``index``."""
        view = self.view()
        seq, code, prov, dig = unpack_token(
            bytes(view[index * _TOKEN_SIZE : (index + 1) * _TOKEN_SIZE])
        )
        name = kind_name(code) or self.kind_names.get(code) or f"kind#{code}"
        pname = provenance_name(prov)
        if self.values is None:
            return TokenInfo(seq, name, pname, dig.hex())
        # A value is shown only if it is the record's (review76): values are taken
        # unchecked, and a finding said "recorded rng 1 vs replayed rng 1" for a record
        # of 2 given the value 1, or raised a bare CanonicalEncodingError out of
        # validate for a damaged .cprun values section. Otherwise the digest is shown.
        # Shown as its canonical value (review79): a -0.0, a tuple or a subclass given in a
        # Python list showed as given, where the same run read from a document shows 0.0,
        # a list, the plain value: the findings, and so the decision id, differed.
        try:
            encoded = encode_value(self.values[index])
            shown = encoding_digest(encoded) == dig
            value = decode_value(encoded) if shown else None
        except (CanonicalEncodingError, InvalidInputError):
            shown = False
        if not shown:
            return TokenInfo(seq, name, pname, dig.hex())
        return TokenInfo(seq, name, pname, dig.hex(), value, True)

    @classmethod
    def from_tokens(cls, tokens: Iterable[Token]) -> PackedTokens:
        """Pack :class:`Token` objects (a convenience for tests and small runs)."""
        packer = TokenPacker()
        for i, token in enumerate(tokens):
            if not isinstance(token, Token):
                raise InvalidInputError(
                    "tokens must be Token objects", where=f"tokens[{i}]", got=type(token).__name__
                )
            packer.add(token.seq, token.kind, token.value, token.provenance, f"tokens[{i}]")
        return packer.finish()


class TokenPacker:
    """Appends token records to one growing buffer (memory follows input)."""

    def __init__(self, *, kinds: KindTable | None = None) -> None:
        self.buffer = bytearray()
        self.values: list[Any] = []
        self._kinds = kinds if kinds is not None else KindTable()

    def add(self, seq: Any, kind: Any, value: Any, provenance: Any, where: str) -> None:
        seq = check_uint(seq, f"{where}.seq")  # its value, packed (review83)
        if not isinstance(kind, str) or not kind:
            raise DocumentError(
                "token kind must be a non-empty string", where=f"{where}.kind", got=kind
            )
        try:
            code = self._kinds.code(kind)
        except RecordFormatError as exc:
            # Two names, one 31-bit code: they would compare equal. Refuse.
            raise DocumentError(
                exc.what, where=f"{where}.kind", expected=exc.expected, got=kind
            ) from None
        prov = PROVENANCE_CODES.get(provenance) if isinstance(provenance, str) else None
        if prov is None:
            raise DocumentError(
                "token provenance must be 'recorded' or 'live'",
                where=f"{where}.provenance",
                got=provenance,
            )
        try:
            vd = value_digest(value)
        except CanonicalEncodingError as exc:
            raise DocumentError(
                "token value cannot be canonically encoded", where=f"{where}.value", got=exc.what
            ) from None
        self.buffer += pack_token(seq, code, prov, vd)
        self.values.append(value)

    def finish(self) -> PackedTokens:
        return PackedTokens(
            bytes(self.buffer), values=self.values, kind_names=dict(self._kinds.names)
        )


@dataclass(frozen=True)
class Run:
    """A recorded run or a replay, as the validator sees it (docs/run-document.md)."""

    run_id: str
    """The run this is (or replays)."""
    step: int
    """The step of the checkpoint (R) or the step the replay reached (P)."""
    state_digest: str
    """Digest of the post-state; an opaque string compared exactly."""
    _: KW_ONLY
    tokens: PackedTokens = field(default_factory=lambda: PackedTokens(b""))
    """The nondeterminism-token stream, packed."""
    observations: tuple[Observation, ...] = ()
    """External reads in order."""
    call_graph: tuple[Mapping[str, Any], ...] = ()
    """Decision nodes in order; each has at least ``step`` and ``node``."""
    transcript_digest: str | None = None
    """Digest of the emitted transcript, or None when none was recorded."""
    effects: tuple[Effect, ...] = ()
    """R: the side-effect ledger. P: the effects the replay attempted."""
    ledger_sealed: bool = False
    """R: whether the ledger was sealed at checkpoint time."""
    harness_accesses: tuple[Any, ...] = ()
    """P: the replay harness's own accesses (seed 004); should be empty."""
    provenance_tags: tuple[str, ...] = ()
    """Tags; one starting with ``replay:`` marks a recording of a replay (R: a
    REPLAY_OF_REPLAY); P's ``replay:<checkpoint id>`` names the checkpoint it replayed,
    a CHECKPOINT_MISMATCH against another stored one (ident72)."""
    mode: ReplayMode | None = None
    """P: how the replay resolved tokens; None means not declared (not strict)."""

    def __post_init__(self) -> None:
        check_str(self.run_id, "run_id")
        step = check_step(self.step, "step")
        if type(self.step) is not int:  # held as its value (review83, _plain_fields)
            object.__setattr__(self, "step", step)
        check_str(self.state_digest, "state_digest")
        if not isinstance(self.tokens, PackedTokens):
            raise DocumentError(
                "tokens must be PackedTokens", where="tokens", got=type(self.tokens).__name__
            )
        check_items(self.observations, Observation, "observations")
        check_items(self.effects, Effect, "effects")
        # Every item field as a run document checks it: the validator counts any
        # pinned_at but None as pinned, so a NaN "no pin" (or a str) was an ACCEPT
        # through a Run or a packed run file, where a document is refused (audit31).
        for i, obs in enumerate(self.observations):
            check_step(obs.step, f"observations[{i}].step")
            check_str(obs.source, f"observations[{i}].source")
            check_str(obs.payload_digest, f"observations[{i}].payload_digest")
            pinned_or_none(obs.pinned_at, f"observations[{i}].pinned_at")
        for i, eff in enumerate(self.effects):
            check_uint(eff.seq, f"effects[{i}].seq")
            check_str(eff.target, f"effects[{i}].target")
            check_str(eff.payload_digest, f"effects[{i}].payload_digest")
        if not isinstance(self.call_graph, tuple):
            raise DocumentError(
                "call_graph must be a tuple", where="call_graph", got=type(self.call_graph).__name__
            )
        for i, node in enumerate(self.call_graph):
            check_node(node, f"call_graph[{i}]")
        self._plain_fields()
        if self.transcript_digest is not None:
            check_str(self.transcript_digest, "transcript_digest")
        if not isinstance(self.ledger_sealed, bool):
            raise DocumentError(
                "ledger_sealed must be a bool", where="ledger_sealed", got=self.ledger_sealed
            )
        if not isinstance(self.harness_accesses, tuple):
            raise DocumentError(
                "harness_accesses must be a tuple",
                where="harness_accesses",
                got=type(self.harness_accesses).__name__,
            )
        # Canonical values, as a document's are (review76: an object() or a set was
        # taken here, and the msgpack writer died of a bare TypeError mid-stream).
        for i, access in enumerate(self.harness_accesses):
            check_canonical(access, f"harness_accesses[{i}]")
        if not all(map(_plain, self.harness_accesses)):  # as a call-graph node (review85)
            accesses = tuple(
                a if _plain(a) else decode_value(encode_value(a)) for a in self.harness_accesses
            )
            object.__setattr__(self, "harness_accesses", accesses)
        if not isinstance(self.provenance_tags, tuple):
            raise DocumentError(
                "provenance_tags must be a tuple",
                where="provenance_tags",
                got=type(self.provenance_tags).__name__,
            )
        for i, tag in enumerate(self.provenance_tags):
            check_str(tag, f"provenance_tags[{i}]")
        if self.mode is not None and not isinstance(self.mode, ReplayMode):
            raise DocumentError("mode must be a ReplayMode or None", where="mode", got=self.mode)

    def _plain_fields(self) -> None:
        """Hold each checked step, seq and pin as the plain value it was checked as.

        review83: the object given was kept, and the validator and the JSON and msgpack
        writers read its value, but the canonical encoder (the ``.cprun`` writer, the
        call graph's comparison) reads an int subclass by its own ``__int__`` and a float
        subclass by its own ``__add__``: a replay at step 7 by value, 2 by ``__int__``,
        was a REJECT as given and an ACCEPT as its ``.cprun`` copy."""
        if not all(
            type(o.step) is int and (o.pinned_at is None or type(o.pinned_at) in (int, float))
            for o in self.observations
        ):
            plain_obs = tuple(
                Observation(number_value(o.step), o.source, o.payload_digest, _plain_pin(o))
                for o in self.observations
            )
            object.__setattr__(self, "observations", plain_obs)
        if not all(type(e.seq) is int for e in self.effects):
            plain_effects = tuple(
                Effect(number_value(e.seq), e.target, e.payload_digest) for e in self.effects
            )
            object.__setattr__(self, "effects", plain_effects)
        # A node holding any other type (a dict subclass, a Mapping, a bytearray) is held
        # as its canonical value, read once: validate encoded it again at each call, so a
        # dict subclass whose items() answered otherwise at each read was an ACCEPT in
        # memory where its document, written from one read, was a REJECT (review85).
        if not all(
            type(n) is dict and type(n["step"]) is int and _plain(n) for n in self.call_graph
        ):
            nodes = tuple(
                n
                if type(n) is dict and type(n["step"]) is int and _plain(n)
                else decode_value(encode_value({**n, "step": number_value(n["step"])}))
                for n in self.call_graph
            )
            object.__setattr__(self, "call_graph", nodes)


# -- field checks ---------------------------------------------------------------


def check_step(value: Any, where: str) -> int:
    """A step: an int in ``[0, STEP_LIMIT)`` (:data:`cpstore.native.records.STEP_LIMIT`)."""
    step = step_value(value)
    if step is None:
        raise DocumentError("must be an integer in [0, 2**63)", where=where, got=value)
    return step


def check_uint(value: Any, where: str) -> int:
    """An int in ``[0, 2**64)``, judged by its value (review83: an int subclass's own
    comparisons were asked, as the steps' were before review81)."""
    kind = type(value)
    if issubclass(kind, int) and kind is not bool and 0 <= int.__index__(value) < 2**64:
        return int.__index__(value)
    raise DocumentError("must be an integer in [0, 2**64)", where=where, got=value)


def _plain_pin(obs: Observation) -> Any:
    return None if obs.pinned_at is None else number_value(obs.pinned_at)


def check_str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise DocumentError("must be a string", where=where, got=type(value).__name__)
    return check_text(value, where, DocumentError)


def check_items(items: Any, cls: type, where: str) -> None:
    if not isinstance(items, tuple):
        raise DocumentError(f"{where} must be a tuple", where=where, got=type(items).__name__)
    for i, item in enumerate(items):
        if not isinstance(item, cls):
            raise DocumentError(
                f"must be {cls.__name__}", where=f"{where}[{i}]", got=type(item).__name__
            )


#: The types a value is held as it is: its encoder reads them without their own methods.
_PLAIN = frozenset({dict, list, tuple, int, float, str, bytes, bool, type(None)})


def _plain(value: Any) -> bool:
    """Whether ``value`` holds only :data:`_PLAIN` types (keys too)."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind not in _PLAIN:
            return False
        if kind is dict:
            if not _PLAIN.issuperset(map(type, item)):
                return False
            stack.extend(item.values())
        elif kind is list or kind is tuple:
            stack.extend(item)
    return True


def check_canonical(value: Any, where: str) -> None:
    """DocumentError at ``where`` unless ``value`` has a canonical encoding."""
    try:
        encode_value(value)
    except CanonicalEncodingError as exc:
        raise DocumentError("cannot be canonically encoded", where=where, got=exc.what) from None


def check_node(node: Any, where: str) -> None:
    if not isinstance(node, Mapping):
        raise DocumentError(
            "a decision node must be a mapping", where=where, got=type(node).__name__
        )
    if "step" not in node:
        raise DocumentError("missing field", where=f"{where}.step")
    if "node" not in node:
        raise DocumentError("missing field", where=f"{where}.node")
    check_step(node["step"], f"{where}.step")
    try:
        encode_value(dict(node))
    except CanonicalEncodingError as exc:
        raise DocumentError(
            "decision node cannot be canonically encoded", where=where, got=exc.what
        ) from None


def fields_of(
    obj: Any, where: str, required: Sequence[str], optional: Sequence[str] = ()
) -> Mapping[str, Any]:
    if not isinstance(obj, Mapping):
        raise DocumentError("must be an object", where=where, got=type(obj).__name__)
    for key in obj:
        if key not in required and key not in optional:
            raise DocumentError(
                "unknown field",
                where=f"{where}.{key}" if where else str(key),
                expected=sorted([*required, *optional]),
            )
    for key in required:
        if key not in obj:
            raise DocumentError("missing field", where=f"{where}.{key}" if where else key)
    return obj


def list_of(obj: Any, where: str) -> list[Any]:
    if not isinstance(obj, list):
        raise DocumentError("must be a list", where=where, got=type(obj).__name__)
    return obj


def pinned_or_none(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not issubclass(type(value), (int, float)):
        raise DocumentError("must be a number or null", where=where, got=value)
    try:
        pinned = float(number_value(value))  # its value, not its own __float__ (review83)
    except OverflowError:  # an int past the float range (JSON ints are unbounded)
        raise DocumentError(
            "must be a number in the float range", where=where, got=str(value)[:40]
        ) from None
    if not math.isfinite(pinned):
        raise DocumentError("must be finite", where=where, got=value)
    return pinned
