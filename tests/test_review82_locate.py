"""review82: adversarial probes of the refused-value locator (cpstore/run/locate.py).

The strict decoder fails at the first bad part in file order, keys included: an
extension type used as a map key is refused as the key is read, before the values
after it. The locator walked only the values, so it named a later value of the same
map as the place of the key's refusal (``tokens[1].value.b`` for ``ext type 1``, which
is the key of ``.a``)."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from msgpack import ExtType
from run_docs import doc_body, rng_token

from cpstore.errors import DocumentError
from cpstore.run.document import dump_document, load_document

_EXT = "a msgpack extension type is no run-document value"


def _refusal(value: Any, index: int = 1, n: int = 3) -> DocumentError:
    tokens = [rng_token(i, i) for i in range(n)]
    tokens[index]["value"] = value
    with pytest.raises(DocumentError) as err:
        load_document(msgpack.packb(doc_body(tokens=tokens)))
    return err.value


def test_a_refused_key_is_placed_at_its_map_not_a_later_value() -> None:
    err = _refusal({ExtType(1, b"k"): 1, "b": ExtType(2, b"zz")})
    assert (err.what, err.where, err.got) == (_EXT, "tokens[1].value", "ext type 1 (1 bytes)")


def test_a_refused_key_in_a_nested_map() -> None:
    err = _refusal([0, {"a": 1, ExtType(3, b""): 0, "z": ExtType(4, b"")}])
    assert (err.where, err.got) == ("tokens[1].value[1]", "ext type 3 (0 bytes)")


def test_a_value_before_a_refused_key_is_still_named() -> None:
    err = _refusal({"a": ExtType(5, b""), ExtType(6, b""): 0})
    assert (err.where, err.got) == ("tokens[1].value.a", "ext type 5 (0 bytes)")


def test_a_key_no_dict_holds_is_placed_at_its_map() -> None:
    # a key that is a map keyed by an array (no dict holds it), then an ext value
    tokens = [rng_token(i, i) for i in range(3)]
    tokens[1]["value"] = {"a": 1, ExtType(99, b"PH"): 2, "z": ExtType(4, b"")}
    raw = msgpack.packb(doc_body(tokens=tokens))
    raw = raw.replace(msgpack.packb(ExtType(99, b"PH")), bytes([0x81, 0x91, 0x01, 0x00]))
    with pytest.raises(DocumentError) as err:
        load_document(raw)
    assert err.value.where == "tokens[1].value"
    assert err.value.what.startswith("a msgpack map key is an array or a map")


def test_a_late_bad_value_in_a_big_document_is_named() -> None:
    err = _refusal({"ok": 1, "bad": [1, ExtType(9, b"")]}, index=40_000, n=40_001)
    assert (err.where, err.got) == ("tokens[40000].value.bad[1]", "ext type 9 (0 bytes)")


@pytest.mark.parametrize("n", [3, 40_001])
def test_a_token_that_is_a_bad_string_is_no_document_refusal(n: int) -> None:
    """A token that is a msgpack str of invalid UTF-8: the chunk's refusal is "not valid
    msgpack"; decoded alone to find its place, the token fell into the whole-document
    message, "neither a JSON object nor a msgpack map", which the document is."""
    tokens: list[Any] = [rng_token(i, i) for i in range(n)]
    tokens[n - 2] = "PLACEHOLDERX"
    raw = msgpack.packb(doc_body(tokens=tokens))
    raw = raw.replace(msgpack.packb("PLACEHOLDERX"), b"\xac" + b"\xff" * 12)
    with pytest.raises(DocumentError) as err:
        load_document(raw)
    assert (err.value.what, err.value.where) == ("not valid msgpack", f"tokens[{n - 2}]")
    assert "utf-8" in str(err.value.got)


_KEYS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=4)
    | st.binary(max_size=4)
)
_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
    | st.binary(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(_VALUES, max_size=6))
def test_every_value_kind_round_trips_through_msgpack(values: list[Any]) -> None:
    """Refusing every extension type refuses nothing a msgpack document holds: bin,
    non-str keys (None, bools, ints to 2**64 - 1, floats, bytes) load, dump and load
    again to the same canonical values."""
    tokens = [rng_token(i, i) for i in range(len(values))]
    for token, value in zip(tokens, values, strict=True):
        token["value"] = value
    run = load_document(msgpack.packb(doc_body(tokens=tokens)))
    back = load_document(dump_document(run, encoding="msgpack"))
    assert back.tokens.values == run.tokens.values
    assert run.tokens.values == values


def test_a_value_nested_past_the_canonical_limit_is_equal_to_nothing() -> None:
    run = load_document(msgpack.packb(doc_body(tokens=[rng_token(0, 1)])))
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    assert run.tokens.values != [deep]
    assert run.tokens.values == [1]
    assert run.tokens.values != [True]
    assert run.tokens.values != [1.0]
