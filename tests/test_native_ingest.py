"""The streaming-ingest splitters (cp_ingest.c) agree with their pure-Python twins.

Same members, same resume points, same flags and the same failures, on valid
documents, on every truncation of them, on random bytes and on hostile
headers; and on valid input the members they report are the real ones.
"""

from __future__ import annotations

import json
import os
import random
import struct
from array import array
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cpstore.errors import InvalidInputError, RecordFormatError
from cpstore.native import binding, ingest_reference
from cpstore.native.canonical import encode_value

QUICK = os.environ.get("CPSTORE_NATIVE_QUICK") == "1"
PROPERTY = settings(
    max_examples=5 if QUICK else 200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=12,
)
MSGPACK_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.binary(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=12,
)


def _outcome(fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        r = fn(*args, **kwargs)
    except RecordFormatError as exc:
        return ("error", exc.what)
    return (list(r.ends), r.next, r.first_odd, r.done, r.nested_map)


def _json_both(data: bytes, start: int, first: bool, expect: int, cap: int) -> Any:
    native = _outcome(binding.json_split, data, start, first=first, expect_members=expect, cap=cap)
    ref = _outcome(
        ingest_reference.json_split, data, start, first=first, expect_members=expect, cap=cap
    )
    assert native == ref
    return native


def _msgpack_both(data: bytes, start: int, remaining: int, expect: int, cap: int) -> Any:
    native = _outcome(binding.msgpack_split, data, start, remaining, expect_members=expect, cap=cap)
    ref = _outcome(
        ingest_reference.msgpack_split, data, start, remaining, expect_members=expect, cap=cap
    )
    assert native == ref
    return native


@PROPERTY
@given(st.lists(JSON_VALUES, max_size=8), st.integers(1, 9), st.sampled_from(["", " ", "\n\t "]))
@example([], 1, "")
@example([{"a": 1, "b": "x,]\\"}, [1, {"c": {}}], '"}'], 2, " ")
def test_json_split_finds_every_member_and_agrees_with_reference(
    items: list[Any], cap: int, ws: str
) -> None:
    """Resumed in chunks of cap, both splitters give each member's end; the slices parse back."""
    text = ("[" + ws + ("," + ws).join(json.dumps(v) + ws for v in items) + "]").encode()
    pos, first, found = 1, True, []
    while True:
        out = _json_both(text, pos, first, 0, cap)
        assert out[0] != "error"
        ends, nxt, _, done, _ = out
        starts = [pos, *[e + 1 for e in ends[:-1]]][: len(ends)]
        found += [json.loads(text[s:e]) for s, e in zip(starts, ends, strict=True)]
        if done:
            break
        pos, first = nxt, False
    assert found == items


@PROPERTY
@given(st.lists(JSON_VALUES, max_size=6), st.integers(1, 4))
def test_json_split_flags_odd_members_and_nested_maps_like_reference(
    items: list[Any], expect: int
) -> None:
    """first_odd and nested_map agree, and first_odd is the first non-map or wrong-size map."""
    text = json.dumps(items).encode()
    out = _json_both(text, 1, True, expect, 100)
    odd = next(
        (i for i, v in enumerate(items) if not isinstance(v, dict) or len(v) != expect), None
    )
    assert out[2] == odd


@PROPERTY
@given(st.binary(max_size=64), st.integers(0, 70), st.booleans(), st.integers(0, 5))
@example(b'["\\', 1, True, 0)
@example(b"[[[[", 1, True, 0)
@example(b"", 0, True, 0)
def test_json_split_agrees_with_reference_on_any_bytes(
    data: bytes, start: int, first: bool, expect: int
) -> None:
    """Random bytes (unterminated strings, stray brackets, start past the end) agree."""
    _json_both(data, start, first, expect, 7)


@PROPERTY
@given(st.lists(MSGPACK_VALUES, max_size=8), st.integers(1, 9))
def test_msgpack_split_finds_every_item_and_agrees_with_reference(
    items: list[Any], cap: int
) -> None:
    """Each item's end is found; each slice unpacks to the item; truncations agree too."""
    body = b"".join(msgpack.packb(v, use_bin_type=True) for v in items)
    pos, left, found = 0, len(items), []
    while left:
        out = _msgpack_both(body, pos, left, 0, cap)
        ends = out[0]
        starts = [pos, *ends[:-1]][: len(ends)]
        found += [
            msgpack.unpackb(body[s:e], raw=False, strict_map_key=False)
            for s, e in zip(starts, ends, strict=True)
        ]
        pos, left = out[1], left - len(ends)
    assert found == items
    for cut in range(len(body)):
        _msgpack_both(body[:cut], 0, len(items), 2, 100)


@PROPERTY
@given(st.binary(max_size=64), st.integers(0, 2**33), st.integers(0, 70), st.integers(0, 3))
@example(b"\xdd\xff\xff\xff\xff", 1, 0, 0)
@example(b"\xdf\xff\xff\xff\xff\x01", 1, 0, 0)
@example(b"\xc1", 1, 0, 0)
@example(b"\xc6\xff\xff\xff\xff", 1, 0, 0)
def test_msgpack_split_agrees_with_reference_on_any_bytes(
    data: bytes, remaining: int, start: int, expect: int
) -> None:
    """Random bytes and lying length headers give the same items or the same error."""
    _msgpack_both(data, start, remaining, expect, 5)


def test_msgpack_split_refuses_headers_owing_more_than_the_input_holds() -> None:
    """A header declaring 2**32 items in 6 bytes is truncated input, found without a walk."""
    with pytest.raises(RecordFormatError, match="ends inside"):
        binding.msgpack_split(b"\x91\xdd\xff\xff\xff\xff", 0, 1, cap=1)


def test_json_split_walks_deep_nesting_without_recursion() -> None:
    """A million nested brackets are one member, split in linear time by both twins."""
    depth = 1_000_000
    text = b"[" + b"[" * depth + b"]" * depth + b",1]"
    out = binding.json_split(text, 1, first=True, cap=10)
    assert list(out.ends) == [1 + 2 * depth, 3 + 2 * depth] and out.done


def test_splitters_agree_on_a_large_token_document() -> None:
    """On a 200 000-token list (megabytes), both twins give the same ends, in chunks."""
    rnd = random.Random(7)
    items = [
        {"seq": i, "kind": "rng", "value": rnd.random(), "provenance": "recorded"}
        for i in range(200_000)
    ]
    text = json.dumps(items).encode()
    assert _json_both(text, 1, True, 4, 1 << 15)[2] is None
    body = msgpack.packb(items)  # an array32 header (5 bytes), then the items
    out = _msgpack_both(body, 5, len(items), 4, 1 << 15)
    assert out[2] is None and len(out[0]) == 1 << 15


@PROPERTY
@given(
    st.lists(
        st.sampled_from([1, 2, 3, 4, 0x80000001, 0x80000002, 0xFFFFFFFF, 0x80001234, 0x7FFFFFFF]),
        max_size=60,
    ),
    st.integers(0, 5),
)
def test_hashed_kinds_agrees_with_reference(codes: list[int], cap: int) -> None:
    """Distinct hashed codes in first-seen order, capped the same way by both twins."""
    records = b"".join(
        i.to_bytes(8, "little") + c.to_bytes(4, "little") + b"\x01" + bytes(19)
        for i, c in enumerate(codes)
    )
    native = binding.hashed_kinds(records, cap)
    assert native == ingest_reference.hashed_kinds(records, cap)
    distinct = list(dict.fromkeys(c for c in codes if c & 0x80000000))
    assert native == (distinct[:cap], len(distinct) > cap)


def test_hashed_kinds_refuses_a_partial_record() -> None:
    """A buffer that is not whole 32-byte records is refused before the C call."""
    with pytest.raises(RecordFormatError):
        binding.hashed_kinds(bytes(33))


@PROPERTY
@given(
    st.sampled_from(["q", "Q", "d"]).flatmap(
        lambda code: st.tuples(
            st.just(code),
            st.lists(
                st.integers(-(2**63), 2**63 - 1)
                if code == "q"
                else st.integers(0, 2**64 - 1)
                if code == "Q"
                else st.floats(allow_nan=True, allow_infinity=True),
                max_size=50,
            ),
        )
    )
)
@example(("q", [0, 127, 128, -32, -33, -128, -129, 2**15, -(2**15) - 1, -(2**63), 2**63 - 1]))
@example(("d", [0.0, -0.0, float("nan"), float("-inf")]))
def test_encode_numbers_agrees_with_reference_and_encode_value(case: tuple[str, list[Any]]) -> None:
    """Native canonical encodings of number arrays equal encode_value's, NaN and -0.0 folded."""
    code, values = case
    numbers = array(code, values)
    blob, offsets = binding.encode_numbers(numbers)
    assert (bytes(blob), offsets) == ingest_reference.encode_numbers(numbers)
    assert [bytes(blob[offsets[i] : offsets[i + 1]]) for i in range(len(values))] == [
        encode_value(v) for v in numbers
    ]


def test_encode_numbers_refuses_other_arrays() -> None:
    """Only int64, uint64 and float64 arrays are encoded natively."""
    with pytest.raises(InvalidInputError):
        binding.encode_numbers(array("i", [1]))


@PROPERTY
@given(
    st.lists(
        st.tuples(
            st.integers(0, 2**64 - 1),
            st.integers(1, 2**32 - 1),
            st.integers(0, 255),
            st.binary(min_size=16, max_size=16),
        ),
        max_size=30,
    ),
    st.booleans(),
    st.integers(0, 2**32),
)
def test_pack_tokens_agrees_with_reference_and_pack_token(
    rows: list[tuple[int, int, int, bytes]], broadcast: bool, first: int
) -> None:
    """Columns give the records pack_token gives, with explicit or numbered seqs and broadcasts."""
    seqs = [r[0] for r in rows]
    kinds = [rows[0][1]] if broadcast and rows else [r[1] for r in rows]
    provs = bytes([rows[0][2]]) if broadcast and rows else bytes(r[2] for r in rows)
    digests = b"".join(r[3] for r in rows)
    for kw in ({"seqs": seqs}, {"first_seq": first}):
        native = binding.pack_tokens(kinds, provs, digests, **kw)
        assert bytes(native) == ingest_reference.pack_tokens(kinds, provs, digests, **kw)
    expected = b"".join(
        struct.pack("<QIB3x16s", s, kinds[0 if broadcast else i], provs[0 if broadcast else i], d)
        for i, (s, _, _, d) in enumerate(rows)
    )
    assert bytes(binding.pack_tokens(kinds, provs, digests, seqs=seqs)) == expected


def test_pack_tokens_refuses_columns_of_the_wrong_length() -> None:
    """A kinds column of neither 1 nor n entries is refused by both twins, alike (review76:
    the native one said InvalidInputError, its parent class)."""
    with pytest.raises(RecordFormatError):
        binding.pack_tokens([1, 1], b"\x01", bytes(48))
    with pytest.raises(RecordFormatError):
        ingest_reference.pack_tokens([1, 1], b"\x01", bytes(48))
