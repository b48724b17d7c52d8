"""A map key is accepted only if it reads back as a key equal to it (docs/format.md).

A tuple key was encoded as a msgpack array, so ``{(1, 2): "x"}`` was hashed, and
a Run holding it was written as ``.cprun`` and msgpack without complaint, but
reading it back gave a list, which cannot be a dict key: the ``.cprun`` refused
the value (CanonicalEncodingError), the msgpack document the whole file
(DocumentError). Such keys are now refused when encoding, naming where; every
key that reads back keeps its bytes (tests/test_format_golden.py unchanged).
JSON turned ``1``/``None``/``True``/``1.5`` keys into strings, so the document
read back held another value: a JSON write now refuses them (use msgpack).
"""

from __future__ import annotations

import dataclasses
import io
import math
from collections.abc import Iterator, Mapping
from enum import IntEnum
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_decision_support import clean_doc

import cpstore
from cpstore.errors import CanonicalEncodingError, DocumentError, InvalidInputError
from cpstore.native.canonical import decode_value, encode_value
from cpstore.native.fast_canonical import encode_fast
from cpstore.run.document import dump_document, load_document, parse_document
from cpstore.run.model import PackedTokens, Run, Token
from cpstore.run.writer import write_document


class _Frozen(Mapping[Any, Any]):
    """A hashable read-only Mapping: it is written as a map, read back as a dict."""

    def __init__(self, data: dict[Any, Any]) -> None:
        self._data = data

    def __getitem__(self, key: Any) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        return hash(tuple(self._data.items()))


class _ListKeyed(Mapping[Any, Any]):
    """A Mapping whose items() yield a list key (no dict can hold one)."""

    def __getitem__(self, key: Any) -> Any:
        return 1

    def __iter__(self) -> Iterator[Any]:
        return iter([[1, 2]])

    def __len__(self) -> int:
        return 1

    def items(self) -> Any:
        return [([1, 2], 1)]


class _Small(IntEnum):
    ONE = 1


class _Text(str):
    pass


_UNREADABLE = [(1, 2), ((1, 2), 3), (), ("a",), _Frozen({"a": 1})]


def _run(values: list[Any]) -> Run:
    doc = clean_doc(len(values))
    for tok, value in zip(doc["tokens"], values, strict=True):
        tok["value"] = value
    return parse_document(doc)


def _plain(run: Run, values: list[Any]) -> Run:
    """``run`` with its token values handed over as plain objects, never encoded."""
    tokens = PackedTokens(run.tokens.records, values=values, kind_names=run.tokens.kind_names)
    return dataclasses.replace(run, tokens=tokens)


@pytest.mark.parametrize("key", _UNREADABLE, ids=repr)
def test_a_key_that_reads_back_as_a_list_or_dict_is_refused(key: Any) -> None:
    for value in ({key: "x"}, [0, {"a": {key: "x"}}]):
        with pytest.raises(CanonicalEncodingError) as err:
            encode_value(value)
        assert "cannot be read back as a key" in err.value.what
        assert err.value.where is not None and err.value.where.startswith("$")
        with pytest.raises(CanonicalEncodingError) as fast:
            encode_fast(value)
        assert (fast.value.what, fast.value.where) == (err.value.what, err.value.where)


def test_a_list_key_from_a_custom_mapping_is_refused() -> None:
    with pytest.raises(CanonicalEncodingError, match="cannot be read back"):
        encode_value(_ListKeyed())
    with pytest.raises(CanonicalEncodingError, match="cannot be read back"):
        encode_fast(_ListKeyed())


@pytest.mark.parametrize(
    "key",
    [
        None,
        True,
        False,
        0,
        -1,
        2**64 - 1,
        2**70,
        -(2**70),
        1.5,
        -0.0,
        math.inf,
        "k",
        _Text("t"),
        b"k",
        memoryview(b"m"),
        _Small.ONE,
    ],
    ids=repr,
)
def test_a_key_that_reads_back_equal_keeps_being_accepted(key: Any) -> None:
    value = {key: "x", "other": 1} if not isinstance(key, str) else {key: "x"}
    decoded = decode_value(encode_value(value))
    assert decoded == value
    assert all(hash(k) == hash(k) for k in decoded)  # hashable, so a dict holds it
    assert encode_value(decoded) == encode_value(value) == encode_fast(value)


def test_a_nan_key_reads_back_as_the_same_bytes() -> None:
    # NaN is unequal to itself, as a value as well as a key: the round trip is by bytes.
    data = encode_value({math.nan: 1})
    assert encode_value(decode_value(data)) == data


def test_a_run_with_a_tuple_keyed_token_value_is_refused_naming_the_token() -> None:
    doc = clean_doc(4)
    doc["tokens"][3]["value"] = {(1, 2): "x"}
    with pytest.raises(DocumentError) as err:
        parse_document(doc)
    assert err.value.where == "tokens[3].value"
    assert "tuple map key cannot be read back as a key" in str(err.value.got)
    with pytest.raises(DocumentError) as tok:
        PackedTokens.from_tokens([Token(0, "rng", {"a": [{(1,): 2}]}, "recorded")])
    assert tok.value.where == "tokens[0].value"


def test_the_recorder_refuses_a_tuple_key_and_records_nothing_of_it(tmp_path: Path) -> None:
    with cpstore.open(tmp_path / "s") as st:
        rec = st.recorder("run")
        rec.token("rng", 1)
        for call in (
            lambda: rec.token("rng", {(1, 2): "x"}),
            lambda: rec.tokens([("rng", 2), ("rng", {"a": {(1,): 1}})]),
            lambda: rec.checkpoint(1, {"a": {(1, 2): 1}}),
            lambda: rec.checkpoint(1, {"a": 1}, metadata={"m": {(1, 2): 1}}),
        ):
            with pytest.raises((CanonicalEncodingError, InvalidInputError)) as err:
                call()
            assert "cannot be read back as a key" in str(err.value)
        cp = rec.checkpoint(1, {"a": 1})
        with st.read(cp) as view:
            assert len(view.tokens()) == 32  # only the first token, whole
        assert st.verify().ok


def test_a_call_graph_node_with_a_tuple_key_is_refused() -> None:
    doc = clean_doc(2)
    doc["call_graph"][0]["node"] = {(1, 2): "plan"}
    with pytest.raises(DocumentError) as err:
        parse_document(doc)
    assert err.value.where == "call_graph[0]"


@pytest.mark.parametrize("encoding", ["json", "msgpack", "cprun"])
def test_writing_plain_tuple_keyed_values_refuses_and_writes_nothing(encoding: str) -> None:
    # PackedTokens(values=...) takes values as given: the writers are the last gate.
    run = _plain(_run([1, 2, 3, 4]), [1, 2, 3, {(1, 2): "x"}])
    with pytest.raises((InvalidInputError, DocumentError)) as err:
        dump_document(run, encoding=encoding)
    assert "cannot" in err.value.what or "cannot" in str(err.value.got)
    out = io.BytesIO()
    with pytest.raises((InvalidInputError, DocumentError)) as werr:
        write_document(run, out, encoding=encoding)
    assert out.getvalue() == b""
    if encoding != "cprun":
        assert werr.value.where == "tokens[3].value"
        assert werr.value.what.startswith("map key at tokens[3].value: a tuple")


@pytest.mark.parametrize("key", [1, 1.5, None, True, b"k"], ids=repr)
def test_json_refuses_a_key_it_would_turn_into_a_string(key: Any) -> None:
    run = _run([{key: "x"}, 2])
    for write in (
        lambda: dump_document(run, encoding="json"),
        lambda: write_document(run, io.BytesIO(), encoding="json"),
        # The same run read back from its .cprun (values held as encodings).
        lambda: dump_document(load_document(dump_document(run, encoding="cprun")), encoding="json"),
    ):
        with pytest.raises(InvalidInputError) as err:
            write()
        assert "not representable in JSON" in err.value.what
    # msgpack carries it as written.
    back = load_document(dump_document(run, encoding="msgpack"))
    assert list(back.tokens.values or []) == [{key: "x"}, 2]


def test_json_refuses_a_non_str_key_in_a_call_graph_node() -> None:
    doc = clean_doc(2)
    doc["call_graph"][0]["node"] = {1: "plan"}
    run = parse_document(doc)
    with pytest.raises(InvalidInputError) as err:
        dump_document(run, encoding="json")
    assert err.value.where == "call_graph[0].node"


# --- Property: whatever the encoder accepts reads back equal, in every format.

_KEYS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False),
    st.text(max_size=4),
    st.binary(max_size=4),
    st.tuples(st.integers(0, 3)),
    st.tuples(st.tuples(st.text(max_size=2)), st.none()),
)
_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False),
    st.text(max_size=4),
    st.binary(max_size=4),
)
_VALUES = st.recursive(
    _LEAVES,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(_KEYS, inner, max_size=4)
    ),
    max_leaves=12,
)


def _norm(value: Any) -> Any:
    """What a value reads back as: tuples are lists, bytes-likes bytes."""
    if isinstance(value, (list, tuple)):
        return [_norm(v) for v in value]
    if isinstance(value, dict):
        return {k: _norm(v) for k, v in value.items()}
    return value


def _accepted(value: Any) -> bool:
    try:
        encode_value(value)
    except CanonicalEncodingError:
        return False
    return True


def _in_msgpack(value: Any) -> bool:
    """msgpack has no integer outside [-2**63, 2**64)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return -(2**63) <= value < 2**64
    if isinstance(value, (list, tuple)):
        return all(_in_msgpack(v) for v in value)
    if isinstance(value, dict):
        return all(_in_msgpack(k) and _in_msgpack(v) for k, v in value.items())
    return True


def _in_json(value: Any) -> bool:
    """JSON: str keys, no bytes, finite floats."""
    if isinstance(value, bytes):
        return False
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, (list, tuple)):
        return all(_in_json(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _in_json(v) for k, v in value.items())
    return True


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=st.lists(_VALUES, min_size=1, max_size=4))
def test_any_accepted_value_reads_back_equal_in_every_format(values: list[Any]) -> None:
    for value in values:
        if _accepted(value):
            back = decode_value(encode_value(value))
            assert back == _norm(value)
            assert encode_value(back) == encode_value(value)
            assert encode_fast(value) == encode_value(value)
        else:
            with pytest.raises(CanonicalEncodingError, match="cannot be read back"):
                encode_fast(value)
    if not all(map(_accepted, values)):
        with pytest.raises(DocumentError, match="cannot be canonically encoded"):
            _run(values)
        return
    run = _run(values)
    want = [_norm(v) for v in values]
    assert list(load_document(dump_document(run, encoding="cprun")).tokens.values or []) == want
    if all(map(_in_msgpack, values)):
        data = dump_document(run, encoding="msgpack")
        assert list(load_document(data).tokens.values or []) == want
    if all(map(_in_json, values)):
        data = dump_document(run, encoding="json")
        assert list(load_document(data).tokens.values or []) == want
    else:
        with pytest.raises(InvalidInputError, match="not representable in JSON"):
            dump_document(run, encoding="json")
