"""review85: the canonical encoders read an int or float subclass by its value.

Both read an int subclass by its own ``__int__`` and a float subclass by its own ``+``.
Everything in cpstore reading such a value through the encoder gave one answer only
while those methods answered alike at each call: a decision node holding an int whose
``__int__`` alternated between 7 and 2 was judged by a fresh answer at each
``validate`` of the ``Run`` in memory, while its document (JSON, msgpack, ``.cprun``)
and the store held the answer read when written. The same Run was a match in memory and
a CALL_GRAPH_MISMATCH as its document, or the other way round (a wrong ACCEPT of the
copy). Now ``int.__index__`` and ``float.__float__`` are read, as a step, seq and pin
are (``records.number_value``); the fast encoder's bytes stay the reference's.
"""

from __future__ import annotations

import itertools
import math
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pg_cluster import backend_store  # noqa: F401 - the ``store`` fixture

from cpstore.decision.validate import validate
from cpstore.errors import CanonicalEncodingError
from cpstore.native.canonical import encode_value
from cpstore.native.fast_canonical import encode_element, encode_fast
from cpstore.run import PackedTokens, Run, dump_document, load_document
from cpstore.store.facade import Store


class _Flip(int):
    """An int whose ``__int__`` answers 7, then 2, then 7 ..."""

    calls = itertools.count()

    def __int__(self) -> int:
        return 7 if next(self.calls) % 2 == 0 else 2

    __hash__ = int.__hash__


class _IntSays(int):
    def __int__(self) -> int:
        return 2

    __hash__ = int.__hash__


class _FloatSays(float):
    def __add__(self, other: object) -> Any:
        return 2.0

    __radd__ = __add__
    __hash__ = float.__hash__


class _NoFloat(float):
    def __add__(self, other: object) -> Any:
        return "x"

    __hash__ = float.__hash__


def _run(value: Any) -> Run:
    return Run(
        "r",
        1,
        "s",
        tokens=PackedTokens(b"", values=[]),
        call_graph=({"step": 0, "node": "a", "v": value},),
    )


@pytest.mark.parametrize("encoding", ["json", "msgpack", "cprun"])
def test_a_run_is_judged_alike_in_memory_and_as_its_document(encoding: str) -> None:
    replay = _run(7)
    for _ in range(2):  # either parity of the alternation
        recorded = _run(_Flip(7))
        in_memory = [validate(recorded, replay).verdict for _ in range(3)]
        copy = load_document(dump_document(recorded, encoding=encoding))
        assert copy.call_graph[0]["v"] == 7
        assert in_memory == [validate(copy, replay).verdict] * 3
        next(_Flip.calls)


@pytest.mark.parametrize(
    ("value", "plain"),
    [(_IntSays(7), 7), (_IntSays(2**70), 2**70), (_FloatSays(1.5), 1.5), (_NoFloat(-0.0), 0.0)],
    ids=["int-7", "int-2**70", "float-1.5", "float--0.0"],
)
def test_a_subclass_is_encoded_as_its_value(value: Any, plain: Any) -> None:
    for encode in (encode_value, encode_fast):
        assert encode(value) == encode_value(plain)
        assert encode([value, {"k": value, value: 1}]) == encode_value(
            [plain, {"k": plain, plain: 1}]
        )
    assert encode_element(value) == encode_value(plain)


@pytest.mark.parametrize("spec", [int, float])
def test_an_object_claiming_a_number_is_a_canonical_error(spec: type) -> None:
    fake = mock.Mock(spec=spec)
    for encode in (encode_value, encode_fast):
        with pytest.raises(CanonicalEncodingError):
            encode(fake)
        with pytest.raises(CanonicalEncodingError):
            encode({"a": [fake]})


def test_the_store_records_the_value(store: Store) -> None:
    rec = store.recorder("r")
    rec.token("rng", _IntSays(7))
    rec.decision(0, "pick", x=_FloatSays(1.5), y=_Flip(7))
    rec.decision(1, "pick", y=_Flip(7))
    cid = rec.checkpoint(1, {"a": _IntSays(9)})
    rec.close()
    with store.read(cid) as cp:
        assert cp.token(0)[3] == 7
        assert [n.get("y") for n in cp.call_graph()] == [7, 7]
        assert cp.call_graph()[0]["x"] == 1.5


_leaf = (
    st.integers(-(2**70), 2**70).map(_IntSays)
    | st.integers(-(2**70), 2**70).map(_Flip)
    | st.floats(allow_nan=True).map(_FloatSays)
    | st.floats(allow_nan=True).map(_NoFloat)
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True)
    | st.text(max_size=3)
    | st.none()
)
_values = st.recursive(
    _leaf,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=3) | st.integers(-5, 5).map(_IntSays), inner, max_size=4)
    ),
    max_leaves=12,
)


def _plain(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return int.__index__(value)
    if isinstance(value, float):
        number = float.__float__(value)
        return math.nan if math.isnan(number) else number
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return {_plain(k): _plain(v) for k, v in value.items()}


@settings(max_examples=300, deadline=None)
@given(_values)
def test_fast_and_reference_agree_and_read_values(value: Any) -> None:
    try:
        expected = encode_value(_plain(value))
    except CanonicalEncodingError:  # two keys of one value
        with pytest.raises(CanonicalEncodingError):
            encode_value(value)
        with pytest.raises(CanonicalEncodingError):
            encode_fast(value)
        return
    assert encode_value(value) == expected
    assert encode_fast(value) == expected
