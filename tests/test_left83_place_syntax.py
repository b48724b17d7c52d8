"""A refused value's place in a run document is unambiguous and leads back to the value.

review82's and session 33's leftover: the locator wrote every map key as ``.key`` and a
non-str key as ``[key]``, so a key holding ``.`` or ``[`` (``tokens[3].value.a.b``: the
key ``a.b`` or ``a`` then ``b``?), the empty key, or the int key 1 (the array item
``[1]``?) made the place ambiguous. left83: ``.name`` only for a plain ASCII name,
``["..."]`` (a JSON string) for any other str key, ``{literal}`` for a key that is no
str (docs/run-document.md, "Errors"). These tests parse the reported place with a
parser of their own and walk the document to the refused value, on the streamed and
the strict (whole-document) loader, JSON and msgpack.
"""

from __future__ import annotations

import ast
import json
import math
import re
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from run_docs import doc_body, rng_token

from cpstore.errors import DocumentError
from cpstore.run.document import _decode, load_document, parse_document

MARK = "\x00left83-refused\x00"

# -- a parser of places, written from docs/run-document.md ----------------------------

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_INDEX = re.compile(r"\[([0-9]+)\]")


def _literal(text: str, at: int) -> tuple[Any, int]:
    """The Python literal in ``{...}`` starting at ``text[at]`` (just past ``{``)."""
    if text.startswith(("b'", 'b"'), at):
        quote, i = text[at + 1], at + 2
        while text[i] != quote:
            i += 2 if text[i] == "\\" else 1
        end = i + 1
    else:
        end = text.index("}", at)
    body = text[at:end]
    specials = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
    value = specials[body] if body in specials else ast.literal_eval(body)
    assert text[end] == "}", text
    return value, end + 1


def parse_place(text: str) -> list[tuple[str, Any]]:
    """``[("key", k) | ("index", i), ...]``; the first step may be written without its dot."""
    steps: list[tuple[str, Any]] = []
    i = 0
    if (m := _NAME.match(text)) is not None:
        steps.append(("key", m.group()))
        i = m.end()
    while i < len(text):
        if text[i] == ".":
            m = _NAME.match(text, i + 1)
            assert m is not None, (text, i)
            steps.append(("key", m.group()))
            i = m.end()
        elif (m := _INDEX.match(text, i)) is not None:
            steps.append(("index", int(m.group(1))))
            i = m.end()
        elif text.startswith('["', i):
            key, end = json.JSONDecoder().raw_decode(text, i + 1)
            assert text[end] == "]", text
            steps.append(("key", key))
            i = end + 1
        elif text[i] == "{":
            key, i = _literal(text, i + 1)
            steps.append(("key", key))
        else:
            raise AssertionError(f"not a place: {text!r} at {i}")
    return steps


def _same_key(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


def reach(doc: Any, steps: list[tuple[str, Any]]) -> Any:
    node = doc
    for kind, step in steps:
        if kind == "index":
            assert isinstance(node, list), (steps, type(node))
            node = node[step]
        else:
            assert isinstance(node, dict), (steps, type(node))
            found = [v for k, v in node.items() if _same_key(k, step)]
            assert len(found) == 1, (steps, step)
            node = found[0]
    return node


# -- documents with one refused value somewhere -----------------------------------------

_ODD_STR = st.sampled_from(
    ("a", "a.b", "a[0]", "[1]", "", " ", "a b", '"', "'", "\\", "{1}", ".", "]", "[", "}")
) | st.sampled_from(("é", "_x", "1a", "x\n", "tokens", '["a"]', "\ud800", "\u2028"))
STR_KEYS = _ODD_STR | st.text(max_size=5)
ANY_KEYS = (
    STR_KEYS
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False)
    | st.booleans()
    | st.none()
    | st.binary(max_size=4)
)


def _steps(keys: st.SearchStrategy[Any]) -> st.SearchStrategy[list[tuple[str, Any]]]:
    step = st.tuples(st.just("index"), st.integers(0, 3)) | st.tuples(st.just("key"), keys)
    return st.lists(step, max_size=4)


def _build(steps: list[tuple[str, Any]], siblings: list[Any]) -> Any:
    """A value holding MARK at ``steps``, with valid neighbours around it."""
    node: Any = MARK
    for kind, step in reversed(steps):
        if kind == "index":
            node = [0] * step + [node, "after"]
        else:
            holder: dict[Any, Any] = {k: [k] if isinstance(k, str) else 1 for k in siblings}
            for k in list(holder):
                if k == step or _same_key(k, step):
                    del holder[k]
            holder[step] = node
            node = holder
    return node


_JSON_BAD = ["NaN", "-Infinity", "1e999", '{"x": 1, "x": 2}']
_MSGPACK_BAD = [b"\xd4\x05!", b"\xc7\x00\x01", b"\x82\xa1x\x01\xa1x\x02", b"\x81\x91\x01\x01"]


def _where(raw: bytes) -> tuple[str | None, str | None]:
    """(streamed loader's place, strict whole-document loader's place)."""
    with pytest.raises(DocumentError) as streamed:
        load_document(raw)
    with pytest.raises(DocumentError) as strict:
        parse_document(_decode(raw))
    return streamed.value.where, strict.value.where


def _document(where: str, value: Any, index: int) -> dict[str, Any]:
    tokens = [rng_token(i, i) for i in range(index + 2)]
    if where == "token":
        tokens[index]["value"] = value
        return doc_body(tokens=tokens)
    if where == "harness":
        return doc_body(tokens=tokens, harness_accesses=[1, value])
    return doc_body(tokens=tokens, call_graph=[{"step": 0, "node": "n", "extra": value}])


def _check(doc: dict[str, Any], raw: bytes) -> None:
    streamed, strict = _where(raw)
    assert streamed == strict
    assert streamed is not None
    assert reach(doc, parse_place(streamed)) is MARK, streamed


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=_steps(STR_KEYS),
    siblings=st.lists(STR_KEYS, max_size=3),
    bad=st.sampled_from(_JSON_BAD),
    where=st.sampled_from(["token", "harness", "call_graph"]),
    index=st.integers(0, 3),
)
def test_json_place_parses_back_to_the_refused_value(
    steps: list[tuple[str, Any]], siblings: list[Any], bad: str, where: str, index: int
) -> None:
    doc = _document(where, _build(steps, siblings), index)
    text = json.dumps(doc)
    assume(text.count(json.dumps(MARK)) == 1)
    _check(doc, text.replace(json.dumps(MARK), bad).encode())


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=_steps(ANY_KEYS),
    siblings=st.lists(ANY_KEYS, max_size=3),
    bad=st.sampled_from(_MSGPACK_BAD),
    where=st.sampled_from(["token", "harness", "call_graph"]),
    index=st.integers(0, 3),
)
def test_msgpack_place_parses_back_to_the_refused_value(
    steps: list[tuple[str, Any]], siblings: list[Any], bad: bytes, where: str, index: int
) -> None:
    doc = _document(where, _build(steps, siblings), index)
    try:
        raw: bytes = msgpack.packb(doc, use_bin_type=True)
    except UnicodeEncodeError:  # a lone surrogate key: msgpack cannot write it
        assume(False)
    marker = msgpack.packb(MARK)
    assume(raw.count(marker) == 1)
    _check(doc, raw.replace(marker, bad))


@pytest.mark.parametrize(
    ("value", "place"),
    [
        ({"a.b": MARK}, 'tokens[0].value["a.b"]'),
        ({"a": {"b": MARK}}, "tokens[0].value.a.b"),
        ({"": MARK}, 'tokens[0].value[""]'),
        ({"a[1]": MARK}, 'tokens[0].value["a[1]"]'),
        ({'q"': MARK}, 'tokens[0].value["q\\""]'),
        ({"x y": MARK}, 'tokens[0].value["x y"]'),
        ({"1a": MARK}, 'tokens[0].value["1a"]'),
        ([0, MARK], "tokens[0].value[1]"),
    ],
)
def test_json_places_by_hand(value: Any, place: str) -> None:
    doc = doc_body(tokens=[rng_token(0, value)])
    raw = json.dumps(doc).replace(json.dumps(MARK), "NaN").encode()
    assert _where(raw) == (place, place)


@pytest.mark.parametrize(
    ("value", "place"),
    [
        ({1: MARK}, "tokens[0].value{1}"),
        ([0, MARK], "tokens[0].value[1]"),
        ({"1": MARK}, 'tokens[0].value["1"]'),
        ({b"k": MARK}, "tokens[0].value{b'k'}"),
        ({None: {True: MARK}}, "tokens[0].value{None}{True}"),
        ({1.5: MARK}, "tokens[0].value{1.5}"),
        ({"a.b": {"c": MARK}}, 'tokens[0].value["a.b"].c'),
    ],
)
def test_msgpack_places_by_hand(value: Any, place: str) -> None:
    doc = doc_body(tokens=[rng_token(0, value)])
    raw = msgpack.packb(doc, use_bin_type=True).replace(msgpack.packb(MARK), b"\xd4\x05!")
    assert _where(raw) == (place, place)


def test_a_top_level_key_is_a_step_like_any_other() -> None:
    """msgpack's streamed loader decodes every top-level field alone; a field named
    ``a.b`` holding a refused value was placed at ``a.b``."""
    doc = doc_body(tokens=[rng_token()], **{"a.b": [MARK]})
    raw = msgpack.packb(doc).replace(msgpack.packb(MARK), b"\xd4\x05!")
    assert _where(raw) == ('["a.b"][0]', '["a.b"][0]')


@given(key=ANY_KEYS, inner=st.sampled_from(["", "[2]", "{1}", "value", '["a b"]']))
def test_key_step_and_join_place_parse_back(key: Any, inner: str) -> None:
    from cpstore.run.locate import join_place, key_step  # noqa: PLC0415 (new in left83)

    place = join_place("tokens[0]" + key_step(key), inner)
    steps = parse_place(place)
    assert steps[:2] == [("key", "tokens"), ("index", 0)]
    assert _same_key(steps[2][1], key) and steps[2][0] == "key"
    assert steps[3:] == parse_place("x" + ("." + inner if inner[:1].isalpha() else inner))[1:]


@pytest.mark.parametrize("encoding", ["json", "msgpack"])
def test_an_odd_key_in_token_40000(encoding: str) -> None:
    """Past the first chunk (32,768 tokens): the streamed loader names the same place."""
    tokens = [rng_token(i, i) for i in range(40_001)]
    tokens[40_000]["value"] = {"": {"a.b": [0, MARK]}}
    doc = doc_body(tokens=tokens)
    if encoding == "json":
        raw = json.dumps(doc).replace(json.dumps(MARK), "1e999").encode()
    else:
        raw = msgpack.packb(doc).replace(msgpack.packb(MARK), b"\xd4\x05!")
    place = 'tokens[40000].value[""]["a.b"][1]'
    assert _where(raw) == (place, place)
    assert reach(doc, parse_place(place)) is MARK


@pytest.mark.parametrize("depth", [3, 6, 12])
@pytest.mark.parametrize("encoding", ["json", "msgpack"])
@pytest.mark.parametrize("where", ["token", "harness"])
def test_a_deep_refusal_is_named_alike_by_both_loaders(
    depth: int, encoding: str, where: str
) -> None:
    """msgpack's walk goes eight levels from the document (``locate.MAX_DEPTH``); the
    streamed loader walked from the token (or field) and named a deeper place than the
    strict loader. It now decodes each part as deep as in the document: both name the
    same place, the refused value or its container eight levels down."""
    value: Any = MARK
    for i in range(depth):
        value = {f"k.{i}": [0, value]} if i % 2 else [1, value]
    doc = _document(where, value, 1)
    if encoding == "json":
        raw = json.dumps(doc).replace(json.dumps(MARK), "NaN").encode()
    else:
        raw = msgpack.packb(doc).replace(msgpack.packb(MARK), b"\xd4\x05!")
    streamed, strict = _where(raw)
    assert streamed == strict
    assert streamed is not None
    steps = parse_place(streamed)
    reached = reach(doc, steps)
    if reached is not MARK:  # msgpack: a container eight levels down, on the way to it
        assert encoding == "msgpack" and len(steps) == 8
        assert isinstance(reached, (list, dict))
