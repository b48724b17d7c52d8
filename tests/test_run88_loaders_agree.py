"""The streamed and the whole-document loaders give one outcome for any edit of a document.

review76 edited documents at random and required both loaders to load the same run or
both to refuse; run88 requires the same refusal: class, message, place, expected and
got. Before, text no JSON reader takes inside a token or a field ("not valid JSON") was
named by the streamed loader at that token or field with its offset in that part, and by
the whole-document loader at ``document`` with its offset in the document (over 1 100
of 4 000 random edits); a msgpack document with two refusals was refused for the later
one by the streamed loader when the first lay in the token list (48 of 4 000).
"""

from __future__ import annotations

import json
import re
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cpstore.errors import CpstoreError
from cpstore.run import document, stream
from cpstore.run.document import load_document, parse_document

BASE: dict[str, Any] = {
    "mode": "strict",
    "tokens": [
        {"seq": i, "kind": "rng", "value": [i, {"a": 1.5}], "provenance": "recorded"}
        for i in range(5)
    ],
    "format": 1,
    "run_id": "r",
    "step": 3,
    "state_digest": "s",
    "observations": [{"step": 1, "source": "tool", "payload_digest": "p", "pinned_at": 1.5}],
    "call_graph": [{"step": 1, "node": "a"}],
    "transcript_digest": None,
    "effects": [{"seq": 0, "target": "t", "payload_digest": "p"}],
    "harness_accesses": [[1, "x"]],
    "provenance_tags": ["t"],
    "ledger_sealed": True,
}
_JSON_BYTES = b'{}[],:"0123456789-.eNaItrufl sx\\'


def _outcome(raw: bytes, *, streamed: bool) -> tuple[Any, ...]:
    try:
        run = load_document(raw) if streamed else parse_document(document._decode(raw))
    except CpstoreError as exc:
        return type(exc), exc.what, exc.where, exc.expected, exc.got
    return "loaded", bytes(run.tokens.view()), run.run_id, run.step, run.observations


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stream, "CHUNK", 2)


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    st.sampled_from(["json", "msgpack"]),
    st.lists(
        st.tuples(st.sampled_from(["set", "delete", "insert"]), st.floats(0, 1), st.integers()),
        min_size=1,
        max_size=4,
    ),
)
def test_an_edited_document_has_one_outcome(
    small_chunks: None, encoding: str, edits: list[tuple[str, float, int]]
) -> None:
    """Random byte edits (set, delete, insert): both loaders load the same run or give the
    same refusal, chunks of 2 tokens."""
    raw = bytearray(json.dumps(BASE).encode() if encoding == "json" else msgpack.packb(BASE))
    for op, where, pick in edits:
        at = min(int(where * len(raw)), len(raw) - 1)
        byte = _JSON_BYTES[pick % len(_JSON_BYTES)] if encoding == "json" else pick % 256
        if op == "set":
            raw[at] = byte
        elif op == "delete":
            del raw[at]
        else:
            raw.insert(at, byte)
    data = bytes(raw)
    assert _outcome(data, streamed=True) == _outcome(data, streamed=False)


@pytest.mark.parametrize(
    ("edit", "near"),
    [
        (('"seq": 2,', '"seq": ,'), "tokens"),  # a value missing in a token
        (('"value": [1,', '"value": [1 '), "tokens"),  # a comma missing in a token's value
        (('"source": "tool"', '"source" "tool"'), "observations"),  # a colon missing
        (('{"step": 1, "node"', '{"step": 1, }"node"'), "call_graph"),
    ],
)
def test_text_no_json_reader_takes_is_named_alike(
    small_chunks: None, edit: tuple[str, str], near: str
) -> None:
    """ "not valid JSON", at ``document``, with the decoder's offset in the document."""
    text = json.dumps(BASE)
    assert text.count(edit[0]) == 1
    data = text.replace(*edit).encode()
    streamed = _outcome(data, streamed=True)
    assert streamed == _outcome(data, streamed=False)
    assert streamed[1:3] == ("not valid JSON", "document")
    found = re.search(r"\(char (\d+)\)", streamed[4])
    assert found is not None
    at = data.index(edit[1].encode())
    assert at <= int(found.group(1)) <= at + len(edit[1]) + 1, near
