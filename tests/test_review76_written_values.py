"""review76: a JSON or msgpack document is written only from values that are its records'.

A ``Run`` is validated by its TOKEN records; ``tokens.values`` are taken unchecked
(they make findings readable). A document holds the values alone, and its reader packs
records from them. Before review76 the writers wrote whatever the values said: a
``.cprun`` replay whose records were not the recording's (REJECT) but whose values
section was the recording's values converted (``cpstore convert``, ``dump_document``,
``write_document``) into a replay that was an ACCEPT. The writers now refuse it
(IntegrityError naming the token) before a byte is written.
"""

from __future__ import annotations

import io
from array import array
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cpstore.cli.entry import main
from cpstore.cli.exit_codes import EXIT_BAD_INPUT, EXIT_INTEGRITY
from cpstore.decision.table import Verdict
from cpstore.decision.validate import validate
from cpstore.errors import IntegrityError, RecordFormatError
from cpstore.native.binding import digest
from cpstore.native.canonical import encode_value
from cpstore.native.records import Provenance, kind_code, pack_token
from cpstore.run.cprun import dump_cprun, parse_cprun
from cpstore.run.document import dump_document, load_document
from cpstore.run.model import PackedTokens, ReplayMode, Run, Token
from cpstore.run.values import EncodedValues
from cpstore.run.writer import write_document

STATE = "00" * 16


def _recording() -> Run:
    tokens = PackedTokens.from_tokens([Token(0, "rng", 1), Token(1, "clock", "noon")])
    return Run("run", 1, STATE, tokens=tokens, ledger_sealed=True)


def _forged_replay() -> Run:
    """Records of another replay (rng 2, clock midnight), values of the recording."""
    other = PackedTokens.from_tokens([Token(0, "rng", 2), Token(1, "clock", "midnight")])
    tokens = PackedTokens(other.view(), values=[1, "noon"])
    return Run("run", 1, STATE, tokens=tokens, mode=ReplayMode.STRICT)


def test_the_forged_replay_is_a_reject_as_it_stands() -> None:
    assert validate(_recording(), _forged_replay()).verdict is Verdict.REJECT
    packed = parse_cprun(dump_cprun(_forged_replay()))
    assert validate(_recording(), packed).verdict is Verdict.REJECT


@pytest.mark.parametrize("encoding", ["json", "msgpack"])
def test_dump_document_refuses_values_that_are_not_the_records(encoding: str) -> None:
    """Before: the document loaded back as an ACCEPT of the recording."""
    with pytest.raises(IntegrityError, match="does not match its record") as told:
        dump_document(_forged_replay(), encoding=encoding)
    assert told.value.where == "tokens[0].value"


@pytest.mark.parametrize("encoding", ["json", "msgpack"])
def test_write_document_refuses_them_before_a_byte_is_written(encoding: str) -> None:
    out = io.BytesIO()
    with pytest.raises(IntegrityError) as told:
        write_document(_forged_replay(), out, encoding=encoding)
    assert told.value.where == "tokens[0].value"
    assert out.getvalue() == b""


def test_a_cprun_with_a_values_section_from_another_run_is_not_converted(tmp_path: Path) -> None:
    """The values section is covered by its own digest, so a writer (or an engine that
    packs records and values apart) makes such a file whole; convert refuses it."""
    src = tmp_path / "p.cprun"
    src.write_bytes(dump_cprun(_forged_replay()))
    assert validate(_recording(), load_document(src)).verdict is Verdict.REJECT
    for name in ("p.json", "p.msgpack"):
        assert main(["convert", str(src), str(tmp_path / name)]) == EXIT_INTEGRITY
        assert not (tmp_path / name).exists()  # before: written, and validated ACCEPT
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.cprun"]  # no temp file left
    # cprun to cprun keeps records and values as they are: nothing changes meaning.
    assert main(["convert", str(src), str(tmp_path / "q.cprun")]) == 0


def test_a_later_token_is_named() -> None:
    good = [Token(i, "rng", i) for i in range(40_000)]
    values: list[Any] = [t.value for t in good]
    values[33_000] = -1
    tokens = PackedTokens(PackedTokens.from_tokens(good).view(), values=values)
    run = Run("run", 1, STATE, tokens=tokens)
    with pytest.raises(IntegrityError) as told:
        dump_document(run, encoding="msgpack")
    assert told.value.where == "tokens[33000].value"


def test_a_non_canonical_value_in_a_cprun_is_refused_by_name(tmp_path: Path) -> None:
    """An int in long form hashes as its bytes; read back from JSON it is re-encoded."""
    long_form = b"\xd1\x00\x01"  # 1 as int 16: not the shortest form
    record = pack_token(0, kind_code("rng"), Provenance.RECORDED, digest(long_form))
    values = EncodedValues(long_form, array("Q", [0, len(long_form)]))
    run = Run("run", 1, STATE, tokens=PackedTokens(record, values=values))
    with pytest.raises(IntegrityError, match="canonical form") as told:
        dump_document(run, encoding="json")
    assert told.value.where == "tokens[0].value"


SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats()
    | st.text(max_size=6)
    | st.binary(max_size=6)
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=5,
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(VALUES, max_size=12))
def test_faithful_values_still_write_and_read_back_as_the_same_records(values: list[Any]) -> None:
    """-0.0, NaN, bytes, big ints: the check refuses nothing the records agree with."""
    run = Run(
        "run",
        1,
        STATE,
        tokens=PackedTokens.from_tokens([Token(i, "rng", v) for i, v in enumerate(values)]),
    )
    for packed in (run, parse_cprun(dump_cprun(run))):
        back = load_document(dump_document(packed, encoding="msgpack"))
        assert bytes(back.tokens.view()) == bytes(run.tokens.view())
        assert [encode_value(v) for v in back.tokens.values or []] == [
            encode_value(v) for v in values
        ]


# -- kind names and record form: the document says kinds by name -----------------


def _replay_with(records: bytes | memoryview, kind_names: dict[int, str]) -> Run:
    tokens = PackedTokens(records, values=[1], kind_names=kind_names)
    return Run("run", 1, STATE, tokens=tokens, mode=ReplayMode.STRICT)


def _foo_recording() -> Run:
    tokens = PackedTokens.from_tokens([Token(0, "foo", 1)])
    return Run("run", 1, STATE, tokens=tokens, ledger_sealed=True)


@pytest.mark.parametrize("encoding", ["json", "msgpack"])
def test_a_hashed_code_named_by_a_name_of_another_code_is_not_written(encoding: str) -> None:
    """P's records hold kind "bar"'s code, its names call that code "foo": a REJECT of a
    "foo" recording. Before: written as kind "foo", read back with "foo"'s code, an ACCEPT."""
    bar = PackedTokens.from_tokens([Token(0, "bar", 1)])
    replay = _replay_with(bar.view(), {kind_code("bar"): "foo"})
    assert validate(_foo_recording(), replay).verdict is Verdict.REJECT
    assert validate(_foo_recording(), parse_cprun(dump_cprun(replay))).verdict is Verdict.REJECT
    out = io.BytesIO()
    with pytest.raises(RecordFormatError, match="does not hash to its code") as told:
        write_document(replay, out, encoding=encoding)
    assert told.value.where == "tokens[0].kind" and out.getvalue() == b""
    with pytest.raises(RecordFormatError):
        dump_document(replay, encoding=encoding)


@pytest.mark.parametrize(
    ("code", "what"),
    [(kind_code("foo"), "has no name"), (5, "neither a standard kind nor a hashed one")],
)
def test_a_kind_code_the_document_cannot_name_is_not_written(code: int, what: str) -> None:
    """Before: written as "kind#<code>", a name that reads back as another hashed code."""
    record = pack_token(0, code, Provenance.RECORDED, digest(encode_value(1)))
    with pytest.raises(RecordFormatError, match=what):
        dump_document(_replay_with(record, {}), encoding="json")


def test_a_malformed_record_is_not_written_as_a_well_formed_token(tmp_path: Path) -> None:
    """A reserved byte set: validate raises RecordFormatError. Before: the document dropped
    the byte, and the converted replay was an ACCEPT."""
    record = bytearray(_foo_recording().tokens.view())
    record[13] = 1
    replay = _replay_with(bytes(record), dict(_foo_recording().tokens.kind_names))
    with pytest.raises(RecordFormatError, match="malformed"):
        validate(_foo_recording(), replay)
    src = tmp_path / "p.cprun"
    src.write_bytes(dump_cprun(replay))
    assert main(["convert", str(src), str(tmp_path / "p.json")]) == EXIT_BAD_INPUT
    assert not (tmp_path / "p.json").exists()
    with pytest.raises(RecordFormatError, match="malformed") as told:
        dump_document(replay, encoding="msgpack")
    assert told.value.where == "tokens[0]"


@pytest.mark.parametrize("encoding", ["json", "msgpack"])
def test_offsets_that_go_back_are_refused_not_looped_on(encoding: str) -> None:
    """Values whose offsets decrease mid-way (first and last right): an IntegrityError on
    both encodings (JSON: was a CanonicalEncodingError naming no token)."""
    values = [1.5, 2.5, 3.5]
    blob = b"".join(encode_value(v) for v in values)
    records = PackedTokens.from_tokens([Token(i, "rng", v) for i, v in enumerate(values)]).view()
    offsets = EncodedValues(blob, array("Q", [0, 9, 5, len(blob)]))
    run = Run("run", 1, STATE, tokens=PackedTokens(records, values=offsets))
    with pytest.raises(IntegrityError, match="canonical form at its offsets") as told:
        dump_document(run, encoding=encoding)
    assert told.value.where in ("tokens[1].value", "tokens[2].value")
