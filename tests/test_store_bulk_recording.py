"""Bulk recording for replay engines: every batch path writes what rec.token() writes.

Each path (tuples, one kind over an array or memoryview, packed records with
their values) must give the checkpoint id that single ``rec.token`` calls
give, refuse a bad batch whole (naming the item) and append nothing.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cpstore.errors import InvalidInputError
from cpstore.native.records import kind_code, pack_token_value
from cpstore.run.model import PackedTokens
from cpstore.run.values import EncodedValues
from cpstore.store.facade import open as open_store
from cpstore.store.recorder import Recorder

PROPERTY = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _checkpoint_of(path: Path, record: Callable[[Recorder], Any]) -> str:
    with open_store(path) as st:
        rec = st.recorder("run")
        rec.token("env", "before")  # batches continue a log that already has tokens
        record(rec)
        return rec.checkpoint(1, b"s")


def _singles(
    items: list[tuple[str, Any]], provenance: str = "recorded"
) -> Callable[[Recorder], None]:
    def record(rec: Recorder) -> None:
        for kind, value in items:
            rec.token(kind, value, provenance=provenance)

    return record


@PROPERTY
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["rng", "clock", "my.kind"]),
            st.none()
            | st.booleans()
            | st.integers(-(2**70), 2**70)
            | st.floats()
            | st.text(max_size=5)
            | st.binary(max_size=5)
            | st.lists(st.integers(), max_size=2),
        ),
        max_size=20,
    )
)
def test_tuple_batches_equal_single_tokens(
    tmp_path_factory: Any, items: list[tuple[str, Any]]
) -> None:
    """rec.tokens(items) gives the checkpoint id of rec.token() per item, any value type."""
    base = tmp_path_factory.mktemp("t")
    assert _checkpoint_of(base / "a", _singles(items)) == _checkpoint_of(
        base / "b", lambda rec: rec.tokens(items)
    )


@pytest.mark.parametrize(
    "values",
    [
        array("q", [0, 1, -1, 127, 128, -33, 2**40, -(2**63), 2**63 - 1]),
        array("Q", [0, 2**64 - 1, 255]),
        array("d", [0.0, -0.0, 1.5, math.nan, -math.inf]),
        array("i", [1, -2, 3]),
        memoryview(array("q", [5, 6, 7])),
        [1, "x", None, 2.5],
        (v for v in [3, 4]),
    ],
    ids=["int64", "uint64", "float64", "int32", "memoryview", "list", "iterable"],
)
def test_tokens_from_equals_single_tokens(tmp_path: Path, values: Any) -> None:
    """tokens_from over arrays, memoryviews, lists and iterables equals rec.token() per value."""
    listed = values.tolist() if isinstance(values, (array, memoryview)) else None
    if listed is None:
        values = list(values)
        listed = list(values)
    single = _checkpoint_of(tmp_path / "a", _singles([("clock", v) for v in listed], "live"))
    bulk = _checkpoint_of(
        tmp_path / "b", lambda rec: rec.tokens_from("clock", values, provenance="live")
    )
    assert single == bulk


def test_tokens_from_takes_one_kind_per_value(tmp_path: Path) -> None:
    """A kinds sequence gives each value its own kind."""
    kinds, values = ["rng", "tool", "x.y"], [1, 2, 3]
    single = _checkpoint_of(tmp_path / "a", _singles(list(zip(kinds, values, strict=True))))
    bulk = _checkpoint_of(tmp_path / "b", lambda rec: rec.tokens_from(kinds, values))
    assert single == bulk


def test_tokens_packed_equals_single_tokens(tmp_path: Path) -> None:
    """Packed records with an EncodedValues blob (a replay's own buffers) equal rec.token()."""
    items = [("rng", i) for i in range(10)] + [("my.kind", {"a": [1]}), ("clock", 0.25)]
    with open_store(tmp_path / "src") as st:
        rec = st.recorder("src")
        rec.token("env", "before")
        rec.tokens(items)
        with st.read(rec.checkpoint(1, b"s")) as cp:
            records = bytes(cp.tokens())[32:]
            blob, offsets = (bytes(v) for v in cp.token_values())
    offs = array("Q")
    offs.frombytes(offsets)
    first = offs[1]
    shifted = array("Q", [o - first for o in offs[1:]])
    names = {kind_code("my.kind"): "my.kind"}
    packed = PackedTokens(records, values=EncodedValues(blob[first:], shifted), kind_names=names)
    single = _checkpoint_of(tmp_path / "a", _singles(items))
    bulk = _checkpoint_of(tmp_path / "b", lambda rec: rec.tokens_packed(packed))
    assert single == bulk
    plain = PackedTokens(records, values=[v for _, v in items], kind_names=names)
    assert _checkpoint_of(tmp_path / "c", lambda rec: rec.tokens_packed(plain)) == single


def _refused(tmp_path: Path, record: Callable[[Recorder], Any], where: str | None) -> None:
    with open_store(tmp_path / "s") as st:
        rec = st.recorder("run")
        rec.token("rng", 0)
        with pytest.raises(InvalidInputError) as err:
            record(rec)
        assert rec.token_count == 1  # nothing of the batch was appended
        if where is not None:
            assert err.value.where == where


def test_a_bad_tuple_refuses_the_whole_batch(tmp_path: Path) -> None:
    """A non-tuple item is named by index and nothing is appended."""
    _refused(tmp_path, lambda rec: rec.tokens([("rng", 1), ["rng", 2]]), "items[1]")  # type: ignore[list-item]


def test_an_unencodable_value_refuses_the_whole_batch(tmp_path: Path) -> None:
    """A value with no canonical form is named by index; nothing is appended."""
    _refused(tmp_path, lambda rec: rec.tokens_from("rng", [1, object()]), "values[1]")


def test_packed_records_with_a_wrong_digest_seq_or_kind_are_refused(tmp_path: Path) -> None:
    """A record whose digest, seq or kind does not match is refused; nothing is appended."""
    good = pack_token_value(1, "rng", 1, 5)
    cases = [
        PackedTokens(good, values=[6]),  # digest of another value
        PackedTokens(pack_token_value(7, "rng", 1, 5), values=[5]),  # seq not next
        PackedTokens(pack_token_value(1, "x.y", 1, 5), values=[5]),  # hashed kind, no name
    ]
    for i, packed in enumerate(cases):

        def record(rec: Recorder, p: PackedTokens = packed) -> int:
            return rec.tokens_packed(p)

        _refused(tmp_path / str(i), record, None)
    _checkpoint_of(tmp_path / "ok", lambda rec: rec.tokens_packed(PackedTokens(good, values=[5])))


def test_observations_and_effects_in_bulk_equal_single_calls(tmp_path: Path) -> None:
    """observe_many and effect_many give the checkpoint id of one call per item."""
    reads = [(1, "tool", b"a", 1.0), (2, "clock", b"b", None)]
    effects = [("db", b"x"), ("mail", b"y")]

    def singles(rec: Recorder) -> None:
        for step, source, payload, pinned in reads:
            rec.observe(step, source, payload, pinned_at=pinned)
        for target, payload in effects:
            rec.effect(target, payload)

    def bulk(rec: Recorder) -> None:
        rec.observe_many(reads)
        assert rec.effect_many(effects) == 0

    assert _checkpoint_of(tmp_path / "a", singles) == _checkpoint_of(tmp_path / "b", bulk)
