"""A refused value inside a run document is placed at its token or field, not ``document``.

review76's leftover: the strict decoder reads a chunk of up to 32,768 tokens (or the
whole document) in one call, so an extension type, a repeated key, NaN or an
out-of-range number in token 40,000 was reported ``at document``. The loaders now name
``tokens[i]`` (and the key inside it when msgpack's walk can), on the error path only."""

from __future__ import annotations

import json
from typing import Any

import msgpack
import pytest
from run_docs import doc_body, rng_token

from cpstore.errors import DocumentError
from cpstore.run.document import load_document


def _tokens(n: int) -> list[dict[str, Any]]:
    return [rng_token(i, i) for i in range(n)]


_EXT = "a msgpack extension type is no run-document value"


@pytest.mark.parametrize("index", [0, 3, 32_767, 32_768, 40_000])
@pytest.mark.parametrize(
    ("bad", "place", "got"),
    [
        (msgpack.ExtType(5, b"xy"), "", "ext type 5 (2 bytes)"),
        ([1, msgpack.ExtType(1, b"\x00")], "[1]", "ext type 1 (1 bytes)"),
        ({"a": [0, {"b": msgpack.ExtType(1, b"")}]}, ".a[1].b", "ext type 1 (0 bytes)"),
    ],
)
def test_msgpack_value_refused_at_its_token(index: int, bad: Any, place: str, got: str) -> None:
    tokens = _tokens(40_001)
    tokens[index]["value"] = bad
    with pytest.raises(DocumentError) as err:
        load_document(msgpack.packb(doc_body(tokens=tokens)))
    assert (err.value.what, err.value.where, err.value.got) == (
        _EXT,
        f"tokens[{index}].value{place}",
        got,
    )


@pytest.mark.parametrize("value", [msgpack.ExtType(0, b""), {"k": msgpack.ExtType(7, b"")}])
def test_an_empty_extension_type_is_no_list(value: Any) -> None:
    """msgpack hands a zero-length extension type over as ``ExtType``, a tuple: it loaded
    as the list ``[code, b""]``, a value the file does not hold, and equal to a document
    that does hold that list."""
    tokens = _tokens(3)
    tokens[1]["value"] = value
    with pytest.raises(DocumentError) as err:
        load_document(msgpack.packb(doc_body(tokens=tokens)))
    assert err.value.what == _EXT
    assert err.value.where is not None and err.value.where.startswith("tokens[1].value")


@pytest.mark.parametrize("index", [0, 3, 32_768, 40_000])
@pytest.mark.parametrize(
    ("bad", "what", "got"),
    [
        ("NaN", "JSON constant not allowed", "NaN"),
        ("-Infinity", "JSON constant not allowed", "-Infinity"),
        ("1e999", "JSON number out of the float range", "1e999"),
        ('{"a": 1, "a": 2}', "duplicate key in a JSON object", "a"),
    ],
)
def test_json_value_refused_at_its_token(index: int, bad: str, what: str, got: str) -> None:
    tokens = _tokens(40_001)
    tokens[index]["value"] = "PLACE"
    text = json.dumps(doc_body(tokens=tokens)).replace('"PLACE"', bad)
    with pytest.raises(DocumentError) as err:
        load_document(text.encode())
    assert (err.value.what, err.value.where, err.value.got) == (what, f"tokens[{index}].value", got)


def test_msgpack_repeated_key_in_a_token() -> None:
    tokens = _tokens(5)
    body = msgpack.packb(doc_body(tokens=tokens))
    token = msgpack.packb(tokens[2])
    repeated = b"\x85" + msgpack.packb("seq") + msgpack.packb(2) + token[1:]
    with pytest.raises(DocumentError) as err:
        load_document(body.replace(token, repeated, 1))
    assert (err.value.what, err.value.where, err.value.got) == (
        "duplicate key in a msgpack map",
        "tokens[2]",
        "seq",
    )


def test_msgpack_bad_value_in_another_field() -> None:
    observation = {"step": 0, "source": msgpack.ExtType(3, b""), "payload_digest": "d"}
    body = doc_body(tokens=_tokens(2), observations=[observation])
    with pytest.raises(DocumentError) as err:
        load_document(msgpack.packb(body))
    assert (err.value.what, err.value.where) == (_EXT, "observations[0].source")


def test_a_document_that_is_no_map_keeps_its_message() -> None:
    for raw in (b"\xc1", msgpack.packb([1, 2])[:-1]):
        with pytest.raises(DocumentError) as err:
            load_document(raw)
        assert err.value.where == "document"
    with pytest.raises(DocumentError) as err:
        load_document(b"\x81\xc1")  # a map whose first key is no msgpack
    assert (err.value.what, err.value.where) == ("not valid msgpack", "document")
    with pytest.raises(DocumentError) as err:  # a top-level array names its item
        load_document(msgpack.packb([1, msgpack.ExtType(2, b"")]))
    assert (err.value.what, err.value.where) == (_EXT, "[1]")


def test_good_documents_load_as_before() -> None:
    tokens = _tokens(40_001)
    for raw in (
        msgpack.packb(doc_body(tokens=tokens)),
        json.dumps(doc_body(tokens=tokens)).encode(),
    ):
        run = load_document(raw)
        values = run.tokens.values
        assert len(run.tokens) == 40_001 and values is not None
        assert values[40_000] == 40_000
