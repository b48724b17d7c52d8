"""Argument checks shared by the native wrapper and the reference twins.

Everything the C side would reject is caught here first, with a message that
names the argument, so the native call itself only fails on a bug.
"""

from __future__ import annotations

import argparse
import struct
import sys
from array import array
from collections.abc import Callable, Iterable
from typing import Literal, cast

from cpstore.errors import InvalidInputError, RecordFormatError
from cpstore.native.records import RECORD_FIELDS, RecordType

__all__ = [
    "ALL_FIELDS",
    "HOST_BYTE_ORDER",
    "Buffer",
    "ByteOrder",
    "as_bytes_view",
    "as_offsets",
    "check_offsets",
    "check_text",
    "field_mask",
    "full_checkpoint_id",
    "int_argument",
    "is_hex",
    "little_endian_offsets",
    "non_empty_text",
    "writable_view",
]

#: Anything that exposes a contiguous byte buffer.
Buffer = bytes | bytearray | memoryview

#: Mask with every field bit set (``CP_ALL_FIELDS``).
ALL_FIELDS = 0xFFFFFFFF

#: How a uint64 offsets buffer is laid out: the host's order, or an explicit one
#: (stored offsets are ``"little"``, docs/store.md).
ByteOrder = Literal["native", "little", "big"]

#: The host's byte order: the one place that decides whether a buffer in an
#: explicit order can be read as native uint64s. Read at call time, so tests
#: set it to ``"big"`` to run the big-endian path on a little-endian machine.
HOST_BYTE_ORDER: str = sys.byteorder

_STRUCT_ORDER = {"little": "<", "big": ">"}

_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


def is_hex(text: str) -> bool:
    """True when every character of ``text`` is a hex digit, either case (so for "")."""
    return set(text) <= _HEX_DIGITS


def full_checkpoint_id(text: str) -> str | None:
    """``text`` as a checkpoint id when it is exactly 32 hex characters in either case
    (lowercased, as ``Store.resolve`` and ``validate`` read a typed id), else None.

    The one reading of "a full id" for the decision layer and the CLI (audit68 and
    review74 each found a place that read only lowercase, or only an exact spelling).
    A str subclass is read by its characters (review77: its own ``__len__`` and
    ``__iter__`` made a path read as an id, where the regex this replaced did not)."""
    if not isinstance(text, str):
        return None
    own = str.__str__(text)
    if len(own) == 32 and is_hex(own):
        return own.lower()
    return None


def as_bytes_view(data: object, name: str) -> memoryview:
    """A flat, C-contiguous byte view of ``data`` or :class:`InvalidInputError`."""
    if isinstance(data, str) or not isinstance(data, (bytes, bytearray, memoryview)):
        raise InvalidInputError(
            f"{name} must be a bytes-like object",
            expected="bytes, bytearray or memoryview",
            got=type(data).__name__,
        )
    view = memoryview(data)
    if not view.c_contiguous:
        raise InvalidInputError(f"{name} must be C-contiguous", got="a strided memoryview")
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


def check_text(value: str, where: str, error: type[InvalidInputError] = InvalidInputError) -> str:
    """``value``, or ``error`` naming ``where`` when it has no UTF-8 form (a lone surrogate).

    Every text field is stored or hashed as UTF-8; a surrogate half (``"\\ud800"``,
    or an undecodable byte a command line smuggled in as ``"\\udcff"``) has none.
    """
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise error(
            "text must be valid Unicode (it holds a lone surrogate)",
            where=where,
            got=value[exc.start : exc.end],
        ) from None
    return value


def non_empty_text(value: object, what: str) -> str:
    """``value`` when it is a str with something besides whitespace, valid as UTF-8.

    The one rule for names a caller gives (an observation source, an effect
    target, an operator, a reason, a permit digest).
    """
    if not isinstance(value, str) or not value.strip():
        raise InvalidInputError(f"{what} must be a non-empty string", got=value)
    return check_text(value, what)


def int_argument(low: int, high: int) -> Callable[[str], int]:
    """An argparse ``type``: an int in ``[low, high]``, else a usage error (exit 2).

    Every integer the command line takes is bounded, so no huge value reaches a
    fixed-width key, a struct or an allocation.
    """

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be in [{low}, {high}], got {text}")
        return value

    parse.__name__ = "integer"  # argparse names the type in its messages
    return parse


def writable_view(out: object, size: int, name: str) -> memoryview:
    """A flat writable byte view of ``out`` holding at least ``size`` bytes."""
    if not isinstance(out, (bytearray, memoryview)):
        raise InvalidInputError(
            f"{name} must be a writable buffer",
            expected="bytearray or writable memoryview",
            got=type(out).__name__,
        )
    view = memoryview(out)
    if view.readonly or not view.c_contiguous:
        raise InvalidInputError(
            f"{name} must be writable and C-contiguous", got="read-only or strided"
        )
    view = view.cast("B")
    if len(view) < size:
        raise InvalidInputError(
            f"{name} is too small", expected=f">= {size} bytes", got=f"{len(view)} bytes"
        )
    return view


def little_endian_offsets(offsets: array[int]) -> bytes:
    """``offsets`` (native uint64s) as stored: uint64 little-endian on every host.

    The write-side twin of ``as_offsets(raw, "little")``: on a big-endian
    host the values are packed by value, so the path is testable anywhere.
    """
    if HOST_BYTE_ORDER == "little":
        return offsets.tobytes()
    return struct.pack(f"<{len(offsets)}Q", *offsets)


def as_offsets(offsets: object, byteorder: ByteOrder = "native") -> array[int]:
    """Batch offsets as a native uint64 array (shape only; see :func:`check_offsets`).

    ``byteorder`` says how a *buffer* of offsets is laid out (a sequence of
    ints has no byte order): ``"native"``, or ``"little"``/``"big"``, which
    are converted on a host of the other order.
    """
    if byteorder not in ("native", "little", "big"):
        raise InvalidInputError(
            "unknown offsets byte order", expected=["native", "little", "big"], got=byteorder
        )
    if isinstance(offsets, (bytes, bytearray, memoryview)):
        view = memoryview(offsets)
        if not view.c_contiguous:
            raise InvalidInputError("offsets must be C-contiguous", got="a strided memoryview")
        if view.nbytes % 8:
            raise InvalidInputError(
                "offsets buffer must hold whole uint64 values",
                expected="a multiple of 8 bytes",
                got=f"{view.nbytes} bytes",
            )
        raw = view.cast("B")
        if byteorder in ("native", HOST_BYTE_ORDER):
            offs = array("Q")
            offs.frombytes(raw)
        else:
            # Decoded by value, not by reinterpreting memory, so this path
            # gives the same numbers on any host (and is testable on any host).
            order = _STRUCT_ORDER[byteorder]
            offs = array("Q", struct.unpack(f"{order}{len(raw) // 8}Q", raw))
    else:
        if not isinstance(offsets, Iterable):
            raise InvalidInputError(
                "offsets must be a sequence of ints or a uint64 buffer",
                got=type(offsets).__name__,
            )
        try:
            offs = array("Q", offsets)
        except (TypeError, OverflowError) as exc:
            raise InvalidInputError("offsets must be ints in [0, 2**64)", got=str(exc)) from None
    if len(offs) == 0:
        raise InvalidInputError("offsets must have n+1 entries", expected=">= 1 entry", got=0)
    return offs


def check_offsets(offs: array[int], data_len: int) -> None:
    """Raise unless ``offs`` never decreases and ends within ``data_len`` bytes."""
    prev = offs[0]
    for i, off in enumerate(offs):
        if off < prev:
            raise InvalidInputError(
                "offsets must never decrease", where=f"offsets[{i}]", expected=f">= {prev}", got=off
            )
        prev = off
    if prev > data_len:
        raise InvalidInputError(
            "last offset is past the end of the data",
            where=f"offsets[{len(offs) - 1}]",
            expected=f"<= {data_len}",
            got=prev,
        )


def field_mask(rtype: RecordType, fields: Iterable[str] | None) -> int:
    """The bit mask for the named fields of ``rtype`` (None: every byte)."""
    if fields is None:
        return ALL_FIELDS
    if isinstance(fields, str):
        fields = (fields,)
    if not isinstance(fields, Iterable) or isinstance(fields, (bytes, bytearray, memoryview)):
        raise RecordFormatError(
            "fields must be None, a field name or an iterable of field names",
            where="fields",
            got=type(fields).__name__,
        )
    names = [name for name, _, _ in RECORD_FIELDS[rtype]]
    mask = 0
    for field in fields:
        if field not in names:
            raise RecordFormatError(
                f"unknown field of {rtype.name.lower()} records",
                where="fields",
                expected=names,
                got=field,
            )
        mask |= 1 << names.index(field)
    return mask


__all__ += ["split_args", "token_columns"]


def _bounded(value: object, name: str, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
        raise InvalidInputError(
            f"{name} must be an int in [0, {high}]", where=name, expected=f"[0, {high}]", got=value
        )
    return value


def split_args(
    data: object, start: object, cap: object, expect_members: object, remaining: object = 0
) -> tuple[memoryview, int]:
    """The checked arguments of the member splitters (``cp_json_split``,
    ``cp_msgpack_split`` and their twins): ``data``'s byte view, and ``cap`` clamped to
    ``len(data) + 1`` (every member takes a byte, so no call finds more; the native
    wrapper allocates ``cap`` ends). review76: the twins disagreed (a negative
    ``start`` read from the end in the reference; an ``expect_members`` past 32 bits
    was a bare OverflowError natively)."""
    view = as_bytes_view(data, "data")
    _bounded(start, "start", 2**64 - 1)
    most = _bounded(cap, "cap", 2**64 - 1)
    _bounded(expect_members, "expect_members", 2**32 - 1)
    _bounded(remaining, "remaining", 2**64 - 1)
    return view, min(most, len(view) + 1)


def token_columns(
    kinds: object, provs: object, digests: object, seqs: object, first_seq: object
) -> tuple[array[int], memoryview, memoryview, array[int] | None, int]:
    """The checked columns of ``cp_pack_tokens`` and its twin: kinds as ``array('I')``,
    provenance bytes, digests, seqs as ``array('Q')`` (or None) and the record count.

    A column of neither 1 nor n entries is a :class:`RecordFormatError` in both twins
    (the native wrapper said InvalidInputError); a kind or provenance that does not fit
    its field is an :class:`InvalidInputError`, never a bare OverflowError (review76)."""
    dig = as_bytes_view(digests, "digests")
    n, rest = divmod(len(dig), 16)
    if rest:
        raise InvalidInputError(
            "digests must be whole 16-byte digests", where="digests", got=len(dig)
        )
    seq_col = None if seqs is None else _column("Q", seqs, "seqs")
    if seq_col is not None and len(seq_col) != n:
        raise InvalidInputError(
            "seqs must have one entry per digest", where="seqs", expected=n, got=len(seq_col)
        )
    if (
        isinstance(first_seq, bool)
        or not isinstance(first_seq, int)
        or not 0 <= first_seq <= 2**64 - max(n, 1)
    ):
        raise InvalidInputError(
            "first_seq + n must stay within [0, 2**64]", where="first_seq", got=first_seq
        )
    kind_col = _column("I", kinds, "kinds")
    prov_col = as_bytes_view(provs, "provs")
    if n and (len(kind_col) not in (1, n) or len(prov_col) not in (1, n)):
        raise RecordFormatError(
            "a token column's length is neither 1 nor n",
            expected=(1, n),
            got=(len(kind_col), len(prov_col)),
        )
    return kind_col, prov_col, dig, seq_col, n


def _column(code: str, values: object, name: str) -> array[int]:
    if isinstance(values, array) and values.typecode == code:
        return values
    bits = 64 if code == "Q" else 32
    try:
        return array(code, cast("Iterable[int]", values))
    except (TypeError, OverflowError, ValueError):
        pass
    got: object = type(values).__name__
    if isinstance(values, Iterable) and not isinstance(values, (str, bytes, bytearray)):
        fits = [isinstance(v, int) and 0 <= v < 2**bits for v in values]
        got = next((v for v, ok in zip(values, fits, strict=True) if not ok), got)
    raise InvalidInputError(f"{name} must be ints in [0, 2**{bits})", where=name, got=got)
