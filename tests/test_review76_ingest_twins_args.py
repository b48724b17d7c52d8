"""review76: the native ingest calls and their pure-Python twins refuse bad arguments alike.

``tests/test_native_ingest.py`` proves the twins agree on results; on arguments they
did not: a column of the wrong length was an InvalidInputError natively and a
RecordFormatError in the reference (the test pinned the two apart), a kind past 32 bits
a bare OverflowError natively, a short ``seqs`` a bare IndexError in the reference, 17
bytes of digests packed one record by the reference and refused natively, a negative
``start`` read from the end of the data by the reference splitters, an
``expect_members`` past 32 bits a bare OverflowError natively, and a huge ``cap`` a
MemoryError natively (it allocated ``cap`` ends up front). Both now share one check
(``cpstore.native.args.split_args`` / ``token_columns``): the same cpstore error class,
naming the argument.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cpstore.errors import CpstoreError, InvalidInputError, RecordFormatError
from cpstore.native import binding, ingest_reference

PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _outcome(call: Any, *args: Any, **kw: Any) -> Any:
    try:
        got = call(*args, **kw)
    except CpstoreError as exc:
        return type(exc).__name__, exc.where
    if isinstance(got, (bytes, bytearray)):
        return bytes(got)
    return list(got.ends), got.next, got.first_odd, got.done, got.nested_map


def _both(name: str, *args: Any, **kw: Any) -> Any:
    native = _outcome(getattr(binding, name), *args, **kw)
    reference = _outcome(getattr(ingest_reference, name), *args, **kw)
    assert native == reference
    return native


INTS = st.one_of(
    st.integers(-3, 40),
    st.sampled_from([2**32 - 1, 2**32, 2**63, 2**64 - 1, 2**64, -(2**64)]),
    st.booleans(),
)


@PROPERTY
@given(
    st.lists(INTS | st.just("a"), max_size=4),
    st.binary(max_size=4),
    st.integers(0, 40),
    st.none() | st.lists(INTS, max_size=4),
    INTS,
)
def test_pack_tokens_twins_agree_on_any_columns(
    kinds: list[Any], provs: bytes, digest_bytes: int, seqs: list[Any] | None, first: Any
) -> None:
    _both("pack_tokens", kinds, provs, bytes(digest_bytes), seqs=seqs, first_seq=first)


@PROPERTY
@given(
    st.binary(max_size=12) | st.sampled_from([b"[1,2]", b'{"a":1},{"b":[2]}]', b"1,2]"]),
    INTS,
    INTS,
    INTS,
    st.booleans(),
)
def test_json_split_twins_agree_on_any_arguments(
    data: bytes, start: Any, cap: Any, expect: Any, first: bool
) -> None:
    _both("json_split", data, start, first=first, expect_members=expect, cap=cap)


@PROPERTY
@given(st.binary(max_size=12), INTS, INTS, INTS, INTS)
def test_msgpack_split_twins_agree_on_any_arguments(
    data: bytes, start: Any, remaining: Any, cap: Any, expect: Any
) -> None:
    _both("msgpack_split", data, start, remaining, expect_members=expect, cap=cap)


def test_the_errors_name_the_argument() -> None:
    assert _both("pack_tokens", [1, 1], b"\x01", bytes(48)) == ("RecordFormatError", None)
    assert _both("pack_tokens", [2**32], b"\x01", bytes(16)) == ("InvalidInputError", "kinds")
    assert _both("pack_tokens", [1], b"\x01", bytes(32), seqs=[0]) == ("InvalidInputError", "seqs")
    assert _both("pack_tokens", [1], b"\x01", bytes(17)) == ("InvalidInputError", "digests")
    assert _both("json_split", b"[1]", -1, first=True, cap=2) == ("InvalidInputError", "start")
    assert _both("json_split", b"1]", 0, first=True, expect_members=2**32, cap=2) == (
        "InvalidInputError",
        "expect_members",
    )
    with pytest.raises(RecordFormatError):
        binding.pack_tokens([1, 1], b"\x01", bytes(48))
    with pytest.raises(InvalidInputError, match="kinds must be ints") as told:
        binding.pack_tokens([-1], b"\x01", bytes(16))
    assert told.value.got == -1


def test_a_huge_cap_allocates_only_what_the_data_can_hold() -> None:
    """Before: ffi.new of 2**60 ends, a MemoryError; the reference answered."""
    assert _both("json_split", b"1,2]", 0, first=True, cap=2**60) == ([1, 3], 4, None, True, False)
    assert _both("msgpack_split", b"\x01\x02", 0, 2, cap=2**60) == ([1, 2], 2, None, True, False)
