"""Streaming decode of run documents: tokens go from the document's bytes to packed records.

The token list of a JSON or msgpack run document is split into chunks of
:data:`CHUNK` tokens by the native member splitters (``csrc/cp_ingest.c``);
each chunk is decoded by msgspec into short-lived structs, and its columns
(seq, kind code, provenance, canonical value encoding) go straight into the
packed TOKEN records and one values blob (:class:`EncodedValues`). No Python
object per token outlives its chunk, so memory follows the packed output
(32 bytes a token plus its value's encoding) rather than the document.

Strictness is the one of :func:`cpstore.run.document.parse_document`, which
stays the spec: a chunk the fast path cannot take as is (an odd token object,
a duplicate key, a nested map, a value outside the scalar fast path, any
decoder complaint) is decoded again by the strict path, which either accepts
it with the same bytes or raises the same error, naming the same field. A
document whose top level the fast path cannot read at all goes to the strict
path whole (:func:`decode_fast` returns None).
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Callable, Mapping
from operator import attrgetter
from typing import Any, Literal

import msgspec

from cpstore.errors import CpstoreError, DocumentError, RecordFormatError
from cpstore.native.binding import digest_batch, json_split, msgpack_split, pack_tokens
from cpstore.native.columns import encode_values
from cpstore.native.records import KindTable
from cpstore.run.fields import StreamedTokens
from cpstore.run.locate import join_place, key_step
from cpstore.run.model import PackedTokens, Run, TokenPacker, fields_of, list_of
from cpstore.run.values import EncodedValues

__all__ = ["CHUNK", "NOT_JSON", "TokenColumns", "decode_fast"]

#: Tokens decoded per chunk: large enough that per-chunk costs vanish, small
#: enough that a chunk's transient objects stay a few MiB.
CHUNK = 1 << 15

_TOKEN_FIELDS = ("seq", "kind", "value", "provenance")
_PROV = {"recorded": 1, "live": 2}


# gc=False: a chunk's 32 768 structs are not tracked by the cycle collector
# (decoded documents hold no cycles), which spares a collection pass per few
# hundred allocations.
class _Tok(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    seq: int
    kind: str
    value: Any
    provenance: str


_SEQ = attrgetter("seq")
_KIND = attrgetter("kind")
_VALUE = attrgetter("value")
_PROVENANCE = attrgetter("provenance")
_CONTAINERS = frozenset({list, dict, msgspec.msgpack.Ext})
_JSON_CHUNK = msgspec.json.Decoder(list[_Tok])
_MSGPACK_CHUNK = msgspec.msgpack.Decoder(list[_Tok])
_MSGPACK_TOP = msgspec.msgpack.Decoder(dict[str, msgspec.Raw])
_FAST_ERRORS = (
    msgspec.DecodeError,
    KeyError,
    OverflowError,
    TypeError,
    ValueError,
    CpstoreError,
)

#: What msgspec raises on a chunk the strict decoder must read instead: a nested value
#: past msgspec's recursion limit is a RecursionError, not a DecodeError (review76: it
#: escaped load_document bare).
_CHUNK_ERRORS = (msgspec.DecodeError, RecursionError)

#: What the strict JSON decoder says of text that is no JSON at all (a syntax error).
NOT_JSON = "not valid JSON"

#: Decodes one chunk strictly (the document's own decoder): bytes -> list of tokens.
StrictDecode = Callable[[bytes], Any]
#: Builds the run from the fields in document order, the tokens a :class:`StreamedTokens`.
ParseRest = Callable[[dict[str, Any]], Run]


class TokenColumns:
    """Packed TOKEN records, their values blob and offsets, growing chunk by chunk."""

    def __init__(self, kinds: KindTable | None = None) -> None:
        self.records = bytearray()
        self.blob = bytearray()
        self._count = 0
        self.kinds = kinds if kinds is not None else KindTable()
        self._codes: dict[str, int] = {}

    def __len__(self) -> int:
        return self._count

    def _code(self, kind: str) -> int:
        code = self._codes.get(kind)
        if code is None:
            code = self.kinds.code(kind)  # RecordFormatError: the strict path says where
            self._codes[kind] = code
        return code

    def append(
        self,
        seqs: array[int],
        codes: array[int],
        provs: bytes,
        blob: bytes | memoryview,
        offs: array[int],
    ) -> None:
        """Append n tokens given as columns (``offs``: n+1 offsets into ``blob``)."""
        digests = digest_batch(blob, offs)
        self.records += pack_tokens(codes, provs, digests, seqs=seqs)
        self.blob += blob
        self._count += len(offs) - 1

    def add_structs(self, toks: list[_Tok]) -> bool:
        """Append decoded tokens; False (nothing appended) when one needs the strict path."""
        try:
            values = list(map(_VALUE, toks))
            if not _CONTAINERS.isdisjoint(set(map(type, values))):
                return False  # the strict path checks a container's keys
            seqs = array("Q", map(_SEQ, toks))
            kinds = list(map(_KIND, toks))
            for kind in set(kinds):
                self._code(kind)
            codes = array("I", map(self._codes.__getitem__, kinds))
            provs = bytes(map(_PROV.__getitem__, map(_PROVENANCE, toks)))
            blob, offs = encode_values(values)
        except _FAST_ERRORS:
            return False
        self.append(seqs, codes, provs, blob, offs)
        return True

    def add_strict(self, items: Any, base: int) -> None:
        """Append decoded token mappings with every check of ``parse_document``."""
        packer = TokenPacker(kinds=self.kinds)
        for i, item in enumerate(list_of(items, "tokens")):
            where = f"tokens[{base + i}]"
            tok = fields_of(item, where, _TOKEN_FIELDS)
            packer.add(tok["seq"], tok["kind"], tok["value"], tok["provenance"], where)
        seqs = array("Q")
        codes = array("I")
        provs = bytearray()
        view = memoryview(packer.buffer)
        for off in range(0, len(view), 32):
            seqs.append(int.from_bytes(view[off : off + 8], "little"))
            codes.append(int.from_bytes(view[off + 8 : off + 12], "little"))
            provs.append(view[off + 12])
        blob, offs = encode_values(packer.values)
        self.append(seqs, codes, bytes(provs), blob, offs)

    def finish(self) -> PackedTokens:
        """The tokens as :class:`PackedTokens` with lazily decoded values."""
        # The blob is canonical encodings back to back, each one msgpack item:
        # one native split over all of it gives every offset (cheaper than
        # shifting each chunk's offsets in Python).
        offsets = array("Q", [0])
        if self._count:
            offsets += msgpack_split(self.blob, 0, self._count, cap=self._count).ends
        # Handed over without a copy: nothing else holds these buffers.
        return PackedTokens(
            self.records,
            values=EncodedValues(self.blob, offsets),
            kind_names=dict(self.kinds.names),
        )


def _json_tokens(
    raw: memoryview, start: int, strict: StrictDecode
) -> tuple[StreamedTokens, int] | None:
    """The token array whose text starts at ``raw[start]``, and the offset just past it.

    A token the decoder refuses (not JSON, a NaN, nesting too deep) raises at once, as
    the whole-document decoder meets it; the first token whose fields are bad is
    returned as the array's refusal, and the array read on for a refusal of the first
    kind."""
    while start < len(raw) and raw[start] in b" \t\r\n":
        start += 1
    if start >= len(raw) or raw[start] != 0x5B:  # '[': anything else, the strict path says why
        return None
    cols = TokenColumns()
    bad: DocumentError | None = None
    pos, first, seen = start + 1, True, 0
    while True:
        try:
            split = json_split(raw, pos, first=first, expect_members=4, cap=CHUNK)
        except RecordFormatError:
            return None
        count = len(split.ends)
        if count:
            text = b"[" + raw[pos : split.ends[-1]] + b"]"
            done = False
            if split.first_odd is None and not split.nested_map:
                try:
                    toks = _JSON_CHUNK.decode(text)
                except _CHUNK_ERRORS:  # the strict decoder says why ("nested too deeply")
                    toks = []
                done = len(toks) == count and cols.add_structs(toks)
            if not done:
                items = _strict_chunk(
                    strict, text, raw, start=pos, ends=split.ends, base=seen, json=True
                )
                # A chunk of no member but a trailing comma's (``[t0, ..., t32767, ]``)
                # is the text ``[]``: it decodes, to fewer members than were counted
                # (review76). The whole document goes to the strict path, which refuses it.
                if not isinstance(items, list) or len(items) != count:
                    return None
                bad = _add_strict(cols, items, seen, bad)
            seen += count
        if split.done:
            # The splitter ends a container at any closing bracket; only ']' ends
            # an array (a '}' here is invalid JSON the strict path refuses).
            if raw[split.next - 1] != 0x5D:
                return None
            return StreamedTokens(cols.finish() if bad is None else bad), split.next
        pos, first = split.next, False


def _add_strict(
    cols: TokenColumns, items: Any, base: int, bad: DocumentError | None
) -> DocumentError | None:
    """``cols.add_strict``; the first refusal of a token's fields is kept, not raised."""
    if bad is not None:
        return bad  # the first bad token is named; the rest is only decoded
    try:
        cols.add_strict(items, base)
    except DocumentError as exc:
        return exc
    return None


# A top-level key of a run document: plain lowercase names (anything else,
# escapes included, is left to the strict path, which names it).
_KEY = re.compile(rb'[ \t\r\n]*"([a-z_]{1,40})"[ \t\r\n]*:')
_SKIP = re.compile(rb"[ \t\r\n]*")


def _json_fields(raw: bytes, strict: StrictDecode) -> dict[str, Any] | None:
    """One pass over a JSON document's top level: its fields in order, decoded.

    The token array is streamed where it stands (a :class:`StreamedTokens`); every
    other value is found by the splitter and decoded strictly. None when the top level
    is not a plain object of plain keys, or repeats a key (the strict path says why).
    """
    view = memoryview(raw)
    pos = _SKIP.match(raw, 0).end()  # type: ignore[union-attr]
    if pos >= len(raw) or raw[pos] != 0x7B:
        return None
    pos += 1
    fields: dict[str, Any] = {}
    while True:
        key = _KEY.match(raw, pos)
        if key is None:
            return None
        name = key.group(1).decode()
        if name in fields:
            return None
        pos = key.end()
        if name == "tokens":
            found = _json_tokens(view, pos, strict)
            if found is None:
                return None
            fields[name], pos = found  # in its place: fields are checked in this order
            end = _SKIP.match(raw, pos).end()  # type: ignore[union-attr]
            if end >= len(raw) or raw[end] not in b",}":
                return None
        else:
            try:
                split = json_split(view, pos, first=False, cap=1)
            except RecordFormatError:
                return None
            end = split.ends[0]
            # Placed under its name (left83: a NaN in harness_accesses[1] was at "[1]").
            # An unknown field too, as the strict loader reads it (left83: a NaN or a
            # nesting too deep in one was "unknown field" here, refused for itself there).
            fields[name] = _strict_field(strict, name, view[pos:end], json=True)
        if raw[end] == 0x7D:  # '}'
            if raw[end + 1 :].strip(b" \t\r\n"):
                return None
            return fields
        if raw[end] != 0x2C:  # a ']' is no separator: the strict path says why
            return None
        pos = end + 1


def _msgpack_tokens(raw: memoryview, strict: StrictDecode) -> StreamedTokens | None:
    """The token array ``raw``, streamed; refusals as :func:`_json_tokens` gives them."""
    if not raw:
        return None
    head = raw[0]
    if 0x90 <= head <= 0x9F:
        total, pos = head & 0x0F, 1
    elif head in (0xDC, 0xDD):
        width = 2 if head == 0xDC else 4
        if len(raw) < 1 + width:
            return None
        total, pos = int.from_bytes(raw[1 : 1 + width], "big"), 1 + width
    else:
        return None
    cols = TokenColumns()
    bad: DocumentError | None = None
    seen = 0
    while total > seen:
        try:
            split = msgpack_split(raw, pos, total - seen, expect_members=4, cap=CHUNK)
        except RecordFormatError:
            return None
        count = len(split.ends)
        text = b"\xdd" + count.to_bytes(4, "big") + raw[pos : split.next]
        done = False
        if split.first_odd is None and not split.nested_map:
            try:
                toks = _MSGPACK_CHUNK.decode(text)
            except _CHUNK_ERRORS:
                toks = []
            done = len(toks) == count and cols.add_structs(toks)
        if not done:
            items = _strict_chunk(
                strict, text, raw, start=pos, ends=split.ends, base=seen, json=False
            )
            bad = _add_strict(cols, items, seen, bad)
        seen += count
        pos = split.next
    return StreamedTokens(cols.finish() if bad is None else bad)


def _at(exc: DocumentError, where: str) -> DocumentError:
    """``exc`` placed at ``where`` (followed by its own place inside, if it names one)."""
    inner = exc.where if exc.where not in (None, "document") else ""
    return DocumentError(
        exc.what, where=join_place(where, inner), expected=exc.expected, got=exc.got
    )


def _nested(strict: StrictDecode, part: bytes, levels: int, json: bool) -> Any:
    """``strict`` of ``part`` inside ``levels`` one-item arrays, as deep as it sits in its
    document (a field or a chunk of tokens: 1, a token: 2), then unwrapped. Decoded
    alone, a part was one level shallower than in the document, so the streamed loader
    read one level past the strict loader's limit (msgpack's 1 024 nested containers:
    review82, left83). An error's place inside the part keeps only what follows the
    wrapping (``[0]`` steps); None when it names no place inside."""
    text = b"[" * levels + part + b"]" * levels if json else b"\x91" * levels + part
    try:
        value = strict(text)
    except DocumentError as exc:
        where, wrap = exc.where or "", "[0]" * levels
        inner = where[len(wrap) :].removeprefix(".") if where.startswith(wrap) else ""
        raise DocumentError(
            exc.what, where=inner or None, expected=exc.expected, got=exc.got
        ) from None
    for _ in range(levels):
        if not isinstance(value, list) or len(value) != 1:
            # JSON only: the part was no one value (empty, or "1], [2"), and the arrays
            # read it as another shape; alone, the strict decoder says what it is.
            return strict(part)
        value = value[0]
    return value


def _strict_field(strict: StrictDecode, key: str, value: Any, *, json: bool) -> Any:
    try:
        return _nested(strict, bytes(value), 1, json)
    except DocumentError as exc:
        # A top-level key like any other (left83: "a.b" read as two steps).
        raise _at(exc, key_step(key).removeprefix(".")) from None


def _strict_chunk(
    strict: StrictDecode,
    text: bytes,
    raw: memoryview,
    *,
    start: int,
    ends: Any,
    base: int,
    json: bool,
) -> Any:
    """``strict(text)``; when it refuses the chunk, the refusal of the first token that
    fails alone, at ``tokens[i]`` (it said ``document``: review76's leftover). The tokens
    are decoded one by one only on that error path."""
    try:
        return _nested(strict, text, 1, json)
    except DocumentError:
        for i, end in enumerate(ends):
            piece = bytes(raw[start:end])
            start = end
            if json:  # a member after the first starts with its separating comma
                piece = piece.lstrip(b" \t\r\n").removeprefix(b",")
            # Decoded in arrays, as deep as in the document: alone, a token is a whole
            # document to ``strict``, and a bad scalar one was refused as "neither a
            # JSON object nor a msgpack map" (review82).
            try:
                _nested(strict, piece, 2, json)
            except DocumentError as exc:
                raise _at(exc, f"tokens[{base + i}]") from None
        raise


def _map_size(raw: bytes) -> int:
    """Entries a msgpack map's header declares (-1 when ``raw`` starts no map)."""
    head = raw[0] if raw else 0
    if 0x80 <= head <= 0x8F:
        return head & 0x0F
    if head in (0xDE, 0xDF):
        width = 2 if head == 0xDE else 4
        return int.from_bytes(raw[1 : 1 + width], "big")
    return -1


def decode_fast(
    raw: bytes,
    *,
    encoding: Literal["json", "msgpack"],
    strict: StrictDecode,
    parse_rest: ParseRest,
) -> Run | None:
    """The run in ``raw`` with its tokens streamed into packed records.

    None when the top level is not a plain object/map the fast path can read
    (the caller then parses the whole document strictly, which raises the
    right error). ``strict`` decodes a chunk or a field with the document's
    own strict decoder; ``parse_rest`` builds the run from the fields in their order.
    """
    if encoding == "json":
        try:
            fields = _json_fields(raw, strict)
        except DocumentError as exc:
            if exc.what == NOT_JSON:
                # Text no JSON reader takes: said by the whole document's decoder, which
                # names it at ``document`` with its offset in the document (run88: here it
                # was the field's or token's place, with its offset in that part).
                return None
            raise
        if fields is None:
            return None
        if "tokens" not in fields:
            parse_rest(fields)  # raises: the tokens field is missing
            return None
    else:
        try:
            top: Mapping[str, msgspec.Raw] = _MSGPACK_TOP.decode(raw)
        except _CHUNK_ERRORS:
            return None
        if "tokens" not in top or "format" not in top or len(top) != _map_size(raw):
            return None  # a repeated key (the dict kept one): the strict path refuses it
        fields = {}
        for key, value in top.items():  # in the document's order, as the decoder reads
            if key != "tokens":
                fields[key] = _strict_field(strict, key, value, json=False)
                continue
            streamed = _msgpack_tokens(memoryview(value).cast("B"), strict)
            if streamed is None:
                return None
            fields[key] = streamed
    # Checked as the strict path checks them: format, unknown and missing fields, then
    # each field in the document's order, the token list in its place.
    return parse_rest(fields)
