"""review83: the canonical encoder never raises outside cpstore's errors for an int or
float subclass, and reads an int's range from the int it reads.

It asked ``_INT_MIN <= value < _INT_END`` of the value itself: an int subclass agreeing
to every bound with the value 2**70 went to msgpack, which raised a bare OverflowError
out of ``Recorder.token``, ``decision``, ``checkpoint`` and ``validate`` (a finding's
token value); one denying them wrote 2 as a bigint ext, bytes the decoder refuses as not
canonical. A float subclass whose ``+`` gives no float raised ``struct.error``. Now the
range is the read int's and the float case is CanonicalEncodingError; the fast encoder
(which hands every failure to the spec) gives the same bytes or error. A token's seq
given as an int subclass is packed as its value.
"""

from __future__ import annotations

from typing import Any

import pytest
from lying_ints import Agrees, Denies
from pg_cluster import backend_store  # noqa: F401 - the ``store`` fixture

from cpstore.decision.validate import validate
from cpstore.native.canonical import decode_value, encode_value
from cpstore.native.fast_canonical import encode_fast
from cpstore.native.records import pack_token, value_digest
from cpstore.run.model import PackedTokens, ReplayMode, Run, Token
from cpstore.store.facade import Store


class _NoFloat(float):
    def __add__(self, other: object) -> Any:
        return "x"

    __hash__ = float.__hash__


class _IntIsText(int):
    def __int__(self) -> Any:
        return "x"

    __hash__ = int.__hash__


class _SaysTwo(int):
    def __index__(self) -> int:
        return 2

    __hash__ = int.__hash__


@pytest.mark.parametrize(
    "value",
    [Agrees(2**70), Agrees(-(2**70)), Denies(2), Denies(-1), Agrees(2**64), Denies(2**63)],
    ids=["agrees(2**70)", "agrees(-2**70)", "denies(2)", "denies(-1)", "agrees(2**64)", "d(2**63)"],
)
def test_an_int_is_encoded_by_the_int_read(value: int) -> None:
    plain = int.__index__(value)
    for encode in (encode_value, encode_fast):
        assert encode(value) == encode_value(plain)
        assert encode([value, {"k": value}]) == encode_value([plain, {"k": plain}])
    assert decode_value(encode_value(value)) == plain


@pytest.mark.parametrize(
    ("value", "plain"), [(_NoFloat(1.0), 1.0), (_IntIsText(3), 3)], ids=["no-float", "int-is-text"]
)
def test_a_subclass_giving_no_number_is_read_by_its_value(value: Any, plain: Any) -> None:
    # review83 made these CanonicalEncodingError; review85 reads the value, never the
    # subclass's own + or __int__ (tests/test_review85_canonical_value.py).
    for encode in (encode_value, encode_fast):
        assert encode(value) == encode_value(plain)
        assert encode({"a": [value]}) == encode_value({"a": [plain]})


def test_the_recorder_and_validate_take_such_values(store: Store) -> None:
    rec = store.recorder("r")
    rec.token("rng", Agrees(2**70))  # was OverflowError
    rec.decision(0, "pick", x=Agrees(2**70))
    rec.token("rng", _NoFloat(1.0))  # was struct.error; its value since review85
    cid = rec.checkpoint(0, {"a": Agrees(2**70)})
    rec.close()
    with store.read(cid) as cp:
        man = cp.manifest
        (recorded,) = cp.call_graph()
        assert recorded["x"] == 2**70
    other = pack_token(0, 1, 1, value_digest(6))  # a replayed rng token of another value
    replay = Run(
        "r",
        0,
        man.state_digest,
        tokens=PackedTokens(other, values=[Agrees(2**71)]),  # shown: not the record's
        call_graph=({"step": 0, "node": "pick", "x": 2**70},),
        transcript_digest=man.transcript_digest,
        provenance_tags=(f"replay:{cid}",),
        mode=ReplayMode.STRICT,
    )
    decision = validate(cid, replay, store=store, record=False)  # was OverflowError
    assert decision.verdict.name == "REJECT"


def test_a_token_seq_is_packed_as_its_value() -> None:
    packed = PackedTokens.from_tokens([Token(_SaysTwo(5), "rng", 1, "recorded")])
    assert packed.info(0).seq == 5  # was packed as its __index__, 2
