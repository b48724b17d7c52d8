"""Run documents (docs/run-document.md): parse, load and dump the :class:`Run` they describe.

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
actually read. The token list is streamed into packed records a chunk at a
time (:mod:`cpstore.run.stream`, with :func:`parse_document` as the spec), so
a token document peaks near 2x its size; a single value made of many tiny
containers still becomes Python objects, which :data:`MAX_DOCUMENT_BYTES`
bounds (checked on the byte size before anything is parsed). A packed run
file (:mod:`cpstore.run.cprun`) is mapped, not parsed.
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Union

import msgpack

from cpstore.errors import (
    CpstoreError,
    DocumentError,
    FormatVersionError,
    InvalidInputError,
    NotFoundError,
)
from cpstore.run.cprun import CPRUN_MAGIC, dump_cprun, is_cprun, load_cprun, parse_cprun
from cpstore.run.faithful import check_document, token_chunks
from cpstore.run.fields import DOCUMENT_CHECKS, run_of_fields
from cpstore.run.locate import (
    MAX_NESTING,
    json_overflow,
    locate,
    locate_json,
    nested_past,
    recursion_headroom,
)
from cpstore.run.model import (
    Run,
    fields_of,
)
from cpstore.run.stream import NOT_JSON, decode_fast

__all__ = [
    "DOCUMENT_FORMAT",
    "MAX_DOCUMENT_BYTES",
    "PathOrBytes",
    "dump_document",
    "load_document",
    "parse_document",
]
#: The run-document format version this cpstore reads and writes.
DOCUMENT_FORMAT = 1
#: Largest JSON/msgpack document :func:`load_document` reads, in bytes (``max_bytes=``
#: overrides it). Tokens are streamed (a token document peaks near 2x its size), but
#: a value of many tiny containers is decoded into Python objects; the limit bounds
#: that (measured in docs/run-document.md, "Bounded memory").
MAX_DOCUMENT_BYTES = 128 << 20

PathOrBytes = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview]


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
    """Build a :class:`Run` from a decoded document (a mapping).

    A document with several bad fields is refused for one, the same one whichever
    loader read it (docs/run-document.md, "Which error"): ``format`` first, then an
    unknown field (the first in the document) or a missing one, then the first field,
    in the document's order, whose value is bad."""
    with recursion_headroom():  # the canonical encoder's 256 levels, whatever the limit
        return _parse_document(doc)


def _parse_document(doc: Any) -> Run:
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
    top = fields_of(doc, "", _TOP_REQUIRED, _TOP_OPTIONAL)
    # In the document's order (run88: the streamed loader checked the token list last,
    # this one first, so a document with two bad fields was refused for either).
    return run_of_fields(top, DOCUMENT_CHECKS)


def _no_constant(name: str) -> Any:
    raise DocumentError("JSON constant not allowed", where="document", got=name)


def _finite_float(text: str) -> float:
    # JSON has no infinity: a literal past the float range (1e400) would read as
    # one, and two different numbers as the same value (audit31).
    value = float(text)
    if not math.isfinite(value):
        raise DocumentError("JSON number out of the float range", where="document", got=text[:40])
    return value


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DocumentError("duplicate key in a JSON object", where="document", got=key)
        out[key] = value
    return out


def _unique_msgpack_pairs(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
    # As in JSON: which of two equal keys wins is what readers disagree on (audit31).
    # Keys distinct in the file but equal in Python (1, 1.0 and True; 0.0 and -0.0)
    # would collapse into one entry: refused as repeated, as decode_value refuses them.
    out: dict[Any, Any] = {}
    for key, value in pairs:
        if isinstance(key, (list, dict)):
            # no dict can hold it: the canonical encoder refuses such keys (docs/format.md)
            raise DocumentError(
                "a msgpack map key is an array or a map (no value keyed so can be read back)",
                where="document",
                expected="a map key that reads back as a key",
                got=type(key).__name__,
            )
        if key in out:
            raise DocumentError("duplicate key in a msgpack map", where="document", got=key)
        out[key] = value
    return out


def _decode(raw: bytes) -> Any:
    head = raw.lstrip()[:1]
    if head in (b"{", b"["):
        return _strict_json(raw)
    return _strict_msgpack(raw)


def _too_large(where: str | None, size: int | str, max_bytes: int) -> DocumentError:
    return DocumentError(
        "document too large to parse in bounded memory (max_bytes=, or --max-bytes on the "
        "command line, raises the limit)",
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


def _read_regular_file(path: Path, max_bytes: int) -> bytes | Run:
    """At most ``max_bytes + 1`` bytes of ``path``; DocumentError unless it is a regular file.

    A file larger than ``max_bytes`` by its size is refused before any read;
    a packed run file (known by its first bytes) is mapped, not read, and
    returned as its :class:`Run` whatever its size.

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
        if is_cprun(os.pread(fd, len(CPRUN_MAGIC), 0)):
            return load_cprun(fd, path)
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
    """Load a run from a path or from bytes: a JSON or msgpack document, or a packed run file.

    The kind is told by content: a packed run file by its magic bytes
    (``.cprun``, mapped and checked, never parsed token by token), JSON by a
    first non-blank ``{``, anything else is read as msgpack. A JSON or
    msgpack document over ``max_bytes`` (default :data:`MAX_DOCUMENT_BYTES`)
    is refused from its size, before it is read; its tokens are streamed into
    packed records, so parsing needs about 2x its size (docs/run-document.md).
    """
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
        raise InvalidInputError("max_bytes must be a non-negative int", got=max_bytes)
    # Nesting is limited by the document, never by the caller's recursion limit (runleft86).
    with recursion_headroom():
        return _load_document(source, max_bytes)


def _load_document(source: PathOrBytes, max_bytes: int) -> Run:
    if isinstance(source, (bytes, bytearray, memoryview)):
        if is_cprun(source):
            return parse_cprun(source)
        size = memoryview(source).nbytes
        if size > max_bytes:
            raise _too_large("document", size, max_bytes)
        raw = bytes(source)
    elif isinstance(source, (str, os.PathLike)):
        path = Path(source)
        got: bytes | Run
        try:
            got = _read_regular_file(path, max_bytes)
        except CpstoreError:
            # As from its bytes (run88: a .cprun's FormatVersionError, a ValueError, was
            # "not a usable path" below, exit 3 where the bytes gave 9).
            raise
        except FileNotFoundError:
            raise NotFoundError("no such run document", where=str(path)) from None
        except OSError as exc:
            raise DocumentError(
                "cannot read run document", where=str(path), got=exc.strerror or str(exc)
            ) from None
        except ValueError as exc:  # e.g. an embedded NUL: no OS path can hold it
            raise DocumentError("not a usable path", where=repr(str(path)), got=str(exc)) from None
        if isinstance(got, Run):
            return got
        raw = got
        if len(raw) > max_bytes:
            raise _too_large(str(path), f"> {max_bytes} bytes", max_bytes)
    else:
        raise InvalidInputError("a run document is a path or bytes", got=type(source).__name__)
    return _parse_bytes(raw)


def _json_loads(raw: bytes | str) -> Any:
    return json.loads(
        raw,
        parse_constant=_no_constant,
        parse_float=_finite_float,
        object_pairs_hook=_unique_pairs,
    )


def _too_deep(where: str | None) -> DocumentError:
    return DocumentError(
        "document nested too deeply",
        where=where or "document",
        expected=f"at most {MAX_NESTING} nested arrays and maps",
    )


def _deeper_first(raw: bytes) -> DocumentError | None:
    """ "nested too deeply" when the text nests past the limit before anything else the
    decoder refuses (a raised recursion limit let it read on), else None."""
    found = json_overflow(raw)
    if found is None:
        return None
    place, before = found
    try:
        _json_loads(before)  # what comes before the deep container, closed
    except (DocumentError, ValueError, RecursionError):
        return None  # refused before it: that refusal stands
    return _too_deep(place)


def _strict_json(raw: bytes) -> Any:
    # The limit is MAX_NESTING, as msgpack's, never the interpreter's recursion limit
    # (runleft86): the decoder is given the frames it needs and refused past it.
    with recursion_headroom():
        try:
            value = _json_loads(raw)
        except RecursionError:
            found = json_overflow(raw)
            raise _too_deep(found[0] if found else None) from None
        except DocumentError as exc:  # a constant, a number past the float range, a repeated key
            deeper = _deeper_first(raw)
            if deeper is not None:
                raise deeper from None
            where = locate_json(raw) or "document"
            raise DocumentError(exc.what, where=where, expected=exc.expected, got=exc.got) from None
        except (ValueError, UnicodeDecodeError) as exc:
            deeper = _deeper_first(raw)
            if deeper is not None:
                raise deeper from None
            raise DocumentError(NOT_JSON, where="document", got=str(exc)) from None
        if nested_past(value):
            found = json_overflow(raw)
            raise _too_deep(found[0] if found else None)
        return value


def _strict_msgpack(raw: bytes) -> Any:
    try:
        return _unpack(raw, len(raw))
    except DocumentError as exc:  # a repeated key, a key no dict holds: say where
        where = locate(raw, _unpack_within(len(raw))) or "document"
        raise DocumentError(exc.what, where=where, expected=exc.expected, got=exc.got) from None
    except (msgpack.StackError, RecursionError):
        # review76: was "neither a JSON object nor a msgpack map", got 'StackError'. Named
        # where the streamed loader names it (runleft86: it said "document" here and the
        # field or token there): each part decoded as deep as it sits in the document.
        raise _too_deep(locate(raw, _unpack_within(len(raw)), as_deep=True)) from None
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        got = str(exc) or type(exc).__name__
        head = raw[0] if raw else 0
        if 0x80 <= head <= 0x9F or head in (0xDC, 0xDD, 0xDE, 0xDF):  # a map or an array
            where = locate(raw, _unpack_within(len(raw))) or "document"
            raise DocumentError("not valid msgpack", where=where, got=got) from None
        raise _not_a_document(raw, got) from None


def _unpack(raw: bytes, limit: int) -> Any:
    # Limits tied to the input size, so a header declaring a billion entries is
    # refused instead of allocated.
    return msgpack.unpackb(
        raw,
        raw=False,
        # A map key is any canonical value (docs/format.md): a token value keyed by
        # ints, floats, None or bools is what the writers write and .cprun keeps.
        # Keys equal in Python (1, 1.0, True) are refused as repeated by the hook.
        strict_map_key=False,
        use_list=True,
        max_str_len=limit,
        max_bin_len=limit,
        max_array_len=limit,
        max_map_len=limit // 2,
        max_ext_len=limit,  # every extension type reaches the hook, which refuses it
        ext_hook=_no_ext,
        object_pairs_hook=_unique_msgpack_pairs,
    )


def _no_ext(code: int, data: bytes) -> Any:
    # No run-document value is an extension type (docs/run-document.md). msgpack handed
    # a zero-length one over as ExtType, a tuple, so it loaded as the list [code, b""]:
    # another value than the file's (max_ext_len=0 refused only those with data).
    raise DocumentError(
        "a msgpack extension type is no run-document value",
        expected="nil, bool, int, float, str, bin, array or map",
        got=f"ext type {code} ({len(data)} bytes)",
    )


def _unpack_within(limit: int) -> Callable[[bytes], Any]:
    """The strict decoder for a part of a document of ``limit`` bytes (:func:`locate`)."""
    return lambda part: _unpack(part, limit)


#: Byte-order marks: no msgpack map starts with one (each is a negative fixint or 0).
_BOMS = (
    (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xef\xbb\xbf", "UTF-8"),
    (b"\xff\xfe", "UTF-16 or UTF-32"),
    (b"\xfe\xff", "UTF-16"),
)


def _not_a_document(raw: bytes, got: str) -> DocumentError:
    """Why ``raw`` is no document, said plainly where it can be (review76: an empty
    file and a JSON file with a byte-order mark were "unpack(b) received extra data")."""
    if not raw.strip():
        return DocumentError(
            "empty document", where="document", expected="a JSON object or a msgpack map"
        )
    for mark, name in _BOMS:
        if raw.startswith(mark):
            return DocumentError(
                f"the document starts with a {name} byte-order mark; write a JSON run document as "
                "UTF-8 without one",
                where="document",
                got=mark.hex(),
            )
    return DocumentError("neither a JSON object nor a msgpack map", where="document", got=got)


def _parse_bytes(raw: bytes) -> Run:
    """A run from a document's bytes: tokens streamed when possible, strictly always."""
    head = raw.lstrip()[:1]
    if not head:  # one blank byte is a msgpack int, but no one means that: say empty
        raise _not_a_document(raw, "")
    is_json = head in (b"{", b"[")
    run = decode_fast(
        raw,
        encoding="json" if is_json else "msgpack",
        strict=_strict_json if is_json else _strict_msgpack,
        parse_rest=parse_document,
    )
    return run if run is not None else parse_document(_decode(raw))


def document_dict(run: Run, *, json: bool = False) -> dict[str, Any]:
    """The run as the mapping a JSON (``json``) or msgpack document holds (tokens as
    dicts, each value decoded from the canonical bytes checked against its record:
    :func:`cpstore.run.faithful.token_chunks`)."""
    tokens = [t for chunk in token_chunks(run.tokens, json=json) for t in chunk]
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
    """Serialise ``run`` as a run document (``encoding``: ``json``, ``msgpack`` or ``cprun``)."""
    if encoding == "cprun":
        return dump_cprun(run)
    if encoding in ("json", "msgpack"):
        # A key or value the document could not read back; a value of a type other than
        # the builtins is written as its canonical value (review79).
        run = check_document(run, json=encoding == "json")
    body = document_dict(run, json=encoding == "json")
    if encoding == "json":
        try:
            return json.dumps(body, sort_keys=True, allow_nan=False).encode("utf-8")
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(
                "run is not representable in JSON; use encoding='msgpack'", got=str(exc)
            ) from None
    if encoding == "msgpack":
        try:
            return msgpack.packb(body, use_bin_type=True)  # type: ignore[no-any-return]
        except OverflowError as exc:  # an int beyond 64 bits: msgpack has no form for it
            raise InvalidInputError(
                "run is not representable in msgpack (an integer outside [-2**63, 2**64)); "
                "use encoding='json' or 'cprun'",
                got=str(exc),
            ) from None
    raise InvalidInputError(
        "unknown document encoding", expected=["json", "msgpack", "cprun"], got=encoding
    )
