"""Run documents (docs/run-document.md) and the in-memory run they describe.

A run document is the interchange format between a runtime, a replay engine
and the validator: one JSON object or msgpack map with a ``format`` version
and the field names of the seeds. :func:`load_document` parses it into a
:class:`Run`, whose token stream is held *packed* (32-byte TOKEN records in
one buffer) so that validating millions of tokens never builds one Python
object per token. A replay engine that already has a packed buffer skips the
document entirely: ``Run(..., tokens=PackedTokens(buffer))``.

Parsing is strict: a missing field, a field of the wrong type, an unknown
field or an unknown ``format`` raises :class:`DocumentError` (or
:class:`FormatVersionError`) naming the field, never a verdict. Nothing is
allocated from a count the document declares; memory grows only with bytes
actually read, and :data:`MAX_DOCUMENT_BYTES` bounds those: parsing is not
streaming, and a document peaks at about 8x (JSON) to 11x (msgpack) its size
in memory (docs/run-document.md), so the limit is checked on the byte size
before anything is parsed.
"""

from __future__ import annotations

import enum
import json
import math
import os
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any, Union

import msgpack

from cpstore.errors import (
    CanonicalEncodingError,
    DocumentError,
    FormatVersionError,
    InvalidInputError,
    NotFoundError,
    RecordFormatError,
)
from cpstore.native.args import as_bytes_view, check_text
from cpstore.native.canonical import encode_value
from cpstore.native.records import (
    RECORD_SIZE,
    KindTable,
    Provenance,
    RecordType,
    kind_name,
    pack_token,
    record_count,
    unpack_token,
    value_digest,
)

__all__ = [
    "DOCUMENT_FORMAT",
    "MAX_DOCUMENT_BYTES",
    "Effect",
    "Observation",
    "PackedTokens",
    "ReplayMode",
    "Run",
    "Token",
    "TokenInfo",
    "dump_document",
    "load_document",
    "parse_document",
]

#: The run-document format version this cpstore reads and writes.
DOCUMENT_FORMAT = 1
#: Largest document :func:`load_document` reads, in bytes (``max_bytes=`` overrides it).
#: Parsing holds the whole document as Python objects: a token document peaks at
#: about 8x its size (JSON) to 11x (msgpack) in RSS, so 128 MiB keeps the peak
#: near 1.4 GiB (measured in docs/run-document.md, "Bounded memory").
MAX_DOCUMENT_BYTES = 128 << 20

_PROVENANCE = {"recorded": Provenance.RECORDED, "live": Provenance.LIVE}
_PROVENANCE_NAME = {int(v): k for k, v in _PROVENANCE.items()}
_TOKEN_SIZE = RECORD_SIZE[RecordType.TOKEN]

PathOrBytes = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview]


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
    """One external read (seed 000): compared on (step, source, payload_digest)."""

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
    codes) are optional and only make findings more readable.
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
        pname = _PROVENANCE_NAME.get(int(prov), f"invalid#{int(prov)}")
        if self.values is None:
            return TokenInfo(seq, name, pname, dig.hex())
        return TokenInfo(seq, name, pname, dig.hex(), self.values[index], True)

    @classmethod
    def from_tokens(cls, tokens: Iterable[Token]) -> PackedTokens:
        """Pack :class:`Token` objects (a convenience for tests and small runs)."""
        packer = _TokenPacker()
        for i, token in enumerate(tokens):
            if not isinstance(token, Token):
                raise InvalidInputError(
                    "tokens must be Token objects", where=f"tokens[{i}]", got=type(token).__name__
                )
            packer.add(token.seq, token.kind, token.value, token.provenance, f"tokens[{i}]")
        return packer.finish()


class _TokenPacker:
    """Appends token records to one growing buffer (memory follows input)."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.values: list[Any] = []
        self._kinds = KindTable()

    def add(self, seq: Any, kind: Any, value: Any, provenance: Any, where: str) -> None:
        _check_uint(seq, f"{where}.seq")
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
        prov = _PROVENANCE.get(provenance) if isinstance(provenance, str) else None
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
    """Tags; one starting with ``replay:`` marks a recording of a replay."""
    mode: ReplayMode | None = None
    """P: how the replay resolved tokens; None means not declared (not strict)."""

    def __post_init__(self) -> None:
        _check_str(self.run_id, "run_id")
        _check_uint(self.step, "step")
        _check_str(self.state_digest, "state_digest")
        if not isinstance(self.tokens, PackedTokens):
            raise DocumentError(
                "tokens must be PackedTokens", where="tokens", got=type(self.tokens).__name__
            )
        _check_items(self.observations, Observation, "observations")
        _check_items(self.effects, Effect, "effects")
        for i, obs in enumerate(self.observations):
            _check_str(obs.source, f"observations[{i}].source")
            _check_str(obs.payload_digest, f"observations[{i}].payload_digest")
        for i, eff in enumerate(self.effects):
            _check_str(eff.target, f"effects[{i}].target")
            _check_str(eff.payload_digest, f"effects[{i}].payload_digest")
        if not isinstance(self.call_graph, tuple):
            raise DocumentError(
                "call_graph must be a tuple", where="call_graph", got=type(self.call_graph).__name__
            )
        for i, node in enumerate(self.call_graph):
            _check_node(node, f"call_graph[{i}]")
        if self.transcript_digest is not None:
            _check_str(self.transcript_digest, "transcript_digest")
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
        if not isinstance(self.provenance_tags, tuple):
            raise DocumentError(
                "provenance_tags must be a tuple",
                where="provenance_tags",
                got=type(self.provenance_tags).__name__,
            )
        for i, tag in enumerate(self.provenance_tags):
            _check_str(tag, f"provenance_tags[{i}]")
        if self.mode is not None and not isinstance(self.mode, ReplayMode):
            raise DocumentError("mode must be a ReplayMode or None", where="mode", got=self.mode)


# -- field checks ---------------------------------------------------------------


def _check_uint(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**64:
        raise DocumentError("must be an integer in [0, 2**64)", where=where, got=value)
    return value


def _check_str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise DocumentError("must be a string", where=where, got=type(value).__name__)
    return check_text(value, where, DocumentError)


def _check_items(items: Any, cls: type, where: str) -> None:
    if not isinstance(items, tuple):
        raise DocumentError(f"{where} must be a tuple", where=where, got=type(items).__name__)
    for i, item in enumerate(items):
        if not isinstance(item, cls):
            raise DocumentError(
                f"must be {cls.__name__}", where=f"{where}[{i}]", got=type(item).__name__
            )


def _check_node(node: Any, where: str) -> None:
    if not isinstance(node, Mapping):
        raise DocumentError(
            "a decision node must be a mapping", where=where, got=type(node).__name__
        )
    if "step" not in node:
        raise DocumentError("missing field", where=f"{where}.step")
    if "node" not in node:
        raise DocumentError("missing field", where=f"{where}.node")
    _check_uint(node["step"], f"{where}.step")
    try:
        encode_value(dict(node))
    except CanonicalEncodingError as exc:
        raise DocumentError(
            "decision node cannot be canonically encoded", where=where, got=exc.what
        ) from None


def _fields(
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


def _list(obj: Any, where: str) -> list[Any]:
    if not isinstance(obj, list):
        raise DocumentError("must be a list", where=where, got=type(obj).__name__)
    return obj


def _pinned(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DocumentError("must be a number or null", where=where, got=value)
    if not math.isfinite(value):
        raise DocumentError("must be finite", where=where, got=value)
    return float(value)


# -- parsing --------------------------------------------------------------------

_TOP_REQUIRED = (
    "format",
    "run_id",
    "step",
    "state_digest",
    "observations",
    "tokens",
    "call_graph",
    "transcript_digest",
    "effects",
)
_TOP_OPTIONAL = ("ledger_sealed", "harness_accesses", "provenance_tags", "mode")


def parse_document(doc: Any) -> Run:
    """Build a :class:`Run` from a decoded document (a mapping)."""
    if not isinstance(doc, Mapping):
        raise DocumentError(
            "a run document must be an object", where="document", got=type(doc).__name__
        )
    if "format" not in doc:
        raise DocumentError("missing field", where="format")
    fmt = doc["format"]
    # The version decides what every other field means: check it first.
    if isinstance(fmt, bool) or not isinstance(fmt, int):
        raise DocumentError("must be an integer", where="format", got=fmt)
    if fmt != DOCUMENT_FORMAT:
        raise FormatVersionError(
            "unknown run-document format version", where="format", expected=DOCUMENT_FORMAT, got=fmt
        )
    top = _fields(doc, "", _TOP_REQUIRED, _TOP_OPTIONAL)

    packer = _TokenPacker()
    for i, item in enumerate(_list(top["tokens"], "tokens")):
        where = f"tokens[{i}]"
        tok = _fields(item, where, ("seq", "kind", "value", "provenance"))
        packer.add(tok["seq"], tok["kind"], tok["value"], tok["provenance"], where)

    observations = []
    for i, item in enumerate(_list(top["observations"], "observations")):
        where = f"observations[{i}]"
        obs = _fields(item, where, ("step", "source", "payload_digest", "pinned_at"))
        observations.append(
            Observation(
                _check_uint(obs["step"], f"{where}.step"),
                _check_str(obs["source"], f"{where}.source"),
                _check_str(obs["payload_digest"], f"{where}.payload_digest"),
                _pinned(obs["pinned_at"], f"{where}.pinned_at"),
            )
        )

    call_graph = []
    for i, node in enumerate(_list(top["call_graph"], "call_graph")):
        _check_node(node, f"call_graph[{i}]")
        call_graph.append(dict(node))

    effects = []
    for i, item in enumerate(_list(top["effects"], "effects")):
        where = f"effects[{i}]"
        eff = _fields(item, where, ("seq", "target", "payload_digest"))
        effects.append(
            Effect(
                _check_uint(eff["seq"], f"{where}.seq"),
                _check_str(eff["target"], f"{where}.target"),
                _check_str(eff["payload_digest"], f"{where}.payload_digest"),
            )
        )

    harness = _list(top.get("harness_accesses", []), "harness_accesses")
    for i, access in enumerate(harness):
        try:
            encode_value(access)
        except CanonicalEncodingError as exc:
            raise DocumentError(
                "cannot be canonically encoded", where=f"harness_accesses[{i}]", got=exc.what
            ) from None
    tags = _list(top.get("provenance_tags", []), "provenance_tags")
    for i, tag in enumerate(tags):
        _check_str(tag, f"provenance_tags[{i}]")
    transcript = top["transcript_digest"]
    if transcript is not None:
        _check_str(transcript, "transcript_digest")
    sealed = top.get("ledger_sealed", False)
    if not isinstance(sealed, bool):
        raise DocumentError("must be true or false", where="ledger_sealed", got=sealed)
    mode_text = top.get("mode")
    mode = None
    if mode_text is not None:
        try:
            mode = ReplayMode(mode_text)
        except ValueError:
            raise DocumentError(
                "unknown replay mode",
                where="mode",
                expected=["strict", "best_effort", None],
                got=mode_text,
            ) from None

    return Run(
        _check_str(top["run_id"], "run_id"),
        _check_uint(top["step"], "step"),
        _check_str(top["state_digest"], "state_digest"),
        tokens=packer.finish(),
        observations=tuple(observations),
        call_graph=tuple(call_graph),
        transcript_digest=transcript,
        effects=tuple(effects),
        ledger_sealed=sealed,
        harness_accesses=tuple(harness),
        provenance_tags=tuple(tags),
        mode=mode,
    )


def _no_constant(name: str) -> Any:
    raise DocumentError("JSON constant not allowed", where="document", got=name)


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DocumentError("duplicate key in a JSON object", where="document", got=key)
        out[key] = value
    return out


def _decode(raw: bytes) -> Any:
    head = raw.lstrip()[:1]
    if head in (b"{", b"["):
        try:
            return json.loads(raw, parse_constant=_no_constant, object_pairs_hook=_unique_pairs)
        except RecursionError:
            raise DocumentError("document nested too deeply", where="document") from None
        except (ValueError, UnicodeDecodeError) as exc:
            if isinstance(exc, DocumentError):
                raise
            raise DocumentError("not valid JSON", where="document", got=str(exc)) from None
    # msgpack: limits tied to the input size so a header declaring a billion
    # entries is refused instead of allocated.
    limit = len(raw)
    try:
        return msgpack.unpackb(
            raw,
            raw=False,
            strict_map_key=True,
            use_list=True,
            max_str_len=limit,
            max_bin_len=limit,
            max_array_len=limit,
            max_map_len=limit // 2,
            max_ext_len=0,
        )
    except (ValueError, TypeError, msgpack.UnpackException, RecursionError) as exc:
        raise DocumentError(
            "neither a JSON object nor a msgpack map",
            where="document",
            got=str(exc) or type(exc).__name__,
        ) from None


def _too_large(where: str | None, size: int | str, max_bytes: int) -> DocumentError:
    return DocumentError(
        "document too large to parse in bounded memory (max_bytes= raises the limit)",
        where=where,
        expected=f"<= {max_bytes} bytes",
        got=f"{size} bytes" if isinstance(size, int) else size,
    )


def _file_kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _must_be_regular(mode: int, path: Path) -> None:
    if not stat.S_ISREG(mode):
        raise DocumentError(
            "a run document must be a regular file", where=str(path), got=_file_kind(mode)
        )


def _read_regular_file(path: Path, max_bytes: int) -> bytes:
    """At most ``max_bytes + 1`` bytes of ``path``; DocumentError unless it is a regular file.

    A file larger than ``max_bytes`` by its size is refused before any read.

    Checked with stat before opening, so a device whose open has effects (a
    tape, a watchdog) is never opened; then opened non-blocking and checked
    again on the descriptor, so a FIFO swapped in between can block neither
    the open nor the read.
    """
    _must_be_regular(os.stat(path).st_mode, path)
    nonblock: int = getattr(os, "O_NONBLOCK", 0)  # POSIX only; Windows has no FIFOs to open
    fd = os.open(path, os.O_RDONLY | nonblock | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        _must_be_regular(info.st_mode, path)
        if info.st_size > max_bytes:
            raise _too_large(str(path), info.st_size, max_bytes)
        if nonblock:
            os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as fh:
            # Bounded even when the size lies (a file growing meanwhile).
            return fh.read(max_bytes + 1)
    finally:
        os.close(fd)


def load_document(source: PathOrBytes, *, max_bytes: int = MAX_DOCUMENT_BYTES) -> Run:
    """Parse a run document from a path or from its bytes (JSON or msgpack).

    A document over ``max_bytes`` (default :data:`MAX_DOCUMENT_BYTES`) is
    refused from its size, before it is read or parsed; pass a larger
    ``max_bytes`` only with about 11x its size in free memory.
    """
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
        raise InvalidInputError("max_bytes must be a non-negative int", got=max_bytes)
    if isinstance(source, (bytes, bytearray, memoryview)):
        size = memoryview(source).nbytes
        if size > max_bytes:
            raise _too_large("document", size, max_bytes)
        raw = bytes(source)
    elif isinstance(source, (str, os.PathLike)):
        path = Path(source)
        try:
            raw = _read_regular_file(path, max_bytes)
        except DocumentError:
            raise
        except FileNotFoundError:
            raise NotFoundError("no such run document", where=str(path)) from None
        except OSError as exc:
            raise DocumentError(
                "cannot read run document", where=str(path), got=exc.strerror or str(exc)
            ) from None
        except ValueError as exc:  # e.g. an embedded NUL: no OS path can hold it
            if isinstance(exc, DocumentError):
                raise
            raise DocumentError("not a usable path", where=repr(str(path)), got=str(exc)) from None
        if len(raw) > max_bytes:
            raise _too_large(str(path), f"> {max_bytes} bytes", max_bytes)
    else:
        raise InvalidInputError("a run document is a path or bytes", got=type(source).__name__)
    return parse_document(_decode(raw))


def _document_dict(run: Run) -> dict[str, Any]:
    packed = run.tokens
    if packed.values is None:
        raise InvalidInputError(
            "cannot write a document without token values", where="tokens.values"
        )
    tokens = []
    for i in range(len(packed)):
        info = packed.info(i)
        if info.provenance not in _PROVENANCE:
            raise RecordFormatError(
                "token has an invalid provenance", where=f"tokens[{i}]", got=info.provenance
            )
        tokens.append(
            {"seq": info.seq, "kind": info.kind, "value": info.value, "provenance": info.provenance}
        )
    return {
        "format": DOCUMENT_FORMAT,
        "run_id": run.run_id,
        "step": run.step,
        "state_digest": run.state_digest,
        "observations": [
            {
                "step": o.step,
                "source": o.source,
                "payload_digest": o.payload_digest,
                "pinned_at": o.pinned_at,
            }
            for o in run.observations
        ],
        "tokens": tokens,
        "call_graph": [dict(n) for n in run.call_graph],
        "transcript_digest": run.transcript_digest,
        "effects": [
            {"seq": e.seq, "target": e.target, "payload_digest": e.payload_digest}
            for e in run.effects
        ],
        "ledger_sealed": run.ledger_sealed,
        "harness_accesses": list(run.harness_accesses),
        "provenance_tags": list(run.provenance_tags),
        "mode": None if run.mode is None else run.mode.value,
    }


def dump_document(run: Run, *, encoding: str = "json") -> bytes:
    """Serialise ``run`` as a run document (``encoding`` is ``json`` or ``msgpack``)."""
    body = _document_dict(run)
    if encoding == "json":
        try:
            return json.dumps(body, sort_keys=True, allow_nan=False).encode("utf-8")
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(
                "run is not representable in JSON; use encoding='msgpack'", got=str(exc)
            ) from None
    if encoding == "msgpack":
        return msgpack.packb(body, use_bin_type=True)  # type: ignore[no-any-return]
    raise InvalidInputError("unknown document encoding", expected=["json", "msgpack"], got=encoding)
