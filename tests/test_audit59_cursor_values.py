"""An in-memory ReplayCursor serves a value only once it is shown to be the recorded one.

``PackedTokens.values`` are taken unchecked (they only make findings readable) and
``validate`` compares the records alone. Before audit59 a cursor over an in-memory
recording served whatever its values said: P, a copy of R's records, was an ACCEPT of a
replay that had been handed other values than the recorded ones. A cursor over a stored
checkpoint already verified each block of values against the records' digests; the
in-memory cursor now does the same.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Sequence
from typing import Any, overload

import pytest

from cpstore.decision.table import Verdict
from cpstore.decision.validate import validate
from cpstore.errors import IntegrityError
from cpstore.native.binding import digest
from cpstore.native.records import Provenance, pack_token
from cpstore.replay.cursor import ReplayCursor
from cpstore.run.document import dump_document, load_document
from cpstore.run.model import PackedTokens, ReplayMode, Run, Token
from cpstore.run.values import EncodedValues

STATE = "00" * 16


def _recorded() -> PackedTokens:
    return PackedTokens.from_tokens([Token(0, "rng", 1), Token(1, "clock", "noon")])


def _recording(tokens: PackedTokens) -> Run:
    return Run("run", 1, STATE, tokens=tokens, ledger_sealed=True)


def _replay_of(tokens: PackedTokens) -> Run:
    return Run("run", 1, STATE, tokens=tokens, mode=ReplayMode.STRICT)


def test_values_other_than_the_records_are_never_served() -> None:
    """Before: resolve returned 99 and "evil" and validate(R, P) was an ACCEPT."""
    good = _recorded()
    forged = PackedTokens(good.view(), values=[99, "evil"])
    cursor = ReplayCursor(forged)
    with pytest.raises(IntegrityError, match="does not match its record") as told:
        cursor.resolve("rng")
    assert told.value.where == "token 0 of the recorded tokens"
    assert cursor.position == 0
    # Nothing was served, so nothing of it is in P; P is not R.
    assert len(cursor.replayed()) == 0
    decision = validate(_recording(good), _replay_of(cursor.replayed()))
    assert decision.verdict is Verdict.REJECT


def test_one_forged_value_in_a_later_block_is_found_at_its_token() -> None:
    """Blocks of 4096: the first block is served, the bad token's block is refused."""
    n = 5000
    good = PackedTokens.from_tokens(Token(i, "rng", i) for i in range(n))
    values = list(range(n))
    values[4500] = -1
    cursor = ReplayCursor(PackedTokens(good.view(), values=values))
    assert [cursor.resolve("rng") for _ in range(4096)] == list(range(4096))
    with pytest.raises(IntegrityError) as told:
        cursor.resolve("rng")
    assert told.value.where == "token 4500 of the recorded tokens"
    assert cursor.position == 4096


def test_a_cprun_file_whose_values_section_was_rewritten_is_refused() -> None:
    """The section table's digests are no MAC: a values section edited together with its
    table digest loads; its values are not the records' and are never served."""
    data = bytearray(dump_document(_recording(_recorded()), encoding="cprun"))
    # Section table at 16, 40 bytes per section: kind, 0, offset, length, digest.
    for entry in range(16, 16 + 4 * 40, 40):
        kind, _, offset, length = struct.unpack_from("<IIQQ", data, entry)
        if kind == 4:  # values: 0x01 (1) then 0xa4 "noon"
            assert data[offset] == 0x01
            data[offset] = 0x02  # the rng token now says 2
            data[entry + 24 : entry + 40] = bytes(digest(bytes(data[offset : offset + length])))
    forged = load_document(bytes(data))
    assert forged.tokens.values is not None and forged.tokens.values[0] == 2
    cursor = ReplayCursor(forged.tokens)
    with pytest.raises(IntegrityError, match="does not match its record"):
        cursor.resolve("rng")


def test_swapped_encodings_are_refused() -> None:
    """Each value is checked at its own token, not as a multiset."""
    good = _recorded()
    blob = b"\xa4noon\x01"
    swapped = EncodedValues(blob, array("Q", [0, 5, 6]))
    with pytest.raises(IntegrityError, match="token 0 of"):
        ReplayCursor(PackedTokens(good.view(), values=swapped)).resolve("rng")


def test_a_value_refused_leaves_the_replay_finishable() -> None:
    """A record whose digest is of a non-canonical encoding (uint16 form of 1): refused
    with nothing left behind. Before, the record entered P without its value (msgpack's
    check raised after the append), so cursor.replayed() raised InvalidInputError and a
    replay that swallowed the error could not be finished at all."""
    long_form = b"\xcd\x00\x01"
    records = pack_token(0, "rng", Provenance.RECORDED, bytes(digest(long_form)))
    cursor = ReplayCursor(
        PackedTokens(records, values=EncodedValues(long_form, array("Q", [0, 3])))
    )
    with pytest.raises(IntegrityError, match="canonical"):
        cursor.resolve("rng")
    assert len(cursor.replayed()) == 0


@pytest.mark.parametrize(
    "values",
    [
        [2**63 - 1, -(2**63), 2**64 - 1, -0.0, float("nan"), b"\xff\xfe", ""],
        [True, 1, None, [1, (2, 3)], {"k": b""}, 1.5, "\U0010ffff"],
    ],
    ids=["edges", "mixed"],
)
def test_faithful_in_memory_values_are_served_and_accepted(values: list[object]) -> None:
    """The check refuses nothing a recording really holds (lists and encoded blobs)."""
    tokens = PackedTokens.from_tokens(Token(i, "env", v) for i, v in enumerate(values))
    for held in (tokens, load_document(dump_document(_recording(tokens), encoding="cprun")).tokens):
        cursor = ReplayCursor(held)
        served = [cursor.resolve("env") for _ in values]
        assert len(served) == len(values)
        decision = validate(_recording(tokens), _replay_of(cursor.replayed()))
        assert decision.verdict is Verdict.ACCEPT, decision.findings


def test_a_cprun_recording_of_several_blocks_is_served_whole() -> None:
    """Blocks past the first of an encoded blob are checked at their absolute offsets."""
    n = 9000
    tokens = PackedTokens.from_tokens(Token(i, "rng", [i, str(i)]) for i in range(n))
    loaded = load_document(dump_document(_recording(tokens), encoding="cprun")).tokens
    assert isinstance(loaded.values, EncodedValues)
    cursor = ReplayCursor(loaded)
    assert [cursor.resolve("rng") for _ in range(n)] == [[i, str(i)] for i in range(n)]
    decision = validate(_recording(tokens), _replay_of(cursor.replayed()))
    assert decision.verdict is Verdict.ACCEPT


class _SliceAddsOne(Sequence[Any]):
    """A values sequence whose block slice holds one value more than asked for."""

    def __init__(self, n: int) -> None:
        self._n = n

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...
    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [*range(self._n)[index], "evil"]
        return index


def test_a_block_is_served_only_as_far_as_it_was_verified() -> None:
    """One digest per token of the block: a slice longer than the block (its extra value
    never checked) is refused, not served as the next block's first token."""
    n = 4097
    good = PackedTokens.from_tokens(Token(i, "rng", i) for i in range(n))
    cursor = ReplayCursor(PackedTokens(good.view(), values=_SliceAddsOne(n)))
    with pytest.raises(IntegrityError, match="one per record"):
        cursor.resolve("rng")


def test_one_object_at_two_tokens_is_served_as_recorded_both_times() -> None:
    """Containers are served decoded from their verified encodings (fresh objects, as
    from the store). Before, the caller's object itself was served: a replay that
    changed the value of token 0 was served that change as token 1."""
    config = {"version": 1}
    tokens = PackedTokens.from_tokens([Token(0, "tool", config), Token(1, "tool", config)])
    cursor = ReplayCursor(PackedTokens(tokens.view(), values=[config, config]))
    first = cursor.resolve("tool")
    first["version"] = 2  # the replay changes what it was served
    assert cursor.resolve("tool") == {"version": 1}  # before: {"version": 2}
    assert config == {"version": 1}  # the recording itself is untouched
