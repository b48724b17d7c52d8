"""Refuse, before a byte is written, a document that would say another run than its records.

A :class:`Run` is validated by its packed TOKEN records alone; ``tokens.values``
and ``tokens.kind_names`` only make findings readable and are taken unchecked
(``PackedTokens(records, values=..., kind_names=...)``, a ``.cprun`` file's values
section and metadata). A JSON or msgpack document has no records: it holds each
token's kind *name* and value, and its reader packs the records from them. Written
as they were, a run whose values were not its records', whose hashed kind code was
named by a name that hashes to another code, or whose records were malformed (an
error when validated) gave a document that said another run: a ``.cprun`` replay
that was a REJECT converted (``cpstore convert``, ``dump_document``,
``write_document``) into a JSON or msgpack replay that was an ACCEPT (review76).
The writers now check records, kind names and values first, as the replay cursor
checks values before it serves one (audit59).

Those checks read ``tokens.values`` (a caller's Sequence) and the records before the
writer reads them again to write them (review79's leftover, left83): a Sequence
answering other values on a later read, or a caller changing a value, a nested dict
of one or the records while a document is written (from ``out.write``, from another
thread), gave a document of values that were never checked, the records' digests
another run's. :func:`token_chunks` reads each chunk of records and values once, checks
that copy again, and writes values decoded from the very canonical bytes it checked.
"""

from __future__ import annotations

import re
import sys
from array import array
from collections.abc import Iterator
from typing import Any

import msgpack

from cpstore.errors import (
    CanonicalEncodingError,
    CpstoreError,
    IntegrityError,
    InvalidInputError,
    RecordFormatError,
)
from cpstore.native.args import as_offsets
from cpstore.native.binding import canonical_check, digest_batch, scan_tokens
from cpstore.native.canonical import array_header
from cpstore.native.columns import encode_values, first_unencodable
from cpstore.native.records import kind_code, kind_name, provenance_name
from cpstore.run.keys import check_encoded, check_keys
from cpstore.run.model import PackedTokens, Run
from cpstore.run.values import EncodedValues

__all__ = [
    "check_document",
    "check_faithful",
    "check_kinds",
    "check_values_match",
    "token_chunks",
]

_CHUNK = 1 << 15
_MISMATCH = "token value does not match its record (its digest is another value's)"


def _compare(digests: bytes, records: memoryview, first: int, last: int) -> None:
    recs = bytes(records[32 * first : 32 * last])
    # Byte k of every digest against byte 16+k of every record: 16 slice
    # compares per chunk; a mismatch is then located token by token.
    if all(digests[k::16] == recs[16 + k :: 32] for k in range(16)):
        return
    for j in range(last - first):
        if digests[16 * j : 16 * j + 16] != recs[32 * j + 16 : 32 * j + 32]:
            raise IntegrityError(
                _MISMATCH,
                where=f"tokens[{first + j}].value",
                expected=recs[32 * j + 16 : 32 * j + 32].hex(),
                got=digests[16 * j : 16 * j + 16].hex(),
            )


def check_values_match(tokens: PackedTokens) -> None:
    """Raise :class:`IntegrityError` at the first token whose value's canonical
    encoding does not hash to its record's value digest (nothing when
    ``tokens.values`` is None: :func:`check_faithful` refuses that)."""
    values = tokens.values
    if values is None:
        return
    records = tokens.view()
    if isinstance(values, EncodedValues):
        # Each value must be one canonical value where its offsets say: the
        # writers decode it, and a non-canonical one would be re-encoded as
        # other bytes (another digest) by the reader of the document.
        offsets = as_offsets(values.offsets)
        bad = canonical_check(values.blob, offsets)
        if bad is not None:
            raise IntegrityError(
                f"token value is not one value in canonical form at its offsets: {bad[2]}",
                where=f"tokens[{bad[0]}].value",
            )
        _compare(digest_batch(values.blob, offsets), records, 0, len(values))
        return
    for first in range(0, len(tokens), _CHUNK):
        last = min(len(tokens), first + _CHUNK)
        chunk = list(values[first:last])
        try:
            blob, offs = encode_values(chunk)
        except CanonicalEncodingError:
            found = first_unencodable(chunk)
            index, exc = found if found is not None else (0, None)
            raise InvalidInputError(
                "token value cannot be canonically encoded",
                where=f"tokens[{first + index}].value",
                got=None if exc is None else exc.what,
            ) from None
        _compare(digest_batch(blob, offs), records, first, last)


_HASHED = 0x80000000


def _kind_codes(records: memoryview) -> array[int]:
    # The kind column (bytes 8..12 of each record) without copying the records.
    codes = array("I", records.cast("I")[2::8])
    if sys.byteorder != "little":
        codes.byteswap()
    return codes


def check_kinds(tokens: PackedTokens) -> None:
    """Raise :class:`RecordFormatError` at the first token whose kind code the document
    could not say back: a code neither standard nor hashed, or a hashed code with no
    name or a name that hashes to another code (read back, the name is that code)."""
    codes = _kind_codes(tokens.view())
    for code in set(codes):
        if not code & _HASHED:
            if kind_name(code) is not None:
                continue
            what, name = "kind code is neither a standard kind nor a hashed one", None
        else:
            name = tokens.kind_names.get(code)
            try:
                # The text a document writes: a str subclass's own encode() or __eq__
                # could hash it to this code and be written as another kind (review79).
                text = str.__str__(name) if isinstance(name, str) else name
                if text is not None and kind_code(text) == code:
                    continue
            except RecordFormatError:
                pass
            what = (
                "hashed kind code has no name"
                if name is None
                else "kind name does not hash to its code (read back, it would be another kind)"
            )
        raise RecordFormatError(
            what,
            where=f"tokens[{codes.index(code)}].kind",
            expected="a standard kind code, or a hashed code named by a name hashing to it",
            got=f"0x{code:08x}" if name is None else f"0x{code:08x} named {name!r}",
        )


def check_faithful(tokens: PackedTokens) -> None:
    """Everything a JSON or msgpack document of ``tokens`` must say as the records do:
    token values (:class:`InvalidInputError` without them), well-formed records
    (:class:`RecordFormatError`, as ``validate`` raises), kind names that hash to their
    codes, and values that hash to their records' digests (:class:`IntegrityError`).
    Nothing is written before this passes."""
    if tokens.values is None:
        # write_document refused it only when the token list began, the head written
        # (review79); dump_document refused it first.
        raise InvalidInputError(
            "cannot write a document without token values", where="tokens.values"
        )
    scan = scan_tokens(tokens.view())
    if scan.first_malformed is not None:
        raise RecordFormatError(
            "malformed token record (kind 0, unknown provenance or reserved bytes set)",
            where=f"tokens[{scan.first_malformed}]",
        )
    check_kinds(tokens)
    check_values_match(tokens)


#: Tokens a writer reads, checks and writes at a time (:func:`token_chunks`).
WRITE_CHUNK = 1 << 14
_CHANGED = "the run's tokens changed while its document was written (read again, they {})"


def _bigint(code: int, data: bytes) -> Any:
    # The canonical form's only extension type (ext 1, docs/format.md), already checked.
    if code != 1:
        raise IntegrityError("unknown msgpack ext type in a canonical value", got=code)
    return int.from_bytes(data, "big", signed=True)


def _chunk_encodings(values: Any, start: int, end: int) -> tuple[bytes, array[int]]:
    """The canonical encodings of ``values[start:end]``, read once, and their offsets."""
    if isinstance(values, EncodedValues):
        offs = values.offsets
        first = offs[start]
        blob = bytes(values.blob[first : offs[end]])
        return blob, array("Q", (o - first for o in offs[start : end + 1]))
    chunk = list(values[start:end])
    if len(chunk) != end - start:
        raise IntegrityError(
            _CHANGED.format("are not one value per record"),
            where=f"tokens[{start}:{end}].value",
            expected=end - start,
            got=len(chunk),
        )
    encoded, offs = encode_values(chunk)  # CanonicalEncodingError: the caller says where
    return bytes(encoded), offs


def token_chunks(
    tokens: PackedTokens, *, json: bool, size: int = WRITE_CHUNK
) -> Iterator[list[dict[str, Any]]]:
    """The tokens as the dicts a document holds (seq, kind, value, provenance), a chunk
    at a time. Each chunk's records and values are read once, checked again as
    :func:`check_faithful` and the writers' key check do, and each value written is
    decoded from the canonical bytes whose digest was compared with its record: what is
    written is what was checked, whatever the caller changes meanwhile (left83). A chunk
    that no longer passes raises :class:`IntegrityError` naming it (its document's head,
    and the chunks before it, may already be written)."""
    values = tokens.values
    if values is None:
        raise InvalidInputError(
            "cannot write a document without token values", where="tokens.values"
        )
    view = tokens.view()
    names = dict(tokens.kind_names)
    count = len(tokens)
    for start in range(0, count, size):
        end = min(count, start + size)
        records = bytes(view[32 * start : 32 * end])
        try:
            blob, offs = _chunk_encodings(values, start, end)
            chunk = PackedTokens(records, values=EncodedValues(blob, offs), kind_names=names)
            check_faithful(chunk)
            check_encoded(chunk.values, json)  # type: ignore[arg-type]
        except CpstoreError as exc:
            # The whole run passed these checks before a byte was written.
            found = re.match(r"tokens\[(\d+)\]", exc.where or "")
            where = (
                f"tokens[{start + int(found.group(1))}]{(exc.where or '')[found.end() :]}"
                if found
                else None
            )
            raise IntegrityError(
                _CHANGED.format("are not what was checked") + f": {exc.what}",
                where=where or f"tokens[{start}:{end}]",
                expected=exc.expected,
                got=exc.got,
            ) from None
        decoded = msgpack.unpackb(
            array_header(end - start) + blob,
            raw=False,
            strict_map_key=False,
            use_list=True,
            ext_hook=_bigint,
        )
        words = memoryview(records).cast("Q")
        codes = memoryview(records).cast("I")
        yield [
            {
                "seq": words[4 * j],
                "kind": kind_name(codes[8 * j + 2]) or str.__str__(names[codes[8 * j + 2]]),
                "value": value,
                "provenance": provenance_name(records[32 * j + 12]),
            }
            for j, value in enumerate(decoded)
        ]


def check_document(run: Run, *, json: bool) -> Run:
    """Everything a JSON (``json``) or msgpack document of ``run`` needs, checked before a
    byte is written: :func:`~cpstore.run.keys.check_keys` (what the format holds; returns
    the run to write) and :func:`check_faithful` (what the records say).

    Damage comes first (left83, review79's leftover): a run whose values are not its
    records' was refused for a later NaN (or bytes, or a non-str key) in JSON, "use
    encoding='msgpack'", where msgpack then said :class:`IntegrityError` at the first
    token; no encoding can write such a run, so its damage is what is reported."""
    try:
        written = check_keys(run, json=json)
    except InvalidInputError:
        try:
            check_faithful(run.tokens)
        except (IntegrityError, RecordFormatError):
            raise
        except CpstoreError:
            pass  # no damage the records can tell: the format's refusal stands
        raise
    check_faithful(written.tokens)
    return written
