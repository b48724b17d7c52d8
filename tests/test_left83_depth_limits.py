"""Every run-document reader's nesting limits, at limit - 1, limit and limit + 1.

review82 reported that the fast path allowed one more nesting level than the reference.
The limits, and what each path does at them:

- the canonical limit (``canonical.MAX_DEPTH``, 256: a value's own containers around a
  leaf at depth 256 at most) bounds everything a run keeps: token values, harness
  accesses and call-graph nodes of a JSON or msgpack document, a ``.cprun``'s values
  (``cp_canonical_check`` against its twin, the encoder's round trip). The streamed
  loaders and the strict whole-document loader agreed there (kept as proof);
- msgpack's own stack (1 024 nested containers in the whole document): the streamed
  loader decoded each top-level field and each chunk of tokens alone, one container
  shallower than in the document, so past msgspec's first read (a raised recursion
  limit) it read a document one container past the strict loader's limit: "token value
  cannot be canonically encoded" (or "unknown field", "unknown replay mode") where the
  strict loader said "document nested too deeply". Never an ACCEPT (the canonical limit
  refuses far sooner), but not the same refusal. left83 decodes each part as deep as it
  sits in its document;
- JSON's limit is the interpreter's recursion limit less the frames already in use, so
  it moves with the caller's stack: both loaders refuse past it with ``DocumentError``
  "document nested too deeply", never ``RecursionError``;
- a replay mode nested about 1 000 deep raised ``RecursionError`` out of both loaders
  (``Enum``'s own error message repr()s the value); now "unknown replay mode".
"""

from __future__ import annotations

import json
import sys
from array import array
from collections.abc import Iterator
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from run_docs import marked_document

from cpstore.errors import CpstoreError, DocumentError, IntegrityError
from cpstore.native import binding, ingest_reference
from cpstore.native.binding import digest_batch, pack_tokens
from cpstore.native.canonical import MAX_DEPTH
from cpstore.run import faithful
from cpstore.run.cprun import dump_cprun, parse_cprun
from cpstore.run.document import _decode, load_document, parse_document
from cpstore.run.model import PackedTokens, Run
from cpstore.run.values import EncodedValues

MARK = "\x00left83-depth\x00"
#: msgpack's stack: containers nested in one unpackb call (msgpack-python's C unpacker).
MSGPACK_STACK = 1024


def _outcome(load: Any) -> tuple[str, str | None]:
    try:
        load()
    except CpstoreError as exc:
        return type(exc).__name__, exc.what
    return "accepted", None


def _both(raw: bytes) -> tuple[tuple[str, str | None], tuple[str, str | None]]:
    """(streamed loader's outcome, strict whole-document loader's outcome)."""
    return _outcome(lambda: load_document(raw)), _outcome(lambda: parse_document(_decode(raw)))


def _wrapped(shape: str, depth: int, leaf: str, *, json_text: bool) -> Any:
    """``depth`` containers around ``leaf`` (JSON text, or msgpack bytes)."""
    if json_text:
        opener, closer = ("[", "]") if shape == "list" else ('{"a":', "}")
        return opener * depth + leaf + closer * depth
    head = b"\x91" if shape == "list" else b"\x81\xa1a"
    return head * depth + leaf.encode("latin-1")


_JSON_LEAVES = {"int": "1", "empty list": "[]", "empty map": "{}"}
_MSGPACK_LEAVES = {"int": "\x01", "empty list": "\x90", "empty map": "\x80"}


def _document(field: str) -> dict[str, Any]:
    return marked_document(field, MARK)


#: Containers around MARK in _document(field) (the value's own depth is added to it).
_ABOVE = {"token": 3, "harness": 2, "node": 3, "mode": 1, "unknown": 1}


def _raw(field: str, encoding: str, inner: Any) -> bytes:
    doc = _document(field)
    if encoding == "json":
        return json.dumps(doc).replace(json.dumps(MARK), inner).encode()
    raw: bytes = msgpack.packb(doc)
    return raw.replace(msgpack.packb(MARK), inner)


# -- the canonical limit ----------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["json", "msgpack"])
@pytest.mark.parametrize("field", ["token", "harness", "node"])
@pytest.mark.parametrize("shape", ["list", "map"])
@pytest.mark.parametrize("leaf", ["int", "empty list", "empty map"])
@pytest.mark.parametrize("offset", [-1, 0, 1])
def test_the_canonical_limit_alike_on_both_loaders(
    encoding: str, field: str, shape: str, leaf: str, offset: int
) -> None:
    # The depth of the leaf inside the value the canonical encoder sees (a node is
    # encoded whole: its entries are one level down).
    depth = MAX_DEPTH + offset - (1 if field == "node" else 0)
    leaves = _JSON_LEAVES if encoding == "json" else _MSGPACK_LEAVES
    inner = _wrapped(shape, depth, leaves[leaf], json_text=encoding == "json")
    streamed, strict = _both(_raw(field, encoding, inner))
    assert streamed == strict
    assert (streamed[0] == "accepted") is (offset <= 0), streamed


def _cprun_with(value_bytes: bytes) -> bytes:
    """A .cprun of one token whose value is ``value_bytes`` and whose record says so."""
    offsets = array("Q", [0, len(value_bytes)])
    records = pack_tokens(
        array("I", [1]), b"\x01", digest_batch(value_bytes, offsets), seqs=array("Q", [0])
    )
    run = Run(
        "r", 0, "00" * 16, tokens=PackedTokens(records, values=EncodedValues(value_bytes, offsets))
    )
    return dump_cprun(run)


def _reference_canonical_check(data: Any, offsets: Any) -> tuple[int, int, str] | None:
    bad = ingest_reference.canonical_check(data, offsets)
    return None if bad is None else (bad, 0, "not canonical")


@pytest.mark.parametrize("shape", ["list", "map"])
@pytest.mark.parametrize("leaf", ["int", "empty list", "empty map"])
@pytest.mark.parametrize("offset", [-1, 0, 1])
def test_the_canonical_limit_of_a_cprun_native_and_reference(
    shape: str, leaf: str, offset: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    value = _wrapped(shape, MAX_DEPTH + offset, _MSGPACK_LEAVES[leaf], json_text=False)
    run = parse_cprun(_cprun_with(value))  # values are checked when used, not mapped
    offsets = array("Q", [0, len(value)])
    native = binding.canonical_check(value, offsets)
    reference = ingest_reference.canonical_check(value, offsets)
    assert (native is None) is (reference is None) is (offset <= 0)
    outcomes = []
    for engine in ("native", "reference"):
        if engine == "reference":
            monkeypatch.setattr(faithful, "canonical_check", _reference_canonical_check)
        outcomes.append(_outcome(lambda: faithful.check_faithful(run.tokens))[0])
    assert outcomes[0] == outcomes[1] == ("accepted" if offset <= 0 else IntegrityError.__name__)
    values = run.tokens.values
    assert isinstance(values, EncodedValues)
    assert _outcome(lambda: values[0])[0] == outcomes[0].replace(
        IntegrityError.__name__, "CanonicalEncodingError"
    )


#: A container whose last item follows: an array or map of one, or of two with a neighbour.
_STEP = st.sampled_from([b"\x91", b"\x81\xa1a", b"\x92\x01", b"\x82\x01\x02\xa1b"])


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(_STEP, min_size=MAX_DEPTH - 3, max_size=MAX_DEPTH + 3),
    leaf=st.sampled_from([b"\x01", b"\x90", b"\x80", b"\xcb" + bytes(7) + b"\x01", b"\xa0"]),
    encoding=st.sampled_from(["json", "msgpack"]),
)
def test_mixed_nesting_around_the_limit(steps: list[bytes], leaf: bytes, encoding: str) -> None:
    """Arrays and maps mixed, with neighbours, around 256: the native check, its twin and
    both loaders of both encodings agree (JSON: the same value written as JSON text)."""
    value = b"".join(steps) + leaf
    offsets = array("Q", [0, len(value)])
    native = binding.canonical_check(value, offsets) is None
    assert native is (ingest_reference.canonical_check(value, offsets) is None)
    assert native is (len(steps) <= MAX_DEPTH)
    if encoding == "msgpack":
        raw = _raw("token", "msgpack", value)
    else:
        text = json.dumps(_as_json(msgpack.unpackb(value, strict_map_key=False)))
        raw = _raw("token", "json", text)
    streamed, strict = _both(raw)
    assert streamed == strict
    assert (streamed[0] == "accepted") is native


def _as_json(value: Any) -> Any:
    """``value`` with int map keys as str (JSON), iteratively (it is ~256 deep)."""
    if isinstance(value, dict):
        return {str(k): _as_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_json(v) for v in value]
    return value


# -- msgpack's stack and JSON's recursion limit -----------------------------------------


@pytest.fixture
def deep_stack() -> Iterator[None]:
    """A recursion limit that lets msgspec read past msgpack's stack (as an application
    raising its own limit does), so the loaders' own limits decide."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(6000)
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


@pytest.mark.usefixtures("deep_stack")
@pytest.mark.parametrize("field", ["token", "harness", "node", "mode", "unknown"])
@pytest.mark.parametrize("offset", [-1, 0, 1])
def test_msgpacks_stack_alike_on_both_loaders(field: str, offset: int) -> None:
    """The document nested to msgpack's 1 024 containers, and one more: the streamed
    loader refuses with the strict loader's refusal (before: one container more)."""
    depth = MSGPACK_STACK + offset - _ABOVE[field]
    streamed, strict = _both(_raw(field, "msgpack", b"\x91" * depth + b"\x01"))
    assert streamed == strict
    if offset > 0:
        assert strict == ("DocumentError", "document nested too deeply")


@pytest.mark.parametrize("field", ["token", "harness", "node", "mode", "unknown"])
@pytest.mark.parametrize("offset", [-1, 0, 1])
def test_msgpacks_stack_at_the_default_recursion_limit(field: str, offset: int) -> None:
    depth = MSGPACK_STACK + offset - _ABOVE[field]
    streamed, strict = _both(_raw(field, "msgpack", b"\x91" * depth + b"\x01"))
    assert streamed == strict
    assert streamed[0] == "DocumentError"


@pytest.mark.parametrize("field", ["token", "harness", "node", "mode", "unknown"])
def test_json_past_the_recursion_limit_is_a_document_error(field: str) -> None:
    """JSON's limit moves with the caller's stack (the interpreter's recursion limit);
    around and past it both loaders refuse as DocumentError, never RecursionError."""
    limit = sys.getrecursionlimit()
    for depth in range(limit - 30, limit + 10, 3):
        streamed, strict = _both(_raw(field, "json", "[" * depth + "]" * depth))
        assert streamed[0] == strict[0] == "DocumentError", (depth, streamed, strict)


@pytest.mark.usefixtures("deep_stack")
@pytest.mark.parametrize("field", ["token", "harness", "mode", "unknown"])
def test_json_around_msgpacks_limit_with_a_raised_recursion_limit(field: str) -> None:
    for depth in (MSGPACK_STACK - 1, MSGPACK_STACK, MSGPACK_STACK + 1, 2_000):
        streamed, strict = _both(_raw(field, "json", "[" * depth + "]" * depth))
        assert streamed == strict, depth


@pytest.mark.parametrize("encoding", ["json", "msgpack"])
@pytest.mark.parametrize("depth", [990, 995, 1_000])
def test_a_replay_mode_nested_deep_is_no_recursion_error(encoding: str, depth: int) -> None:
    """``Enum``'s error message repr()s the value: ``RecursionError`` out of both loaders
    (msgpack: a mode about 1 000 deep; JSON refuses it as nested too deeply first)."""
    inner: Any = "[" * depth + "]" * depth if encoding == "json" else b"\x91" * depth + b"\x01"
    streamed, strict = _both(_raw("mode", encoding, inner))
    assert streamed[0] == strict[0] == "DocumentError"


def test_an_error_showing_a_value_nested_past_repr() -> None:
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    err = DocumentError("unknown replay mode", where="mode", got=deep)
    assert "got <list>" in str(err)


@pytest.mark.parametrize("bad", ["NaN", "1e999", '{"x": 1, "x": 2}', "[" * 5_000 + "]" * 5_000])
def test_a_json_unknown_field_is_read_as_the_strict_loader_reads_it(bad: str) -> None:
    """The JSON streamed loader never decoded an unknown field ("unknown field"), where
    the strict loader refused what it holds (a constant, a repeated key, a nesting past
    its limit) first; both now say the same, at the same place."""
    raw = _raw("unknown", "json", bad)
    with pytest.raises(DocumentError) as streamed:
        load_document(raw)
    with pytest.raises(DocumentError) as strict:
        parse_document(_decode(raw))
    assert streamed.value.what == strict.value.what != "unknown field"
    if "nested" not in strict.value.what:
        assert streamed.value.where == strict.value.where
