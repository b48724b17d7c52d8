"""audit31: a token's value is exactly one msgpack item at its offsets, or it is refused.

``Recorder.tokens_packed`` checked each record's digest against its slice of the
values blob, not that the slice is one value: ``b"\\x01\\x02"`` and ``b""`` hash like
any bytes. Stored so, verify() was clean and the replay cursor, which decodes a
block of values in one stream, served 1 and 2 for two tokens whose records name
other bytes — and the replay validated ACCEPT.
"""

from __future__ import annotations

from array import array
from pathlib import Path
from typing import Any

import pytest

from cpstore.decision.table import Verdict
from cpstore.decision.validate import validate
from cpstore.errors import IntegrityError, InvalidInputError
from cpstore.native.binding import digest
from cpstore.native.records import Provenance, pack_token
from cpstore.replay.cursor import _CheckpointValues
from cpstore.replay.session import ReplaySession
from cpstore.run.model import PackedTokens
from cpstore.run.values import EncodedValues
from cpstore.store.facade import open as open_store


def _packed(slices: list[bytes]) -> PackedTokens:
    blob = b"".join(slices)
    offs = array("Q", [0])
    for s in slices:
        offs.append(offs[-1] + len(s))
    recs = b"".join(
        pack_token(i, 1, Provenance.RECORDED, bytes(digest(s))) for i, s in enumerate(slices)
    )
    return PackedTokens(recs, values=EncodedValues(blob, offs))


@pytest.mark.parametrize(
    ("slices", "bad"),
    [
        ([b"\x01\x02", b""], 0),  # two values in one slice, none in the next
        ([b"\x01", b"\x02\x03", b""], 1),
        ([b"\x01", b"\xcd\x01"], 1),  # a value cut short
        ([b"\x01", b"\x92\x01"], 1),  # an array missing an element
    ],
)
def test_tokens_packed_refuses_values_not_one_per_slice(
    tmp_path: Path, slices: list[bytes], bad: int
) -> None:
    with open_store(tmp_path / "s") as store:
        rec = store.recorder("r")
        with pytest.raises(InvalidInputError) as err:
            rec.tokens_packed(_packed(slices))  # was recorded
        assert err.value.where == f"tokens[{bad}]"
        assert rec.token_count == 0


def test_well_formed_packed_values_are_still_recorded_and_accept(tmp_path: Path) -> None:
    with open_store(tmp_path / "s") as store:
        rec = store.recorder("r")
        rec.tokens_packed(_packed([b"\x01", b"\x02", b"\x92\x01\x02"]))
        cid = rec.checkpoint(1, b"state")
        rec.close()
        with store.read(cid) as cp:
            s = ReplaySession(cp)
            assert [s.cursor.resolve("rng") for _ in range(3)] == [1, 2, [1, 2]]
            p = s.finish(cp.manifest.state_digest)
        assert validate(cid, p, store=store, record=False).verdict is Verdict.ACCEPT


class _View:
    """The little of a checkpoint view the cursor's value reader uses."""

    def __init__(self, blob: bytes, offs: list[int]) -> None:
        self._blob, self._offs = blob, array("Q", offs)
        self.lease: Any = [True]
        self.id = "c" * 32

    def token_value_views(self, *, leased: bool = False) -> tuple[memoryview, memoryview]:
        return memoryview(self._blob), memoryview(self._offs).cast("B")

    def closed_error(self) -> Exception:
        return InvalidInputError("closed")


def test_the_cursor_refuses_a_stored_log_whose_offsets_cut_elsewhere() -> None:
    # What a store written before the fix may hold: the digests match their slices.
    packed = _packed([b"\x01\x02", b""])
    values = _CheckpointValues(_View(b"\x01\x02", [0, 2, 2]), packed.view(), 2)  # type: ignore[arg-type]
    with pytest.raises(IntegrityError, match="one msgpack value"):
        values[0]  # was 1, then 2 for token 1


@pytest.mark.parametrize(
    ("slices", "bad", "what"),
    [
        ([b"\xcc\x01", b"\x02"], 0, "shortest form"),  # 1 as uint 8 (was stored)
        ([b"\x01", b"\x82\xa1a\x01\xa1a\x02"], 1, "strictly increasing"),  # repeated key
        ([b"\x01", b"\x82\xa1b\x01\xa1a\x02"], 1, "strictly increasing"),  # unsorted keys
        ([b"\x82\x01\x00\xc3\x00"], 0, "equal once read"),  # {1: 0, True: 0}
        ([b"\xca\x3f\x80\x00\x00"], 0, "float 32"),
        ([b"\xa2\xed\xa0"], 0, "UTF-8"),
    ],
)
def test_tokens_packed_refuses_a_value_that_is_not_canonical(
    tmp_path: Path, slices: list[bytes], bad: int, what: str
) -> None:
    # Before: stored as given, served by the cursor as msgpack reads it (last key wins),
    # and a session replay ACCEPTed (the strict xfail this test replaced).
    with open_store(tmp_path / "s") as store:
        rec = store.recorder("r")
        with pytest.raises(InvalidInputError, match=what) as err:
            rec.tokens_packed(_packed(slices))
        assert err.value.where == f"tokens[{bad}]"
        assert rec.token_count == 0


def test_the_cursor_refuses_a_stored_value_not_in_canonical_form() -> None:
    # What a store written before the canonical check may hold: {"a": 1, "a": 2} (served
    # as {"a": 2}, last key wins) with a matching digest.
    slices = [b"\x01", b"\x82\xa1a\x01\xa1a\x02"]
    packed = _packed(slices)
    blob = b"".join(slices)
    values = _CheckpointValues(_View(blob, [0, 1, len(blob)]), packed.view(), 2)  # type: ignore[arg-type]
    with pytest.raises(IntegrityError, match="canonical form") as err:
        values[0]  # the whole block is checked when it is loaded; was 1, then {"a": 2}
    assert err.value.where is not None and err.value.where.startswith("token 1 ")
