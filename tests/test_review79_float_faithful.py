"""review79: a JSON or msgpack document of a run says what the run says, floats included.

Reviewed: the writers' checks of records, kind names and values (``run/faithful.py``)
and 8c2b516's float token judged by its bits (``run/keys.py``). Fixed here: a value of a
float/int/bytes subclass (or a call-graph node holding one) hashed through its methods
(``value + 0.0``, ``int(value)``, ``bytes(value)``) but written as the builtin beneath,
and a kind name hashed through a str subclass's ``encode()``: REJECT replays read back
from their documents as ACCEPTs; a memoryview, a non-dict Mapping, a run without token
values and an out-of-range pin refused mid-stream; a damaged ``.cprun`` NaN (or -0.0)
refused as JSON's NaN ("use msgpack") instead of as damage. The rest pins the strongest
cases tried, which held: round trips keep every record bit for bit and validate's
verdict, findings and first divergence (native and reference engines) for -0.0, NaN
payloads, +-inf, subnormals, 1.0 / 1 / True, ints at 2**53, 2**63, 2**64, float-looking
strs and nested floats; values differing from the records only in a float's encoding
are refused; every refusal names its place with nothing written.
"""

from __future__ import annotations

import io
import math
import struct
import types
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cpstore.cli.entry import main
from cpstore.cli.exit_codes import EXIT_INTEGRITY
from cpstore.decision import token_checks
from cpstore.decision.table import Decision, Verdict
from cpstore.decision.validate import validate
from cpstore.errors import CpstoreError, IntegrityError, InvalidInputError, RecordFormatError
from cpstore.native import binding, ingest_reference, reference
from cpstore.native.args import as_offsets
from cpstore.native.binding import canonical_check, digest
from cpstore.native.canonical import decode_value, encode_value
from cpstore.native.records import Provenance, kind_code, pack_token
from cpstore.run import faithful, stream
from cpstore.run.cprun import dump_cprun, parse_cprun
from cpstore.run.document import dump_document, load_document
from cpstore.run.model import Observation, PackedTokens, ReplayMode, Run, Token
from cpstore.run.values import EncodedValues
from cpstore.run.writer import write_document

STATE = "00" * 16
ENCODINGS = ("json", "msgpack")
PROPERTY = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _bits(bits: int) -> float:
    return float(struct.unpack(">d", bits.to_bytes(8, "big"))[0])


def _f64(bits: int) -> bytes:
    return b"\xcb" + bits.to_bytes(8, "big")


NAN_BITS = [0x7FF8000000000001, 0xFFF8000000000000, 0x7FF0000000000001, 0xFFFFFFFFFFFFFFFF]
EDGE_FLOATS = [
    0.0, -0.0, 5e-324, -5e-324, 2.2250738585072009e-308, 1.7976931348623157e308,
    float(2**53), float(2**53) + 2, float(2**63), float(2**64), 1.0, -1.0, 0.1, 1e16,
]  # fmt: skip
EDGE_INTS = [2**53, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1, -(2**63), 2**64, -(2**63) - 1, 2**100]


class _TwoFloat(float):
    """A float whose ``__add__`` says 2.0: the canonical encoder hashed ``value + 0.0``."""

    def __add__(self, other: object) -> float:
        return 2.0


class _TwoInt(int):
    """An int whose ``__int__`` says 2: the canonical encoder hashed ``int(value)``."""

    def __int__(self) -> int:
        return 2


class _TwoItems(dict):  # type: ignore[type-arg]
    """A dict whose ``items()`` says every value is 2.0 (the encoder reads a Mapping by it;
    since review85 an int or float subclass is read by its value, so _TwoFloat no longer
    reads otherwise)."""

    def items(self) -> Any:
        return [(key, 2.0) for key in self]


class _Float(float):
    """A float subclass that changes nothing (numpy's float64 is one)."""


class _Int(int):
    """An int subclass that changes nothing (an IntEnum's members are ones)."""


class _OtherBytes(bytes):
    """Bytes whose ``__bytes__`` says b"other": the canonical encoder hashed ``bytes(value)``."""

    def __bytes__(self) -> bytes:
        return b"other"


# -- the two engines --------------------------------------------------------------


def _reference_canonical_check(data: Any, offsets: Any) -> tuple[int, int, str] | None:
    bad = ingest_reference.canonical_check(data, offsets)
    return None if bad is None else (bad, 0, "not canonical (reference)")


@pytest.fixture(params=["native", "reference"])
def engine(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run the test with the native core, or with its pure-Python twins wherever the
    writers' checks, the document readers and validate's token comparison call it."""
    if request.param == "native":
        yield "native"
        return
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(token_checks, "first_divergence", reference.first_divergence)
        mp.setattr(token_checks, "scan_tokens", reference.scan_tokens)
        mp.setattr(
            token_checks,
            "hashed_kinds",
            lambda recs: ingest_reference.hashed_kinds(bytes(recs), 256),
        )
        mp.setattr(faithful, "scan_tokens", reference.scan_tokens)
        mp.setattr(faithful, "digest_batch", reference.digest_batch)
        mp.setattr(faithful, "canonical_check", _reference_canonical_check)
        mp.setattr(stream, "digest_batch", reference.digest_batch)
        mp.setattr(stream, "json_split", ingest_reference.json_split)
        mp.setattr(stream, "msgpack_split", ingest_reference.msgpack_split)
        mp.setattr(stream, "pack_tokens", ingest_reference.pack_tokens)
        yield "reference"


# -- helpers ------------------------------------------------------------------------


def _run(tokens: PackedTokens, *, replay: bool) -> Run:
    if replay:
        return Run("run", 1, STATE, tokens=tokens, mode=ReplayMode.STRICT)
    return Run("run", 1, STATE, tokens=tokens, ledger_sealed=True)


def _written(run: Run, encoding: str) -> tuple[bytes | None, CpstoreError | None]:
    """``write_document``'s bytes (checked equal to ``dump_document``'s), or its refusal
    (checked: the same from both, a cpstore error, nothing written)."""
    out = io.BytesIO()
    try:
        write_document(run, out, encoding=encoding)
    except CpstoreError as exc:
        assert out.getvalue() == b""
        with pytest.raises(type(exc)) as again:
            dump_document(run, encoding=encoding)
        assert (again.value.where, again.value.what) == (exc.where, exc.what)
        return None, exc
    data = out.getvalue()
    assert dump_document(run, encoding=encoding) == data
    return data, None


def _load(data: bytes | None) -> Run:
    assert data is not None
    return load_document(data)


def _key(decision: Decision) -> tuple[Any, ...]:
    """Verdict, fidelity and every finding (its position: the first divergence), by repr
    (a NaN shown in a finding is not equal to itself)."""
    return (decision.verdict, decision.fidelity, repr([f.to_dict() for f in decision.findings]))


def _where(decision: Decision) -> tuple[Any, ...]:
    """Verdict, fidelity and each finding's code and position."""
    return (
        decision.verdict,
        decision.fidelity,
        [(f.code, f.stream, f.position) for f in decision.findings],
    )


def _representable(value: Any, encoding: str) -> bool:
    """The oracle: can ``encoding`` hold this canonical value?"""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return True
    if isinstance(value, int):
        return encoding == "json" or -(2**63) <= value < 2**64
    if isinstance(value, float):
        return encoding == "msgpack" or math.isfinite(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return encoding == "msgpack"
    if isinstance(value, (list, tuple)):
        return all(_representable(v, encoding) for v in value)
    assert isinstance(value, dict)
    return all(
        (encoding == "msgpack" or isinstance(k, str))
        and _representable(k, encoding)
        and _representable(v, encoding)
        for k, v in value.items()
    )


# -- strategies ---------------------------------------------------------------------

FLOATS = (
    st.floats()
    | st.integers(0, 2**64 - 1).map(_bits)
    | st.sampled_from([*EDGE_FLOATS, math.inf, -math.inf, *map(_bits, NAN_BITS)])
)
SCALARS = (
    st.none()
    | st.booleans()
    | FLOATS
    | st.sampled_from(EDGE_INTS)
    | st.integers(-(2**64), 2**64)
    | st.sampled_from(["1.0", "-0.0", "NaN", "1e400", "Infinity", "1", "true"])
    | st.binary(max_size=3)
)
KEYS = st.text(max_size=3) | st.integers(-3, 3) | st.sampled_from([1.0, -0.5, True, None])
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=8,
)
KINDS = st.sampled_from(["rng", "clock", "tool", "env", "my.kind", "float"])
TOKENS = st.lists(st.tuples(KINDS, VALUES), min_size=1, max_size=6)


def _packed(items: list[tuple[str, Any]]) -> PackedTokens:
    return PackedTokens.from_tokens(Token(i, k, v) for i, (k, v) in enumerate(items))


# -- the round trip, both engines ---------------------------------------------------


@PROPERTY
@given(recorded=TOKENS, data=st.data())
@example(recorded=[("rng", -0.0), ("rng", 1.0)], data=None)
@example(recorded=[("rng", {"a": [_bits(NAN_BITS[0]), 5e-324]})], data=None)
def test_a_written_run_reads_back_as_the_same_run_and_the_same_decision(
    engine: str, recorded: list[tuple[str, Any]], data: st.DataObject | None
) -> None:
    """For each document format and each form of the values (Python objects, a .cprun's
    canonical blob): the writer refuses exactly what the format cannot hold (at the
    token's index, nothing written); what it writes reads back with the same records,
    and validate's verdict, findings and first divergence are those of the run itself."""
    replayed = list(recorded)
    if data is not None and data.draw(st.booleans()):
        at = data.draw(st.integers(0, len(replayed) - 1))
        replayed[at] = (replayed[at][0], data.draw(VALUES))
    r_tokens, p_tokens = _packed(recorded), _packed(replayed)
    r_run, p_run = _run(r_tokens, replay=False), _run(p_tokens, replay=True)
    # A finding shows a value as P holds it: Python's -0.0 as given, a document's as its
    # canonical 0.0. The full findings are compared with the canonical form's, and
    # verdict and positions with the Python form's too.
    p_canonical = parse_cprun(dump_cprun(p_run))
    expected = _key(validate(r_run, p_canonical))
    assert _where(validate(r_run, p_run)) == _where(validate(r_run, p_canonical))
    for p_form in (p_run, p_canonical):
        for encoding in ENCODINGS:
            data_out, refused = _written(p_form, encoding)
            holdable = [_representable(v, encoding) for _, v in replayed]
            if refused is not None:
                first = holdable.index(False)
                assert isinstance(refused, InvalidInputError)
                assert refused.where is not None
                assert refused.where.startswith(f"tokens[{first}].value")
                continue
            assert all(holdable)
            back = _load(data_out)
            assert bytes(back.tokens.view()) == bytes(p_tokens.view())
            assert back.tokens.kind_names == p_tokens.kind_names
            assert _key(validate(r_run, back)) == expected
            # And the recording's side written the same way.
            r_out, r_refused = _written(r_run, encoding)
            if r_refused is None:
                assert _key(validate(_load(r_out), back)) == expected


@PROPERTY
@given(items=TOKENS, data=st.data())
def test_values_that_are_not_the_records_are_refused_whatever_their_float_encoding(
    engine: str, items: list[tuple[str, Any]], data: st.DataObject
) -> None:
    """A values section whose value at one token is another value (1 for 1.0, True for 1,
    -0.0 bits, float 32, another NaN's bits, a float-looking str) is refused by name
    before a byte is written, from Python values and from a .cprun's blob alike."""
    tokens = _packed(items)
    at = data.draw(st.integers(0, len(items) - 1))
    canonical = encode_value(items[at][1])
    others = [
        encode_value(1), encode_value(1.0), encode_value(True), encode_value("1.0"),
        _f64(0x8000000000000000), _f64(NAN_BITS[0]), b"\xca\x3f\x80\x00\x00",
        encode_value([1.0]), encode_value({"a": 1}), encode_value(2**64),
    ]  # fmt: skip
    forged = data.draw(st.sampled_from([o for o in others if o != canonical]))
    encs = [encode_value(v) for _, v in items]
    encs[at] = forged
    offs = array("Q", [0])
    for e in encs:
        offs.append(offs[-1] + len(e))
    blob = EncodedValues(b"".join(encs), offs)
    forms = [PackedTokens(tokens.view(), values=blob, kind_names=tokens.kind_names)]
    try:
        python_values = [blob[i] for i in range(len(items))]
    except InvalidInputError:
        pass  # not canonical: no Python value says those bytes
    else:
        forms.append(
            PackedTokens(tokens.view(), values=python_values, kind_names=tokens.kind_names)
        )
    for form in forms:
        run = _run(form, replay=True)
        for encoding in ENCODINGS:
            _, refused = _written(run, encoding)
            assert refused is not None
            assert refused.where is not None
            # The forged token, or one the format cannot hold (checked first, all of them).
            named = int(refused.where.split("]")[0].removeprefix("tokens["))
            assert refused.where.startswith(f"tokens[{named}].value")
            assert named == at or not _representable(items[named][1], encoding)
            if named == at and not isinstance(refused, IntegrityError):
                # Refused as what the format cannot hold: the forged value is that.
                assert isinstance(refused, InvalidInputError)
                assert not _representable(decode_value(forged), encoding)


# -- the defects review79 fixed ------------------------------------------------------


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize(
    ("real", "forged", "evil"),
    [(1.0, 2.0, _TwoFloat(1.0)), (1, 2, _TwoInt(1)), (b"x", b"other", _OtherBytes(b"x"))],
    ids=["float", "int", "bytes"],
)
def test_a_subclass_is_written_as_the_value_its_record_hashes(
    engine: str, encoding: str, real: Any, forged: Any, evil: Any
) -> None:
    """Before: the replay's record said 2.0 (its canonical encoding: ``value + 0.0``),
    the document said 1.0 (json/msgpack write the float beneath): REJECT -> ACCEPT."""
    r_run = _run(_packed([("rng", real)]), replay=False)
    p_tokens = PackedTokens(_packed([("rng", forged)]).view(), values=[evil])
    p_run = _run(p_tokens, replay=True)
    assert validate(r_run, p_run).verdict is Verdict.REJECT
    data, refused = _written(p_run, encoding)
    if refused is not None and not isinstance(forged, bytes):
        # review85: an int or float subclass is read by its value (``real``), never its
        # own ``__int__`` or ``+``: the record of ``forged`` is damage, nothing written.
        assert isinstance(refused, IntegrityError)
        assert refused.where == "tokens[0].value"
        return
    if refused is not None:  # JSON holds no bytes: refused at the token, nothing written
        assert encoding == "json" and isinstance(forged, bytes)
        assert refused.where == "tokens[0].value"
        return
    back = _load(data)
    assert bytes(back.tokens.view()) == bytes(p_tokens.view())
    assert _key(validate(r_run, back)) == _key(validate(r_run, p_run))


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_call_graph_node_holding_a_subclass_is_written_as_its_canonical_value(
    encoding: str,
) -> None:
    """validate compares call-graph nodes by their canonical encodings: a node of the
    recording's look whose encoding says otherwise stays a REJECT when written."""
    node = {"step": 1, "node": "n", "x": 1.0, "y": {"z": 1.0}}
    none = PackedTokens(b"", values=[])
    r_run = Run("run", 1, STATE, tokens=none, call_graph=(node,), ledger_sealed=True)
    p_run = Run(
        "run",
        1,
        STATE,
        tokens=none,
        call_graph=({**node, "x": 1.0, "y": _TwoItems(z=1.0)},),
        mode=ReplayMode.STRICT,
    )
    want = _key(validate(r_run, p_run))
    assert want[0] is Verdict.REJECT
    data, refused = _written(p_run, encoding)
    assert refused is None and data is not None
    assert _key(validate(r_run, load_document(data))) == want


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_mapping_that_is_not_a_dict_is_written_as_one(encoding: str) -> None:
    """Before: refused mid-stream (JSON: InvalidInputError without the token; msgpack: a
    bare TypeError), the head already written."""
    values = [1, types.MappingProxyType({"a": [0.5, -0.0]})]
    run = _run(_packed([("rng", v) for v in values]), replay=False)
    data, refused = _written(run, encoding)
    assert refused is None and data is not None
    back = load_document(data)
    assert bytes(back.tokens.view()) == bytes(run.tokens.view())
    assert list(back.tokens.values or ()) == [1, {"a": [0.5, 0.0]}]


@pytest.mark.parametrize(
    ("encoding", "value"),
    [
        ("json", memoryview(b"ab")),
        ("json", _OtherBytes(b"ab")),
        ("json", _Float(math.nan)),
        ("json", [_Float(-math.inf)]),
        ("msgpack", _Int(2**64)),
        ("msgpack", {"k": _Int(-(2**63) - 1)}),
    ],
    ids=["memoryview", "bytes-subclass", "float-subclass-nan", "nested-inf", "int-subclass",
         "nested-int-subclass"],
)  # fmt: skip
def test_what_a_format_cannot_hold_is_refused_up_front_at_its_token(
    encoding: str, value: Any
) -> None:
    """Before: json.dumps / msgpack refused it mid-stream, after the head."""
    run = _run(_packed([("rng", 1), ("rng", value)]), replay=False)
    data, refused = _written(run, encoding)
    assert data is None and isinstance(refused, InvalidInputError)
    assert refused.where is not None and refused.where.startswith("tokens[1].value")


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("count", [0, 2])
def test_a_run_without_token_values_is_refused_before_a_byte_is_written(
    encoding: str, count: int
) -> None:
    """Before: write_document wrote the head (JSON up to ``"tokens": [``, msgpack every
    field before the tokens) and then refused; dump_document refused first."""
    records = _packed([("rng", i) for i in range(count)]).view()
    run = _run(PackedTokens(records), replay=False)
    data, refused = _written(run, encoding)
    assert data is None and isinstance(refused, InvalidInputError)
    assert refused.where == "tokens.values"


def _cprun_of(encs: list[bytes]) -> Run:
    """A .cprun whose records hash ``encs`` as they are (a writer that did not
    canonicalise: its values section covered by its own digest, so it loads)."""
    recs = b"".join(
        pack_token(i, kind_code("rng"), Provenance.RECORDED, digest(e)) for i, e in enumerate(encs)
    )
    offs = array("Q", [0])
    for e in encs:
        offs.append(offs[-1] + len(e))
    run = Run("r", 1, STATE, tokens=PackedTokens(recs, values=EncodedValues(b"".join(encs), offs)))
    return parse_cprun(dump_cprun(run))


@pytest.mark.parametrize("bits", [*NAN_BITS, 0x8000000000000000])
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_damaged_float_in_a_cprun_is_an_integrity_error_in_either_format(
    engine: str, encoding: str, bits: int
) -> None:
    """Before (8c2b516's fast path), JSON: "not representable in JSON (a NaN or an
    infinity); use encoding='msgpack'", an InvalidInputError, where msgpack (and JSON
    before 8c2b516) said IntegrityError: the file is damaged, not merely unsuited."""
    run = _cprun_of([b"\x01", _f64(bits), _f64(0x7FF8000000000000)])
    out = io.BytesIO()
    with pytest.raises(IntegrityError) as told:
        write_document(run, out, encoding=encoding)
    assert told.value.where == "tokens[1].value"
    assert out.getvalue() == b""


def test_the_canonical_nan_and_infinities_are_still_refused_by_json_alone() -> None:
    run = _cprun_of([b"\x01", _f64(0x7FF8000000000000), _f64(0x7FF0000000000000)])
    with pytest.raises(InvalidInputError, match="NaN or an infinity") as told:
        write_document(run, io.BytesIO(), encoding="json")
    assert not isinstance(told.value, IntegrityError)
    assert told.value.where == "tokens[1].value"
    back = load_document(dump_document(run, encoding="msgpack"))
    assert bytes(back.tokens.view()) == bytes(run.tokens.view())


# -- pinned: keys that are equal once read, bit-faithful floats ------------------------


def _map_blob(keys: list[Any]) -> bytes:
    entries = sorted((encode_value(k), encode_value(i)) for i, k in enumerate(keys))
    return bytes([0x80 | len(entries)]) + b"".join(k + v for k, v in entries)


@pytest.mark.parametrize(
    ("keys", "equal"),
    [
        ([1, 1.0], True), ([True, 1], True), ([False, 0.0], True),
        ([2**53, float(2**53)], True), ([2**53 + 1, float(2**53)], False),
        ([2**63, float(2**63)], True), ([2**63 - 1, float(2**63)], False),
        ([2**64, float(2**64)], True), ([2**64 - 1, float(2**64)], False),
        ([-(2**63), float(-(2**63))], True), ([-(2**63) - 1, float(-(2**63))], False),
        ([2**100, 2.0**100], True), ([2**70, 2.0**70 + 2**18], False),
    ],
)  # fmt: skip
def test_map_keys_equal_once_read_are_refused_by_both_engines_and_the_writers(
    keys: list[Any], equal: bool
) -> None:
    """A .cprun value keyed by 2**63 and 2.0**63 would read back as one entry; both the
    native check and its reference refuse exactly the pairs Python calls equal, and the
    msgpack writer with them."""
    blob = _map_blob(keys)
    offs = array("Q", [0, len(blob)])
    assert (binding.canonical_check(blob, offs) is not None) is equal
    assert (ingest_reference.canonical_check(blob, offs) is not None) is equal
    run = _cprun_of([blob])
    data, refused = _written(run, "msgpack")
    if equal:
        assert isinstance(refused, IntegrityError) and refused.where == "tokens[0].value"
    elif _representable(dict.fromkeys(keys), "msgpack"):
        assert data is not None
        assert bytes(load_document(data).tokens.view()) == bytes(run.tokens.view())
    else:  # an int key outside [-2**63, 2**64): msgpack has no form for it
        assert type(refused) is InvalidInputError and refused.where == "tokens[0].value"


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(bits=st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=40))
def test_every_float_a_writer_accepts_reads_back_bit_for_bit(bits: list[int]) -> None:
    """Any float64 bits as token values (a .cprun's canonical blob): each document
    either refuses it (JSON: NaN, inf) or reads back the same canonical bytes."""
    floats = [_bits(b) for b in bits]
    run = _cprun_of([encode_value(f) for f in floats])
    values = run.tokens.values
    assert isinstance(values, EncodedValues)
    assert canonical_check(values.blob, as_offsets(values.offsets)) is None
    for encoding in ENCODINGS:
        data, refused = _written(run, encoding)
        if refused is not None:
            assert encoding == "json"
            first = next(i for i, f in enumerate(floats) if not math.isfinite(f))
            assert refused.where == f"tokens[{first}].value"
            continue
        back = _load(data)
        assert isinstance(back.tokens.values, EncodedValues)
        assert bytes(back.tokens.values.blob) == bytes(values.blob)
        assert bytes(back.tokens.view()) == bytes(run.tokens.view())


@pytest.mark.parametrize("pin", [2**64, -(2**63) - 1, 2**70])
def test_a_pin_msgpack_cannot_hold_is_refused_before_a_byte_is_written(pin: int) -> None:
    """Before: write_document wrote the head (format, run_id, step, state_digest: 52 bytes)
    and refused at the observations, naming nothing. JSON holds the pin (a float read
    back, pinned either way)."""
    run = Run("r", 1, "s", tokens=PackedTokens(b"", values=[]), observations=(
        Observation(1, "src", "d", pin),
    ))  # fmt: skip
    data, refused = _written(run, "msgpack")
    assert data is None and isinstance(refused, InvalidInputError)
    assert refused.where == "observations[0].pinned_at"
    back = _load(_written(run, "json")[0])
    assert back.observations[0].pinned_at == float(pin)


def test_convert_says_integrity_for_a_damaged_nan_whatever_the_target(tmp_path: Path) -> None:
    """Before (8c2b516): ``cpstore convert p.cprun p.json`` exited EXIT_BAD_INPUT advising
    msgpack, and p.msgpack then exited EXIT_INTEGRITY; both say the damage now."""
    src = tmp_path / "p.cprun"
    src.write_bytes(dump_cprun(_cprun_of([b"\x01", _f64(NAN_BITS[0])])))
    for name in ("p.json", "p.msgpack"):
        assert main(["convert", str(src), str(tmp_path / name)]) == EXIT_INTEGRITY
        assert not (tmp_path / name).exists()


class _LyingKind(str):
    """A kind name whose ``encode`` gives another kind's bytes (kind_code hashes those)."""

    def encode(self, encoding: str = "utf-8", errors: str = "strict") -> bytes:
        return b"beta"


class _Name(str):
    """A str subclass that changes nothing."""


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_kind_name_is_checked_as_the_text_the_document_writes(engine: str, encoding: str) -> None:
    """Before: P's record said kind "beta" (a REJECT against a recording of "alpha"),
    named by a str subclass of "alpha" whose encode() said "beta": check_kinds took it,
    the document said "alpha", and read back it was an ACCEPT."""
    r_run = _run(_packed([("alpha", 1)]), replay=False)
    code = kind_code("beta")
    records = _packed([("beta", 1)]).view()
    lying = _run(
        PackedTokens(records, values=[1], kind_names={code: _LyingKind("alpha")}), replay=True
    )
    assert validate(r_run, lying).verdict is Verdict.REJECT
    data, refused = _written(lying, encoding)
    assert data is None and isinstance(refused, RecordFormatError)
    assert refused.where == "tokens[0].kind"
    plain = _run(PackedTokens(records, values=[1], kind_names={code: _Name("beta")}), replay=True)
    back = _load(_written(plain, encoding)[0])
    assert bytes(back.tokens.view()) == bytes(records)
    assert _key(validate(r_run, back)) == _key(validate(r_run, plain))
