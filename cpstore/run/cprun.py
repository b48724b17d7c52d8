"""Packed run files (``.cprun``, docs/run-document.md): loading is a header check and an mmap.

A ``.cprun`` file holds one :class:`Run` with its token stream as the packed
TOKEN records, the n+1 value offsets and the canonical values blob, each a
section of the file at an 8-byte aligned offset, so :func:`load_cprun` maps
the file and hands out zero-copy views: no per-token work at all. The other
fields (ids, observations, effects, the call graph...) are one canonical
map, the metadata section. Every section carries its XXH3-128 digest in the
header and is verified on load unless ``verify=False`` is asked for.

Layout (all integers little-endian)::

    0   8   magic  b"CPRUN\\x00\\r\\n"
    8   2   version (1)
    10  2   section count (4)
    12  4   flags (0)
    16  40  x 4 sections, each: kind u32, reserved u32 (0), offset u64,
            length u64, digest 16 bytes (XXH3-128 of the section's bytes)
    176 ... sections, each starting at an offset that is a multiple of 8,
            zero bytes between them; the file ends where the last one ends

Sections, in this order: 1 metadata (canonical map), 2 token records
(32 x n), 3 value offsets (n+1 uint64, first 0, last = values length),
4 values (canonical encodings back to back).
"""

from __future__ import annotations

import itertools
import mmap
import os
import struct
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import msgpack
import xxhash

from cpstore.errors import (
    CanonicalEncodingError,
    DocumentError,
    FormatVersionError,
    IntegrityError,
)
from cpstore.native.args import HOST_BYTE_ORDER, as_offsets, little_endian_offsets
from cpstore.native.binding import native_digest
from cpstore.native.canonical import _ext_hook, array_header, encode_value, map_header
from cpstore.native.columns import encode_values, first_unencodable
from cpstore.native.records import RECORD_SIZE, RecordType
from cpstore.run.fields import PACKED_CHECKS, run_of_fields
from cpstore.run.locate import canonical_place
from cpstore.run.model import (
    PackedTokens,
    Run,
    fields_of,
)
from cpstore.run.values import EncodedValues

__all__ = ["CPRUN_MAGIC", "CPRUN_VERSION", "dump_cprun", "is_cprun", "load_cprun", "write_cprun"]

#: The first 8 bytes of every packed run file (the CR LF catches text-mode copies).
CPRUN_MAGIC = b"CPRUN\x00\r\n"
#: The packed-run-file format version this cpstore reads and writes.
CPRUN_VERSION = 1

_HEAD = struct.Struct("<8sHHI")
_SECTION = struct.Struct("<IIQQ16s")
_KINDS = (1, 2, 3, 4)  # metadata, token records, value offsets, values
_NAMES = {1: "metadata", 2: "token records", 3: "value offsets", 4: "values"}
_DATA_START = _HEAD.size + len(_KINDS) * _SECTION.size
_META_FIELDS = (
    "run_id",
    "step",
    "state_digest",
    "observations",
    "call_graph",
    "transcript_digest",
    "effects",
    "ledger_sealed",
    "harness_accesses",
    "provenance_tags",
    "mode",
    "kind_names",
)
_TOKEN_SIZE = RECORD_SIZE[RecordType.TOKEN]


def is_cprun(head: bytes | bytearray | memoryview) -> bool:
    """True when ``head`` (a file's first bytes) starts a packed run file."""
    return bytes(head[: len(CPRUN_MAGIC)]) == CPRUN_MAGIC


def _meta(run: Run) -> bytes:
    meta: dict[str, Any] = {
        "run_id": run.run_id,
        "step": run.step,
        "state_digest": run.state_digest,
        "observations": [
            [o.step, o.source, o.payload_digest, o.pinned_at] for o in run.observations
        ],
        "call_graph": [dict(n) for n in run.call_graph],
        "transcript_digest": run.transcript_digest,
        "effects": [[e.seq, e.target, e.payload_digest] for e in run.effects],
        "ledger_sealed": run.ledger_sealed,
        "harness_accesses": list(run.harness_accesses),
        "provenance_tags": list(run.provenance_tags),
        "mode": None if run.mode is None else run.mode.value,
        "kind_names": {int(k): v for k, v in run.tokens.kind_names.items()},
    }
    try:
        return _meta_bytes(meta)
    except CanonicalEncodingError as exc:
        # Named as the loaders name places (runleft86: the encoder's own spelling got out,
        # ``${'call_graph'}[0]{'node'}``); the metadata's field is the place's first step.
        place = canonical_place(meta, exc.where).removeprefix(".")
        raise CanonicalEncodingError(
            exc.what, where=place or "metadata", expected=exc.expected, got=exc.got
        ) from None


#: Fields whose items are values of their own, encoded each from its own root: a node or
#: a harness access as deep as a run document holds it (runleft86, below).
_ITEM_FIELDS = ("call_graph", "harness_accesses")


def _meta_bytes(meta: Mapping[Any, Any]) -> bytes:
    """The canonical encoding of the metadata map, byte for byte ``encode_value(meta)``,
    with each call-graph node and harness access encoded from its own root.

    The canonical limit (a leaf at depth 256) holds for each node and access as it holds in
    a run document, where they sit at the root of their own encoding. Encoded whole, the
    map held them two levels down (map, list), so a node or access at the limit loaded
    from JSON or msgpack but could not be written here (``CanonicalEncodingError``) until
    runleft86. A canonical container is its header and its items' encodings, whatever its
    depth, so the bytes are those ``encode_value`` gives whenever it gives any."""
    entries = []
    for key, value in meta.items():
        items = key in _ITEM_FIELDS and type(value) is list
        parts = [array_header(len(value))] if items else []
        for i, item in enumerate(value if items else [value]):
            try:
                parts.append(encode_value(item))
            except CanonicalEncodingError as exc:  # its place in the map, as encode_value says
                inner = (exc.where or "$")[1:]
                raise CanonicalEncodingError(
                    exc.what,
                    where=f"${{{key!r}}}" + (f"[{i}]" if items else "") + inner,
                    expected=exc.expected,
                    got=exc.got,
                ) from None
        entries.append((encode_value(key), b"".join(parts)))
    entries.sort(key=lambda entry: entry[0])
    for (k1, _), (k2, _) in itertools.pairwise(entries):
        if k1 == k2:
            raise CanonicalEncodingError("two map keys have the same canonical encoding", got=k1)
    return map_header(len(entries)) + b"".join(k + v for k, v in entries)


def _decode_meta(raw: bytes | memoryview) -> Any:
    """The metadata map, refused unless its bytes are :func:`_meta_bytes` of it."""
    data = bytes(raw)
    try:
        meta = msgpack.unpackb(
            data, raw=False, strict_map_key=False, ext_hook=_ext_hook, use_list=True
        )
    except CanonicalEncodingError:
        raise
    except (ValueError, TypeError, msgpack.UnpackException, RecursionError) as exc:
        raise CanonicalEncodingError(
            "bytes are not a msgpack value", expected=str(exc) or None
        ) from None
    if not isinstance(meta, dict):
        raise CanonicalEncodingError("metadata is no map", got=type(meta).__name__)
    if _meta_bytes(meta) != data:
        raise CanonicalEncodingError("bytes are msgpack but not the canonical encoding")
    return meta


def _token_sections(run: Run) -> tuple[memoryview, bytes | memoryview, bytes | memoryview]:
    packed = run.tokens
    values = packed.values
    if values is None:
        raise DocumentError(
            "cannot write a packed run file without token values", where="tokens.values"
        )
    if isinstance(values, EncodedValues):
        offs = values.offsets
        offsets: bytes | memoryview = (
            memoryview(offs).cast("B")
            if HOST_BYTE_ORDER == "little"
            else little_endian_offsets(as_offsets(offs))
        )
        return packed.view(), offsets, values.blob
    # Plain values: encode them (the canonical form is what the file keeps).
    plain = list(values)
    try:
        blob, offs_array = encode_values(plain)
    except CanonicalEncodingError as exc:
        # The token, as the document writers and the loaders name it (it said
        # ``tokens.values`` before runleft86).
        found = first_unencodable(plain)
        index, why = found if found is not None else (None, exc)
        raise DocumentError(
            "token value cannot be canonically encoded",
            where="tokens.values" if index is None else f"tokens[{index}].value",
            got=why.what,
        ) from None
    return packed.view(), little_endian_offsets(offs_array), blob


def _sections(run: Run) -> list[tuple[int, Any]]:
    records, offsets, blob = _token_sections(run)
    return [(1, _meta(run)), (2, records), (3, offsets), (4, blob)]


def _header(sections: list[tuple[int, Any]]) -> tuple[bytes, list[int]]:
    table, starts, pos = [], [], _DATA_START
    for kind, data in sections:
        size = memoryview(data).nbytes
        table.append(_SECTION.pack(kind, 0, pos, size, native_digest(data)))
        starts.append(pos)
        pos = (pos + size + 7) & ~7
    head = _HEAD.pack(CPRUN_MAGIC, CPRUN_VERSION, len(sections), 0) + b"".join(table)
    return head, starts


#: Bytes of a section copied, hashed and written at a time (the writers' memory bound).
_SLICE = 1 << 22


def _changed(kind: int, expected: bytes, got: bytes) -> IntegrityError:
    return IntegrityError(
        "a buffer of the run changed while its packed run file was written (its header "
        "holds the digest of the bytes before); nothing usable was written",
        where=_NAMES[kind],
        expected=expected.hex(),
        got=got.hex(),
    )


def _chunks(sections: list[tuple[int, Any]]) -> Iterator[bytes]:
    """The file's bytes: the header, then each section as copies of slices of it, each
    hashed as it is yielded; IntegrityError naming the section when what was yielded
    is not what the header's digest is of (run88: a caller's buffer changed between the
    digest and the write gave a file refused on load as damaged)."""
    head, starts = _header(sections)
    yield head
    at = len(head)
    for (kind, data), start, entry in zip(
        sections, starts, range(_HEAD.size, _DATA_START, _SECTION.size), strict=True
    ):
        if start > at:
            yield bytes(start - at)
        view = memoryview(data).cast("B")
        hasher = xxhash.xxh3_128()
        for pos in range(0, view.nbytes, _SLICE):
            piece = bytes(view[pos : pos + _SLICE])  # what is hashed is what is written
            hasher.update(piece)
            yield piece
        expected = _SECTION.unpack_from(head, entry)[4]
        if hasher.digest() != expected:
            raise _changed(kind, expected, hasher.digest())
        at = start + view.nbytes


def dump_cprun(run: Run) -> bytes:
    """The packed run file of ``run`` as bytes (:class:`IntegrityError` naming the section
    when a buffer of the run changed meanwhile, as :func:`write_cprun`)."""
    sections = _sections(run)
    head, starts = _header(sections)
    parts: list[bytes | memoryview] = [head]
    at = len(head)
    for (_, data), start in zip(sections, starts, strict=True):
        view = memoryview(data).cast("B")
        parts += [bytes(start - at), view]
        at = start + view.nbytes
    whole = b"".join(parts)
    # Checked on the bytes returned, which nothing can change: one copy, not two.
    for (kind, _), start, entry in zip(
        sections, starts, range(_HEAD.size, _DATA_START, _SECTION.size), strict=True
    ):
        _, _, _, size, expected = _SECTION.unpack_from(head, entry)
        got = native_digest(memoryview(whole)[start : start + size])
        if got != expected:
            raise _changed(kind, expected, got)
    return whole


def write_cprun(run: Run, out: BinaryIO) -> int:
    """Write the packed run file of ``run`` to a binary stream; returns bytes written.

    A buffer of the run changed during the write (from another thread, from ``out``'s
    own ``write``) is refused when its section ends (:class:`IntegrityError` naming the
    section): the stream then holds a partial file, which
    :func:`cpstore.run.writer.write_document` removes or takes back."""
    total = 0
    for chunk in _chunks(_sections(run)):
        out.write(chunk)
        total += len(chunk)
    return total


def _bad(what: str, where: str, **kw: Any) -> DocumentError:
    return DocumentError(what, where=where, **kw)


def _parse_meta(raw: bytes | memoryview, where: str) -> Any:
    try:
        meta = _decode_meta(raw)
    except CanonicalEncodingError as exc:
        raise _bad("metadata is not a canonical map", f"{where}: metadata", got=exc.what) from None
    return meta


def parse_cprun(
    data: bytes | bytearray | memoryview | mmap.mmap,
    *,
    where: str = "document",
    verify: bool = True,
) -> Run:
    """The run in a packed run file's bytes (or a map of them); views, no copies."""
    view = memoryview(data).cast("B")
    if view.nbytes < _DATA_START:
        raise _bad(
            "packed run file is truncated",
            where,
            expected=f">= {_DATA_START} bytes",
            got=f"{view.nbytes} bytes",
        )
    magic, version, count, flags = _HEAD.unpack_from(view, 0)
    if magic != CPRUN_MAGIC:
        raise _bad("not a packed run file", where, expected=CPRUN_MAGIC, got=bytes(magic))
    if version != CPRUN_VERSION:
        raise FormatVersionError(
            "unknown packed-run-file version", where=where, expected=CPRUN_VERSION, got=version
        )
    if count != len(_KINDS) or flags != 0:
        raise _bad(
            "bad packed-run-file header", where, expected=(len(_KINDS), 0), got=(count, flags)
        )
    parts: dict[int, memoryview] = {}
    end = _DATA_START
    for i, kind in enumerate(_KINDS):
        got_kind, reserved, offset, size, digest = _SECTION.unpack_from(
            view, _HEAD.size + i * _SECTION.size
        )
        name = _NAMES[kind]
        if got_kind != kind or reserved:
            raise _bad("bad section entry", f"{where}: {name}", expected=kind, got=got_kind)
        if offset % 8 or offset < end or size > view.nbytes - offset:
            raise _bad(
                "section lies outside the file or overlaps another",
                f"{where}: {name}",
                expected=f"8-aligned, at >= {end}, within {view.nbytes} bytes",
                got=f"offset {offset}, {size} bytes",
            )
        gap = view[end:offset]
        if gap.nbytes > 7 or any(gap):
            # No digest covers them: the format says zero bytes, just to the next multiple
            # of 8 (run88: any bytes, any number of them, were taken, unread).
            raise _bad(
                "bytes between sections are not the zero padding",
                f"{where}: {name}",
                expected=f"{-end % 8} zero bytes before offset {offset}",
                got=f"{gap.nbytes} bytes, {bytes(gap[:16]).hex()}",
            )
        part = view[offset : offset + size]
        if verify and native_digest(part) != digest:
            raise _bad(
                "section digest mismatch (the file is damaged)",
                f"{where}: {name}",
                expected=digest.hex(),
                got=native_digest(part).hex(),
            )
        parts[kind] = part
        end = offset + size
    if end != view.nbytes:
        raise _bad(
            "bytes after the last section",
            where,
            expected=f"{end} bytes",
            got=f"{view.nbytes} bytes",
        )
    records, offsets, blob = parts[2], parts[3], parts[4]
    if records.nbytes % _TOKEN_SIZE:
        raise _bad(
            "token records are not whole 32-byte records",
            f"{where}: token records",
            got=records.nbytes,
        )
    count_tokens = records.nbytes // _TOKEN_SIZE
    if offsets.nbytes != 8 * (count_tokens + 1):
        raise _bad(
            "value offsets must hold one entry per token plus one",
            f"{where}: value offsets",
            expected=8 * (count_tokens + 1),
            got=offsets.nbytes,
        )
    offs = offsets.cast("Q") if HOST_BYTE_ORDER == "little" else as_offsets(offsets, "little")
    try:
        values = EncodedValues(blob, offs)
    except DocumentError:
        raise
    except Exception as exc:  # InvalidInputError: first/last offset wrong
        raise _bad(
            "value offsets do not span the values", f"{where}: value offsets", got=str(exc)
        ) from None
    meta = _parse_meta(parts[1], where)

    def tokens_of(names: Any) -> PackedTokens:
        if not isinstance(names, Mapping) or not all(
            type(k) is int and 0 <= k < 2**32 and isinstance(v, str) for k, v in names.items()
        ):  # as PackedTokens takes them (review83: a bool or a negative code was taken)
            raise _bad("kind_names must map codes to names", "kind_names")
        return PackedTokens(records, values=values, kind_names=dict(names))

    try:
        # Each field in the metadata's order, as a document's (run88: an order of its own).
        # A field named as a document names it, after the file (run88: an unknown or a
        # missing field and kind_names were "<file>: metadata.<field>", the others
        # "<file>: <field>").
        fields_of(meta, "", _META_FIELDS)
        return run_of_fields(meta, {**PACKED_CHECKS, "kind_names": tokens_of}, into="kind_names")
    except DocumentError as exc:
        raise DocumentError(
            exc.what, where=f"{where}: {exc.where}", expected=exc.expected, got=exc.got
        ) from None


def load_cprun(fd: int, path: Path, *, verify: bool = True) -> Run:
    """Map the packed run file open on ``fd`` (read-only) and parse it; ``fd`` stays open."""
    size = os.fstat(fd).st_size
    if size == 0:
        raise _bad("packed run file is empty", str(path))
    mapped = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
    return parse_cprun(mapped, where=str(path), verify=verify)
