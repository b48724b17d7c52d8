"""audit31: a msgpack run document with a repeated key is refused, as a JSON one is.

JSON documents refused duplicate keys (which reading wins is exactly what two
readers disagree on); msgpack documents kept the last, on the streamed and the
strict path alike. So ``{"mode": "best_effort", ..., "mode": "strict"}`` was a
STRICT replay for cpstore and a best-effort one for a first-wins reader, and
a repeated key inside an observation or a token meant whatever came last.
"""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_audit31_json_paths import _outcome
from test_decision_support import clean_doc

from cpstore.decision.table import Verdict
from cpstore.decision.validate import validate
from cpstore.errors import DocumentError
from cpstore.run import document
from cpstore.run.document import load_document, parse_document


def _pack_pairs(pairs: list[tuple[str, Any]]) -> bytes:
    """A msgpack map written pair by pair (so a key may repeat)."""
    out = bytearray()
    n = len(pairs)
    out += bytes([0x80 | n]) if n < 16 else b"\xde" + n.to_bytes(2, "big")
    for key, value in pairs:
        out += key if isinstance(key, bytes) else msgpack.packb(key)
        out += value if isinstance(value, bytes) else msgpack.packb(value, use_bin_type=True)
    return bytes(out)


def _strict(raw: bytes) -> Any:
    return parse_document(document._strict_msgpack(raw))


def _replay_pairs() -> list[tuple[str, Any]]:
    return list({**clean_doc(), "mode": "strict"}.items())


@pytest.mark.parametrize("load", [load_document, _strict], ids=["streamed", "strict"])
def test_a_repeated_top_level_key_is_refused(load: Any) -> None:
    pairs = [("mode", "best_effort"), *_replay_pairs()]  # ... and "mode": "strict" last
    raw = _pack_pairs(pairs)
    with pytest.raises(DocumentError) as err:
        load(raw)
    assert "duplicate" in err.value.what


def test_a_repeated_mode_never_makes_a_strict_accept() -> None:
    raw = _pack_pairs([("mode", "best_effort"), *_replay_pairs()])
    try:
        verdict = validate(clean_doc(), raw).verdict
    except DocumentError:
        return
    pytest.fail(f"a document naming two modes was judged: {verdict}")


def test_the_same_document_without_the_repeat_still_accepts() -> None:
    raw = _pack_pairs(_replay_pairs())
    assert validate(clean_doc(), raw).verdict is Verdict.ACCEPT


def _with_item(field: str, index: int, pairs: list[tuple[str, Any]]) -> bytes:
    doc = {**clean_doc(), "mode": "strict"}
    items = [msgpack.packb(x, use_bin_type=True) for x in doc[field]]
    items[index] = _pack_pairs(pairs)
    body = bytes([0x90 | len(items)]) + b"".join(items)
    return _pack_pairs([(k, body if k == field else v) for k, v in doc.items()])


@pytest.mark.parametrize("load", [load_document, _strict], ids=["streamed", "strict"])
@pytest.mark.parametrize(
    ("field", "pairs"),
    [
        (
            "observations",
            [
                ("step", 12),
                ("source", "read_config"),
                ("payload_digest", "cfg-v2"),
                ("pinned_at", 101.5),
                ("payload_digest", "cfg-v1"),
            ],
        ),
        (
            "tokens",
            [
                ("seq", 0),
                ("kind", "rng"),
                ("value", 1),
                ("provenance", "recorded"),
                ("value", 0),
            ],
        ),
        (
            "tokens",  # four entries, one repeated: a field missing
            [("seq", 0), ("kind", "rng"), ("value", 0), ("value", 0)],
        ),
        ("call_graph", [("step", 1), ("node", "other"), ("node", "plan")]),
        ("effects", [("seq", 0), ("target", "db"), ("payload_digest", "x"), ("target", "db")]),
    ],
)
def test_a_repeated_key_inside_an_item_is_refused(
    load: Any, field: str, pairs: list[tuple[str, Any]]
) -> None:
    with pytest.raises(DocumentError):
        load(_with_item(field, 0, pairs))


@pytest.mark.parametrize("load", [load_document, _strict], ids=["streamed", "strict"])
def test_a_repeated_key_inside_a_token_value_is_refused(load: Any) -> None:
    value = _pack_pairs([("a", 1), ("a", 2)])
    token = _pack_pairs([("seq", 0), ("kind", "rng"), ("value", value), ("provenance", "recorded")])
    doc = {**clean_doc(1), "mode": "strict"}
    body = b"\x91" + token
    raw = _pack_pairs([(k, body if k == "tokens" else v) for k, v in doc.items()])
    with pytest.raises(DocumentError):
        load(raw)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), tokens=st.integers(min_value=0, max_value=8))
def test_any_byte_change_reads_the_same_streamed_and_strict(
    data: st.DataObject, tokens: int
) -> None:
    # Both refuse (the error class may differ: the streamed path checks `format`
    # before it meets a damaged token), or both give the same run.
    doc = {**clean_doc(tokens), "mode": "strict", "harness_accesses": [{"a": [1, {"b": 2}]}]}
    raw = bytearray(msgpack.packb(doc, use_bin_type=True))
    for at, byte in data.draw(
        st.lists(
            st.tuples(st.integers(0, len(raw) - 1), st.integers(0, 255)), min_size=1, max_size=3
        )
    ):
        raw[at] = byte
    fast, slow = _outcome(load_document, bytes(raw)), _outcome(_strict, bytes(raw))
    if fast[0] == "refused" and slow[0] == "refused":
        return
    assert fast == slow
