"""review76: a JSON token array is read the strict parser's way at every chunk boundary.

The streaming path decodes a token array a chunk of ``CHUNK`` members at a time,
each chunk as the JSON text ``"[" + members + "]"``. A chunk that held no member
(a trailing comma, with or without blanks, right after a multiple of ``CHUNK``
tokens: ``[t0, ..., t32767, ]``) was the text ``[]``, which decodes to nothing:
the document, which no JSON reader accepts, loaded as a run. The splitter counts
one member there; a chunk whose decode does not give as many members as it
counted now sends the document to the strict parser, which refuses it.
``test_audit31_json_paths`` swaps structural bytes with the default chunk size
only, so its property never crossed a boundary; the one here uses chunks of 3.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from run_docs import doc_body, rng_token
from test_audit31_json_paths import _outcome, _strict

from cpstore.errors import DocumentError
from cpstore.run import stream
from cpstore.run.document import load_document


def _doc_text(tokens: int, tail: str = "") -> bytes:
    body = doc_body()
    toks = ",".join(json.dumps(rng_token(i, i)) for i in range(tokens))
    return (json.dumps(body)[:-1] + ', "tokens": [' + toks + tail + "]}").encode()


@pytest.mark.parametrize("tail", [",", ", ", ",\n\t "])
def test_a_trailing_comma_after_a_whole_chunk_is_refused(tail: str) -> None:
    """Before: 32 768 tokens and a trailing comma loaded as a run of 32 768 tokens."""
    raw = _doc_text(stream.CHUNK, tail)
    with pytest.raises(ValueError):
        json.loads(raw)
    with pytest.raises(DocumentError, match="not valid JSON"):
        load_document(raw)


@pytest.mark.parametrize("tokens", [3, 6, 9])
def test_with_small_chunks_every_boundary_refuses_it(
    monkeypatch: pytest.MonkeyPatch, tokens: int
) -> None:
    monkeypatch.setattr(stream, "CHUNK", 3)
    with pytest.raises(DocumentError, match="not valid JSON"):
        load_document(_doc_text(tokens, ","))
    assert len(load_document(_doc_text(tokens)).tokens) == tokens


_STRUCTURAL = b"[]{},: "


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data(), tokens=st.sampled_from([0, 1, 3, 4, 6]))
def test_structural_edits_read_the_same_on_both_paths_across_chunks(
    monkeypatch: pytest.MonkeyPatch, data: st.DataObject, tokens: int
) -> None:
    """Any structural byte replaced, deleted or inserted: both paths agree, chunks of 3."""
    monkeypatch.setattr(stream, "CHUNK", 3)
    raw = bytearray(_doc_text(tokens))
    start = raw.index(b'"tokens"')
    spots = [i for i in range(start, len(raw)) if raw[i] in _STRUCTURAL]
    edits: list[tuple[int, str, Any]] = data.draw(
        st.lists(
            st.tuples(
                st.sampled_from(spots),
                st.sampled_from(["swap", "drop", "insert"]),
                st.sampled_from(list(_STRUCTURAL)),
            ),
            min_size=1,
            max_size=2,
            unique_by=lambda edit: edit[0],
        )
    )
    for at, how, byte in sorted(edits, reverse=True):
        if how == "swap":
            raw[at] = byte
        elif how == "drop":
            del raw[at]
        else:
            raw.insert(at, byte)
    assert _outcome(load_document, bytes(raw)) == _outcome(_strict, bytes(raw))
