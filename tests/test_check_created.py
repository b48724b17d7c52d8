"""``model.check_created`` (the LangGraph reads' header check) refuses exactly what
``created_at_of`` refuses, with the same IntegrityError, on every damaged header byte."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cpstore.errors import IntegrityError
from cpstore.native.binding import digest
from cpstore.store.model import check_created, created_at_of, pack_checkpoint_value


def _header(created_at: float, manifest: bytes) -> tuple[bytes, bytes]:
    cid = digest(manifest)
    return pack_checkpoint_value(created_at, manifest, cid)[:16], cid


def _verdict(fn: object, header: object, cid: bytes) -> str | None:
    try:
        fn(header, cid)  # type: ignore[operator]
    except IntegrityError as exc:
        return str(exc)
    return None


@given(
    created=st.floats(allow_nan=False),
    manifest=st.binary(min_size=1, max_size=64),
    at=st.integers(0, 15),
    bit=st.integers(0, 7),
)
def test_check_created_agrees_with_created_at_of(
    created: float, manifest: bytes, at: int, bit: int
) -> None:
    header, cid = _header(created, manifest)
    assert _verdict(check_created, header, cid) is None
    damaged = bytearray(header)
    damaged[at] ^= 1 << bit
    bad = bytes(damaged)
    want = _verdict(created_at_of, bad, cid)
    assert want is not None and "created_at" in want  # every header byte is covered
    assert _verdict(check_created, bad, cid) == want
    other = digest(manifest + b"x")  # the header of another checkpoint
    assert _verdict(check_created, header, other) == _verdict(created_at_of, header, other)
    assert _verdict(check_created, header, other) is not None


@pytest.mark.parametrize("cut", [0, 1, 8, 15])
def test_check_created_refuses_a_short_header_as_created_at_of(cut: int) -> None:
    header, cid = _header(1.5, b"m")
    want = _verdict(created_at_of, header[:cut], cid)
    assert want is not None and "shorter than its header" in want
    assert _verdict(check_created, header[:cut], cid) == want


def test_check_created_takes_a_view_or_bytearray_as_created_at_of() -> None:
    header, cid = _header(2.0, b"m")
    for form in (memoryview(header), bytearray(header)):
        assert _verdict(check_created, form, cid) is None
    bad = bytearray(header)
    bad[9] ^= 4
    assert _verdict(check_created, memoryview(bytes(bad)), cid) == _verdict(
        created_at_of, bytes(bad), cid
    )
