"""review76: a deeply nested value inside a token is a DocumentError, never a RecursionError.

``test_decision_documents`` nests the whole document 100 000 deep, which the strict
parser takes (the top level is no object, so the streaming path never runs). Nested
inside a token's value, the streaming path's msgspec decode of the chunk raised a bare
``RecursionError`` ("maximum recursion depth exceeded while deserializing an object")
out of ``load_document`` from about 1 000 levels, JSON and msgpack alike. A chunk msgspec
cannot decode for depth now goes to the strict decoder, which says "nested too deeply";
a value the canonical encoding refuses (deeper than 256) is named at ``tokens[i].value``.
"""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from run_docs import doc_body, rng_token

from cpstore.errors import DocumentError
from cpstore.run.document import load_document

DOC: dict[str, Any] = doc_body(tokens=[rng_token()])


def _json(value: str) -> bytes:
    text = '{"seq":0,"kind":"rng","value":VALUE,"provenance":"recorded"}'.replace("VALUE", value)
    head = b'{"format":1,"run_id":"r","step":0,"state_digest":"s","observations":[],'
    tail = b'"call_graph":[],"transcript_digest":null,"effects":[]}'
    return head + b'"tokens":[' + text.encode() + b"]," + tail


def _msgpack(value: bytes) -> bytes:
    raw: bytes = msgpack.packb(DOC)
    assert raw.count(b"\xa5value\x00") == 1
    return raw.replace(b"\xa5value\x00", b"\xa5value" + value)


@pytest.mark.parametrize("depth", [300, 1_000, 100_000])
@pytest.mark.parametrize("shape", ["list", "map"])
def test_json_token_value_nested_deep(depth: int, shape: str) -> None:
    value = "[" * depth + "]" * depth if shape == "list" else '{"a":' * depth + "1" + "}" * depth
    with pytest.raises(DocumentError, match="nested too deeply"):
        load_document(_json(value))  # before (1 000 and more): RecursionError


@pytest.mark.parametrize("depth", [300, 1_000, 100_000])
@pytest.mark.parametrize("shape", ["list", "map"])
def test_msgpack_token_value_nested_deep(depth: int, shape: str) -> None:
    value = b"\x91" * depth + b"\x01" if shape == "list" else b"\x81\xa1a" * depth + b"\x01"
    with pytest.raises(DocumentError, match="nested too deeply"):
        load_document(_msgpack(value))  # before (1 000 and more): RecursionError


def test_a_value_as_deep_as_the_canonical_limit_still_loads() -> None:
    value = "[" * 200 + "]" * 200
    assert load_document(_json(value)).tokens.values is not None
    assert len(load_document(_msgpack(b"\x91" * 200 + b"\x01")).tokens) == 1
