"""Pure-Python twins of the streaming-ingest splitters (``csrc/cp_ingest.c``).

The executable spec of :func:`cpstore.native.binding.json_split` and
:func:`cpstore.native.binding.msgpack_split`: same arguments, same results,
same failures (tests/test_native_ingest.py proves they agree). A splitter
finds where each member of a container ends so a document's token list can
be decoded in bounded chunks; it checks only what splitting needs, and the
caller decodes every chunk with a full parser.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

from cpstore.errors import CanonicalEncodingError, RecordFormatError
from cpstore.native.args import split_args, token_columns
from cpstore.native.canonical import decode_value, encode_value

__all__ = [
    "NUMBER_TYPES",
    "SplitResult",
    "canonical_check",
    "encode_numbers",
    "hashed_kinds",
    "json_split",
    "msgpack_split",
    "pack_tokens",
]


@dataclass(frozen=True)
class SplitResult:
    """What one splitter call found (``cp_split_result``)."""

    ends: array[int]
    """Offset ending each member found (JSON: its separator; msgpack: just past it), 'Q'."""
    next: int
    """Where a resumed call starts."""
    first_odd: int | None
    """First member that is not a map of exactly ``expect_members`` entries."""
    done: bool
    """The container ended (JSON) or every remaining item was read (msgpack)."""
    nested_map: bool
    """Some member holds a map inside it."""


def _truncated(where: str) -> RecordFormatError:
    return RecordFormatError("input ends inside a member", where=where)


_WS = b" \t\n\r"


def json_split(
    data: bytes, start: int, *, first: bool, expect_members: int = 0, cap: int
) -> SplitResult:
    """Members of the JSON array/object whose body starts at ``data[start]``."""
    view, cap = split_args(data, start, cap, expect_members)
    data = view.tobytes()
    ends: list[int] = []
    nxt, first_odd, nested = start, None, False
    if start > len(data):
        raise _truncated("json")
    i, depth, colons, seen, is_map = start, 0, 0, False, False

    def close_member(pos: int) -> None:
        nonlocal first_odd
        if expect_members and first_odd is None and (not is_map or colons != expect_members):
            first_odd = len(ends)
        ends.append(pos)

    while len(ends) < cap:
        if i >= len(data):
            raise _truncated("json")
        c = data[i]
        if c == 0x22:  # '"'
            seen = True
            i += 1
            while True:
                end = data.find(b'"', i)
                if end < 0:
                    raise _truncated("json")
                back = 0
                while end - back > i and data[end - back - 1] == 0x5C:
                    back += 1
                i = end + 1
                if back % 2 == 0:
                    break
            continue
        if c in b"{[":
            if depth == 0 and not seen:
                is_map = c == 0x7B
            elif c == 0x7B:
                nested = True
            seen = True
            depth += 1
        elif c in b"}]":
            if depth == 0:
                if not (first and not ends and not seen):
                    close_member(i)
                return SplitResult(array("Q", ends), i + 1, first_odd, True, nested)
            depth -= 1
        elif c == 0x2C and depth == 0:  # ','
            close_member(i)
            nxt = i + 1
            first, colons, seen, is_map = False, 0, False, False
        elif c == 0x3A and depth == 1:  # ':'
            colons += 1
        elif c not in _WS:
            seen = True
        i += 1
    return SplitResult(array("Q", ends), nxt, first_odd, False, nested)


_FIXED = {0xCC: 1, 0xD0: 1, 0xCD: 2, 0xD1: 2, 0xCA: 4, 0xCE: 4, 0xD2: 4}
_FIXED.update({0xCB: 8, 0xCF: 8, 0xD3: 8, 0xD4: 2, 0xD5: 3, 0xD6: 5, 0xD7: 9, 0xD8: 17})
# header byte -> (length bytes, kind: 0 payload / 1 array / 2 map, extra payload bytes)
_SIZED = {
    0xC4: (1, 0, 0), 0xD9: (1, 0, 0), 0xC5: (2, 0, 0), 0xDA: (2, 0, 0),
    0xC6: (4, 0, 0), 0xDB: (4, 0, 0), 0xC7: (1, 0, 1), 0xC8: (2, 0, 1), 0xC9: (4, 0, 1),
    0xDC: (2, 1, 0), 0xDD: (4, 1, 0), 0xDE: (2, 2, 0), 0xDF: (4, 2, 0),
}  # fmt: skip


def _header(data: bytes, i: int) -> tuple[int, int, int, bool]:
    """(header bytes, payload bytes, items owed, is a map) of the item at ``i``."""
    c = data[i]
    if c <= 0x7F or c >= 0xE0 or c in (0xC0, 0xC2, 0xC3):
        return 1, 0, 0, False
    if c & 0xF0 == 0x80:
        return 1, 0, 2 * (c & 0x0F), True
    if c & 0xF0 == 0x90:
        return 1, 0, c & 0x0F, False
    if c & 0xE0 == 0xA0:
        return 1, c & 0x1F, 0, False
    if c in _FIXED:
        return 1, _FIXED[c], 0, False
    if c not in _SIZED:
        raise RecordFormatError("a byte no msgpack item starts with", where="msgpack", got=c)
    n, kind, extra = _SIZED[c]
    if len(data) - i < 1 + n:
        raise _truncated("msgpack")
    v = int.from_bytes(data[i + 1 : i + 1 + n], "big")
    if kind == 0:
        return 1 + n, v + extra, 0, False
    if kind == 1:
        return 1 + n, 0, v, False
    return 1 + n, 0, 2 * v, True


def msgpack_split(
    data: bytes, start: int, remaining: int, *, expect_members: int = 0, cap: int
) -> SplitResult:
    """The next ``min(remaining, cap)`` msgpack items starting at ``data[start]``."""
    view, cap = split_args(data, start, cap, expect_members, remaining)
    data = view.tobytes()
    ends: list[int] = []
    first_odd, nested = None, False
    if start > len(data):
        raise _truncated("msgpack")
    i = start
    while len(ends) < cap and remaining > 0:
        owed, top = 1, True
        while owed > 0:
            if i >= len(data):
                raise _truncated("msgpack")
            head, body, items, is_map = _header(data, i)
            if top:
                if (
                    expect_members
                    and first_odd is None
                    and (not is_map or items != 2 * expect_members)
                ):
                    first_odd = len(ends)
                top = False
            elif is_map:
                nested = True
            i += head
            if body > len(data) - i:
                raise _truncated("msgpack")
            i += body
            owed -= 1
            if items > len(data) - i or owed > len(data) - i - items:
                raise _truncated("msgpack")
            owed += items
        ends.append(i)
        remaining -= 1
    return SplitResult(
        array("Q", ends), ends[-1] if ends else start, first_odd, remaining == 0, nested
    )


def hashed_kinds(records: bytes, cap: int) -> tuple[list[int], bool]:
    """Distinct hashed kind codes (high bit set) in first-seen order, at most ``cap``;
    and whether there were more (``CP_ERR_FULL``)."""
    if len(records) % 32:
        raise RecordFormatError(
            "length is not a whole number of token records", where="records", got=len(records)
        )
    found: list[int] = []
    for off in range(0, len(records), 32):
        code = int.from_bytes(records[off + 8 : off + 12], "little")
        if code & 0x80000000 and code not in found:
            if len(found) == cap:
                return found, True
            found.append(code)
    return found, False


_TOKEN = struct.Struct("<QIB3x16s")


def pack_tokens(
    kinds: Sequence[int],
    provs: bytes | bytearray,
    digests: bytes,
    *,
    seqs: Sequence[int] | None = None,
    first_seq: int = 0,
) -> bytes:
    """TOKEN records from columns (``cp_pack_tokens``); a column of length 1 is broadcast."""
    kind_col, prov_col, dig, seq_col, n = token_columns(kinds, provs, digests, seqs, first_seq)
    if n == 0:
        return b""
    raw = dig.tobytes()
    return b"".join(
        _TOKEN.pack(
            first_seq + i if seq_col is None else seq_col[i],
            kind_col[0 if len(kind_col) == 1 else i],
            prov_col[0 if len(prov_col) == 1 else i],
            raw[16 * i : 16 * i + 16],
        )
        for i in range(n)
    )


#: ``number_type`` of :func:`encode_numbers` (``CP_NUM_*``): the array typecode it reads.
NUMBER_TYPES = {"q": 1, "Q": 2, "d": 3}


def encode_numbers(values: array[int] | array[float]) -> tuple[bytes, array[int]]:
    """Canonical encodings of an ``array('q'|'Q'|'d')`` joined, and n+1 offsets."""
    if values.typecode not in NUMBER_TYPES:
        raise RecordFormatError(
            "numbers must be an array of 'q', 'Q' or 'd'",
            expected=sorted(NUMBER_TYPES),
            got=values.typecode,
        )
    parts = [encode_value(v) for v in values]
    offsets = array("Q", [0])
    for part in parts:
        offsets.append(offsets[-1] + len(part))
    return b"".join(parts), offsets


def canonical_check(data: bytes | bytearray | memoryview, offsets: Sequence[int]) -> int | None:
    """The first ``i`` whose ``data[offsets[i]:offsets[i+1]]`` is not exactly one value in
    canonical form, or None: the spec of ``cp_canonical_check`` (csrc/cp_canon.c).

    Canonical means the canonical encoder's own round trip holds: the bytes decode
    (:func:`~cpstore.native.canonical.decode_value`, one msgpack value, nothing after
    it) and re-encode to themselves. Offsets that decrease or pass the data name the
    value they cut."""
    raw = bytes(data)
    for i in range(len(offsets) - 1):
        a, b = offsets[i], offsets[i + 1]
        if a > b or b > len(raw):
            return i
        try:
            decode_value(raw[a:b])
        except CanonicalEncodingError:
            return i
    return None
