"""cp_canonical_check (csrc/cp_canon.c) agrees with its twin, the encoder's round trip.

``ingest_reference.canonical_check`` is the spec: a value is canonical when
``canonical.decode_value`` takes it (one msgpack value, nothing after it, and
re-encoding gives the same bytes). The native check must refuse exactly the
same values, name the same first one, and point at a byte inside it: on
generated canonical values (all accepted), on every mutation and truncation
of them, on random bytes, and on hand-made hostile forms (long-form headers,
unsorted, repeated and equal-once-read map keys, nesting past 256, lengths
past the buffer).
"""

from __future__ import annotations

import math
import os
import struct
from array import array
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cpstore.errors import InvalidInputError
from cpstore.native import binding, ingest_reference
from cpstore.native.canonical import MAX_DEPTH, encode_value

QUICK = os.environ.get("CPSTORE_NATIVE_QUICK") == "1"
PROPERTY = settings(
    max_examples=5 if QUICK else 300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

NUMBER_KEYS = (
    st.booleans()
    | st.integers(min_value=-3, max_value=3)
    | st.sampled_from([0.0, 1.0, -1.0, 2.0**64, -(2.0**70), 2.0**63, 0.5])
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False)  # two NaN keys are two keys that encode alike: refused
)
KEYS = st.none() | NUMBER_KEYS | st.just(math.nan) | st.text(max_size=6) | st.binary(max_size=4)
VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**200), max_value=2**200)
    | st.integers(min_value=-(2**64), max_value=2**65)
    | st.floats()
    | st.text(max_size=40)
    | st.binary(max_size=300),
    lambda inner: st.lists(inner, max_size=20) | st.dictionaries(KEYS, inner, max_size=6),
    max_leaves=30,
)


def _pack(slices: list[bytes]) -> tuple[bytes, array[int]]:
    offs = array("Q", [0])
    for s in slices:
        offs.append(offs[-1] + len(s))
    return b"".join(slices), offs


def _agree(blob: bytes, offs: array[int]) -> int | None:
    native = binding.canonical_check(blob, offs)
    spec = ingest_reference.canonical_check(blob, offs)
    assert (None if native is None else native[0]) == spec
    if native is not None:
        i, at, why = native
        assert why in binding.CANON_REASONS.values()
        if offs[i] <= offs[i + 1] <= len(blob):
            assert offs[i] <= at <= offs[i + 1]
    return spec


@PROPERTY
@given(st.lists(VALUES, max_size=8))
def test_canonical_values_are_accepted(values: list[Any]) -> None:
    assert _agree(*_pack([encode_value(v) for v in values])) is None


@PROPERTY
@given(
    st.lists(VALUES, min_size=1, max_size=4),
    st.data(),
)
def test_mutated_values_agree(values: list[Any], data: st.DataObject) -> None:
    slices = [encode_value(v) for v in values]
    k = data.draw(st.integers(0, len(slices) - 1))
    s = bytearray(slices[k])
    op = data.draw(st.sampled_from(["flip", "set", "insert", "delete", "truncate", "append"]))
    at = data.draw(st.integers(0, len(s)))
    byte = data.draw(st.integers(0, 255))
    if op == "flip" and at < len(s):
        s[at] ^= 1 << data.draw(st.integers(0, 7))
    elif op == "set" and at < len(s):
        s[at] = byte
    elif op == "insert":
        s.insert(at, byte)
    elif op == "delete" and at < len(s):
        del s[at]
    elif op == "truncate":
        del s[at:]
    elif op == "append":
        s.append(byte)
    slices[k] = bytes(s)
    _agree(*_pack(slices))


@PROPERTY
@given(st.lists(st.binary(max_size=12), max_size=6))
@example([b"\xdd\xff\xff\xff\xff"])
@example([b"\xdf\xff\xff\xff\xff\x01\x01"])
@example([b"\xdb\xff\xff\xff\xff"])
@example([b"\xc6\xff\xff\xff\xff"])
@example([b"\xc9\xff\xff\xff\xff\x01"])
def test_random_bytes_agree(slices: list[bytes]) -> None:
    _agree(*_pack(slices))


def _f(x: float) -> bytes:
    return struct.pack(">Bd", 0xCB, x)


HOSTILE = [
    b"",
    b"\xc1",
    b"\x01\x02",  # two values
    b"\xcc\x01",
    b"\xcc\x7f",
    b"\xcd\x00\xff",
    b"\xce\x00\x00\xff\xff",
    b"\xcf\x00\x00\x00\x00\xff\xff\xff\xff",
    b"\xd0\xff",  # -1 in a signed byte
    b"\xd0\xe0",  # -32
    b"\xd0\x01",  # a non-negative in a signed form
    b"\xd1\xff\x80",
    b"\xd2\xff\xff\x80\x00",
    b"\xd3\xff\xff\xff\xff\x80\x00\x00\x00",
    b"\xd3\x00\x00\x00\x00\x00\x00\x00\x01",
    b"\xca\x3f\x80\x00\x00",
    _f(-0.0),
    b"\xcb\x7f\xf8\x00\x00\x00\x00\x00\x01",
    b"\xcb\xff\xf8\x00\x00\x00\x00\x00\x00",
    _f(math.inf),
    b"\xd9\x01a",
    b"\xda\x00\x01a",
    b"\xc5\x00\x01a",
    b"\xdc\x00\x01\x01",
    b"\xde\x00\x01\x01\x01",
    b"\xa2\xc0\x80",  # overlong
    b"\xa3\xed\xa0\x80",  # surrogate
    b"\xa4\xf4\x90\x80\x80",  # past U+10FFFF
    b"\xa1\xff",
    b"\xd4\x01\x01",  # bigint in range
    b"\xc7\x09\x01\x00\x80\x00\x00\x00\x00\x00\x00\x00",  # 2**63, in range
    b"\xc7\x0a\x01\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00",  # not minimal
    b"\xc7\x0a\x01\xff\xff\x00\x00\x00\x00\x00\x00\x00\x00",  # not minimal
    b"\xc7\x10\x01" + b"\x01" * 16,  # 16 bytes in ext 8, not fixext 16
    b"\xc7\x00\x01",
    b"\xd5\x02\x00\x00",  # other ext type
    b"\xd6\xff\x00\x00\x00\x00",  # timestamp
    b"\x82\xa1a\x01\xa1a\x02",
    b"\x82\xa1b\x01\xa1a\x02",
    b"\x82\x01\x00\xc3\x00",  # {1, True}
    b"\x82\x00\x00\xc2\x00",  # {0, False}
    b"\x82\x00\x00" + _f(0.0) + b"\x00",
    b"\x82\xc3\x00" + _f(1.0) + b"\x00",
    b"\x82\xff\x00" + _f(-1.0) + b"\x00",
    b"\x82\xcf\x80\x00\x00\x00\x00\x00\x00\x00\x00" + _f(2.0**63) + b"\x00",
    b"\x82" + encode_value(2**64) + b"\x00" + _f(2.0**64) + b"\x00",
    b"\x82" + encode_value(-(2**64)) + b"\x00" + _f(-(2.0**64)) + b"\x00",
    b"\x82" + encode_value(-(2**64) - 1) + b"\x00" + _f(-(2.0**64)) + b"\x00",
    b"\x82" + encode_value(2**1023) + b"\x00" + _f(2.0**1023) + b"\x00",
    b"\x82" + encode_value(-(2**1023)) + b"\x00" + _f(-(2.0**1023)) + b"\x00",
    b"\x82" + encode_value(3 * 2**100) + b"\x00" + _f(3 * 2.0**100) + b"\x00",
    b"\x82\x01\x00" + _f(1.5) + b"\x00",  # {1: 0, 1.5: 0}: canonical
    b"\x82" + _f(math.nan) + b"\x00" + _f(math.nan) + b"\x00",
    b"\x81\x91\x01\x00",  # an array as a key
    b"\x81\x80\x00",
    b"\x81\x01",  # a key without its value
    b"\x91" * (MAX_DEPTH) + b"\xc0",  # deepest leaf allowed
    b"\x91" * (MAX_DEPTH + 1) + b"\xc0",
    b"\x91" * (MAX_DEPTH + 1) + b"\x90",
    b"\x91" * 100_000,
    b"\x81\xc0" * 300 + b"\xc0",
    b"\xdd\xff\xff\xff\xff",
    b"\xdf\xff\xff\xff\xff",
    b"\xc6\xff\xff\xff\xff",
    b"\xdb\xff\xff\xff\xff",
    b"\xc9\xff\xff\xff\xff\x01",
    b"\xd8\x01" + b"\x01" * 15,
]


@pytest.mark.parametrize("value", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_values_agree(value: bytes) -> None:
    _agree(*_pack([b"\x01", value, b"\x02"]))


def test_hostile_values_are_refused_where_the_spec_refuses() -> None:
    refused = [v for v in HOSTILE if ingest_reference.canonical_check(*_pack([v])) == 0]
    assert len(refused) >= len(HOSTILE) - 4  # the few canonical ones are there to be accepted


def test_huge_inputs_agree() -> None:
    big = [
        encode_value(list(range(70_000))),
        encode_value(b"\x00" * 70_000),
        encode_value("é" * 40_000),
        encode_value({str(i): i for i in range(20_000)}),
        encode_value({**{i: 0 for i in range(300)}, **{i + 0.5: 0 for i in range(300)}}),
    ]
    assert _agree(*_pack(big)) is None
    many = [encode_value(i) for i in range(-50_000, 50_000)]
    assert _agree(*_pack(many)) is None
    many[77_777] = b"\xd1\x00\x05"
    assert _agree(*_pack(many)) == 77_777


def test_offsets_that_cut_badly_are_refused() -> None:
    assert _agree(b"\x01\x02", array("Q", [0])) is None
    assert _agree(b"\x01\x02", array("Q", [0, 2, 1])) == 0
    assert _agree(b"\x01\x02", array("Q", [0, 1, 3])) == 1
    with pytest.raises(InvalidInputError):
        binding.canonical_check(b"\x01", array("Q"))
    with pytest.raises(InvalidInputError):
        binding.canonical_check(b"\x01", [0, 1])  # type: ignore[arg-type]
