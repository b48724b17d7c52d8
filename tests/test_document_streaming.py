"""Run documents stream their tokens into packed records with the strict parser's meaning.

The strict path (``parse_document`` over a fully decoded document) is the
spec: the streaming path must give the same records, values and kind names,
and refuse the same documents naming the same field, whatever the chunk
boundaries.
"""

from __future__ import annotations

import json
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from cpstore.errors import DocumentError
from cpstore.native.canonical import encode_value
from cpstore.run import document, stream
from cpstore.run.document import load_document, parse_document
from cpstore.run.values import EncodedValues

PROPERTY = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
TOKENS = st.lists(
    st.tuples(
        st.sampled_from(["rng", "clock", "tool", "env", "custom", "llm.sample"]),
        VALUES,
        st.sampled_from(["recorded", "live"]),
    ),
    max_size=40,
)


def _doc(tokens: list[tuple[str, Any, str]], **extra: Any) -> dict[str, Any]:
    return {
        "format": 1,
        "run_id": "r",
        "step": 3,
        "state_digest": "s",
        "observations": [{"step": 1, "source": "tool", "payload_digest": "p", "pinned_at": 1.5}],
        "tokens": [
            {"seq": i, "kind": k, "value": v, "provenance": p} for i, (k, v, p) in enumerate(tokens)
        ],
        "call_graph": [{"step": 1, "node": "a"}],
        "transcript_digest": None,
        "effects": [],
        **extra,
    }


def _strict(raw: bytes) -> Any:
    return parse_document(document._decode(raw))


def _same(raw: bytes) -> None:
    fast, slow = load_document(raw), _strict(raw)
    assert bytes(fast.tokens.view()) == bytes(slow.tokens.view())
    # Compared canonically: NaN != NaN as Python values, but encodes the same.
    assert [encode_value(v) for v in fast.tokens.values or []] == [
        encode_value(v) for v in slow.tokens.values or []
    ]
    assert dict(fast.tokens.kind_names) == dict(slow.tokens.kind_names)
    assert fast.observations == slow.observations and fast.call_graph == slow.call_graph


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of 3 tokens, so every document crosses chunk boundaries."""
    monkeypatch.setattr(stream, "CHUNK", 3)


@PROPERTY
@given(TOKENS, st.sampled_from(["json", "msgpack"]))
def test_streamed_tokens_equal_the_strict_parse(
    small_chunks: None, tokens: list[tuple[str, Any, str]], encoding: str
) -> None:
    """Records, values and kind names equal the strict parser's, across chunk boundaries."""
    doc = _doc(tokens)
    if encoding == "json":
        raw = json.dumps(doc).encode()
    else:
        try:
            raw = msgpack.packb(doc)
        except OverflowError:  # ints past 64 bits have no plain msgpack form
            assume(False)
    _same(raw)


def test_streamed_values_are_an_encoded_blob_not_python_objects() -> None:
    """A streamed document keeps its values as one canonical blob (EncodedValues)."""
    run = load_document(json.dumps(_doc([("rng", 7, "recorded"), ("clock", 1.5, "live")])).encode())
    assert isinstance(run.tokens.values, EncodedValues)
    assert list(run.tokens.values) == [7, 1.5]


@pytest.mark.parametrize(
    ("token_text", "where"),
    [
        ('{"seq": 0, "seq": 1, "kind": "rng", "value": 1, "provenance": "recorded"}', "tokens[4]"),
        (
            '{"seq": 0, "kind": "rng", "value": {"a": 1, "a": 2}, "provenance": "recorded"}',
            "tokens[4].value",
        ),
        ('{"seq": -1, "kind": "rng", "value": 1, "provenance": "recorded"}', "tokens[4].seq"),
        ('{"seq": 4, "kind": "", "value": 1, "provenance": "recorded"}', "tokens[4].kind"),
        ('{"seq": 4, "kind": "rng", "value": 1, "provenance": "maybe"}', "tokens[4].provenance"),
        ('{"seq": 4, "kind": "rng", "value": "\\ud800", "provenance": "live"}', "tokens[4].value"),
        ('{"seq": 4, "kind": "rng", "value": 1, "provenance": "live", "x": 0}', "tokens[4].x"),
        ('{"seq": 4, "kind": "rng", "value": 1}', "tokens[4].provenance"),
        ('{"seq": 4, "kind": "rng", "value": NaN, "provenance": "live"}', "tokens[4].value"),
        ("7", "tokens[4]"),
    ],
)
def test_a_bad_token_in_a_later_chunk_is_refused_naming_it(
    small_chunks: None, token_text: str, where: str
) -> None:
    """Duplicate keys, bad fields and constants are refused like the strict parser refuses them."""
    good = [
        json.dumps({"seq": i, "kind": "rng", "value": i, "provenance": "recorded"})
        for i in range(4)
    ]
    body = json.dumps(_doc([]))
    raw = body.replace(
        '"tokens": []', '"tokens": [' + ", ".join([*good, token_text]) + "]"
    ).encode()
    with pytest.raises(DocumentError) as fast:
        load_document(raw)
    with pytest.raises(DocumentError) as slow:
        _strict(raw)
    assert fast.value.where == slow.value.where == where
    assert fast.value.what == slow.value.what


def test_a_duplicate_top_level_key_is_refused() -> None:
    """msgspec keeps the last duplicate; the streaming path still refuses the document."""
    raw = json.dumps(_doc([])).replace('"run_id": "r"', '"run_id": "r", "run_id": "q"').encode()
    with pytest.raises(DocumentError, match="duplicate key"):
        load_document(raw)


@pytest.mark.parametrize("encoding", ["json", "msgpack"])
def test_values_outside_the_fast_path_keep_their_exact_type(
    small_chunks: None, encoding: str
) -> None:
    """Big ints, -0.0, nested containers and (msgpack) bytes give the strict parser's digests."""
    values: list[Any] = [-0.0, 0.0, [1, [2]], {"b": 1, "a": [None]}, 1.0, 1, True, 2**64 - 1]
    if encoding == "msgpack":
        values += [b"\x00bytes", float("nan"), -(2**63)]
    else:
        values += [2**70, -(2**70)]
    doc = _doc([("rng", v, "recorded") for v in values])
    raw = json.dumps(doc).encode() if encoding == "json" else msgpack.packb(doc, use_bin_type=True)
    _same(raw)


def test_msgpack_tokens_with_non_string_keys_in_values_read_like_strict() -> None:
    """A value map with an int key is a canonical value: both paths read it, alike.

    (Both refused it until the map keys of the canonical model were read back:
    tests/test_msgpack_value_keys.py.)"""
    doc = _doc([("rng", 1, "recorded")])
    doc["tokens"][0]["value"] = {1: 2}
    raw = msgpack.packb(doc)
    _same(raw)
    assert load_document(raw).tokens.values[0] == {1: 2}  # type: ignore[index]


@pytest.mark.parametrize("indent", [None, 2, "\t"])
def test_pretty_printed_and_reordered_json_streams_the_same(
    small_chunks: None, indent: Any
) -> None:
    """Whitespace, key order and escapes anywhere give the strict parser's run."""
    doc = _doc(
        [("rng", 1, "recorded"), ("caf\u00e9", "\u2603", "live"), ("tool", None, "recorded")]
    )
    reordered = dict(reversed(list(doc.items())))
    for body in (doc, reordered):
        _same(json.dumps(body, indent=indent, ensure_ascii=True).encode())
        _same(json.dumps(body, indent=indent, ensure_ascii=False).encode())


@pytest.mark.parametrize("encoding", ["json", "json-indented", "msgpack"])
def test_an_ordinary_document_takes_the_streaming_path(encoding: str) -> None:
    """decode_fast reads an ordinary document itself (no silent fall-back to the whole parse)."""
    doc = _doc([("rng", i, "recorded") for i in range(10)])
    if encoding == "msgpack":
        raw, strict = msgpack.packb(doc), document._strict_msgpack
    else:
        raw = json.dumps(doc, indent=2 if encoding == "json-indented" else None).encode()
        strict = document._strict_json
    run = stream.decode_fast(
        raw,
        encoding="msgpack" if encoding == "msgpack" else "json",
        strict=strict,
        parse_rest=parse_document,
    )
    assert run is not None and isinstance(run.tokens.values, EncodedValues)
    assert list(run.tokens.values) == list(range(10))
