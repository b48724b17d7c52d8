"""The writers name error places in the documented style (docs/run-document.md, "Errors").

Until runleft86 the JSON and msgpack writers' key check (``cpstore/run/keys.py``) named a
map entry ``{'node'}`` (the canonical encoder's own spelling), where the loaders name it
``.node``: a JSON write of a node keyed by an int said ``call_graph[0]{'node'}``. The
``.cprun`` writer passed the encoder's path on as it was (``${'call_graph'}[0]{'x'}``)
and named a token value with no canonical form ``tokens.values``, whichever it was.
"""

from __future__ import annotations

import io
import json
from typing import Any

import msgpack
import pytest
from run_docs import doc_body, rng_token

from cpstore.errors import CpstoreError
from cpstore.run.document import dump_document, load_document, parse_document
from cpstore.run.model import PackedTokens, Run, Token
from cpstore.run.writer import write_document


def _refusal(write: Any) -> tuple[str, str | None]:
    with pytest.raises(CpstoreError) as err:
        write()
    return type(err.value).__name__, err.value.where


def _both_writers(run: Run, encoding: str) -> set[tuple[str, str | None]]:
    return {
        _refusal(lambda: dump_document(run, encoding=encoding)),
        _refusal(lambda: write_document(run, io.BytesIO(), encoding=encoding)),
    }


def test_a_node_keyed_by_an_int_is_named_as_the_loaders_name_it() -> None:
    run = parse_document(doc_body(tokens=[rng_token()], call_graph=[{"step": 0, "node": {1: "a"}}]))
    assert _both_writers(run, "json") == {("InvalidInputError", "call_graph[0].node")}


@pytest.mark.parametrize(
    ("value", "place"),
    [
        ({"a b": {1: "x"}}, 'tokens[1].value["a b"]'),
        ({"k": [{"": {2: 0}}]}, 'tokens[1].value.k[0][""]'),
        ([{"ok": {None: 1}}], "tokens[1].value[0].ok"),
        ({"x.y": [b"\x00"]}, 'tokens[1].value["x.y"][0]'),
    ],
)
def test_json_refusals_inside_a_token_value(value: Any, place: str) -> None:
    run = load_document(
        msgpack.packb(doc_body(tokens=[rng_token(0, 1), rng_token(1, value)]), use_bin_type=True)
    )
    assert _both_writers(run, "json") == {("InvalidInputError", place)}


def test_msgpack_refuses_a_big_int_at_its_place() -> None:
    value = {"a": [1, {"b-c": 2**70}]}
    text = json.dumps(doc_body(tokens=[rng_token(0, value)]))
    run = load_document(text.encode())
    assert _both_writers(run, "msgpack") == {("InvalidInputError", 'tokens[0].value.a[1]["b-c"]')}


def test_a_harness_access_is_named_inside() -> None:
    run = parse_document(doc_body(tokens=[rng_token()], harness_accesses=[1, {"r": {1.5: 0}}]))
    assert _both_writers(run, "json") == {("InvalidInputError", "harness_accesses[1].r")}


def test_the_writer_names_what_the_loader_names() -> None:
    """A NaN where JSON holds none: the JSON loader refuses the document at a place, the
    JSON writer the run (read from msgpack) at the same place."""
    value = {"a": [0, {"b c": float("nan")}]}
    packed = msgpack.packb(doc_body(tokens=[rng_token(0, value)]))
    run = load_document(packed)
    text = json.dumps(doc_body(tokens=[rng_token(0, value)])).encode()
    loaded = _refusal(lambda: load_document(text))
    written = _both_writers(run, "json")
    assert loaded[1] == 'tokens[0].value.a[1]["b c"]'
    assert written == {("InvalidInputError", loaded[1])}


def _plain_run(values: list[Any]) -> Run:
    packed = PackedTokens.from_tokens(
        [Token(i, "rng", 0 if isinstance(v, set) else v) for i, v in enumerate(values)]
    )
    return Run("r", 0, "s", tokens=PackedTokens(packed.records, values=values))


def test_a_memoryview_key_is_named_as_the_bytes_it_is() -> None:
    # Values handed over as plain objects are checked by the writers themselves.
    run = _plain_run([0, {memoryview(b"k"): [2**70]}])
    assert _both_writers(run, "msgpack") == {("InvalidInputError", "tokens[1].value{b'k'}[0]")}


def test_cprun_names_the_token_whose_value_has_no_canonical_form() -> None:
    run = _plain_run([0, 1, {1, 2}])
    assert _both_writers(run, "cprun") == {("DocumentError", "tokens[2].value")}


def test_cprun_names_a_node_changed_after_the_run_was_made() -> None:
    run = parse_document(
        doc_body(tokens=[rng_token()], call_graph=[{"step": 0, "node": "n", "x": {"a b": [1]}}])
    )
    run.call_graph[0]["x"]["a b"][0] = {1, 2}  # the caller still holds the dict
    assert _both_writers(run, "cprun") == {("CanonicalEncodingError", 'call_graph[0].x["a b"][0]')}


def test_canonical_place_reads_keys_whose_repr_holds_brackets() -> None:
    from cpstore.run.locate import canonical_place  # noqa: PLC0415 (new in runleft86)

    value = {"a}{'b": [{"}": 1}], "a": 2}
    assert canonical_place(value, "${\"a}{'b\"}[0]{'}'}") == '["a}{\'b"][0]["}"]'
    assert canonical_place(value, "${'zz'}") == ""
    assert canonical_place(value, "$[0]") == ""
    deep: Any = 1
    for _ in range(20):
        deep = [deep]
    assert canonical_place(deep, "$" + "[0]" * 20) == "[0]" * 8
