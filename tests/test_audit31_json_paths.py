"""audit31: the streamed JSON path reads exactly what the strict parser reads.

The strict parser (``parse_document`` over ``json.loads``) is the spec. The
streaming path (``load_document``: the native member splitter, msgspec per
chunk) took two kinds of invalid JSON the spec refuses — a token array closed
by ``}`` and a top-level ``]`` between fields — so a document no JSON reader
accepts was validated (and could ACCEPT). A hypothesis property swaps any
structural byte of a valid document for another and requires both paths to
agree: the same run, or both refused.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_decision_support import clean_doc

from cpstore.decision.table import Verdict
from cpstore.decision.validate import validate
from cpstore.errors import CpstoreError, DocumentError
from cpstore.native.canonical import encode_value
from cpstore.run import document
from cpstore.run.document import load_document, parse_document
from cpstore.run.model import Run

PROPERTY = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def _strict(raw: bytes) -> Run:
    return parse_document(document._strict_json(raw))


def _outcome(load: Any, raw: bytes) -> Any:
    try:
        run = load(raw)
    except CpstoreError as exc:  # DocumentError, FormatVersionError: refused alike
        return ("refused", type(exc).__name__)
    values = run.tokens.values or []
    return (
        bytes(run.tokens.view()),
        [encode_value(v) for v in values],
        dict(run.tokens.kind_names),
        run.run_id,
        run.step,
        run.state_digest,
        run.observations,
        [encode_value(dict(n)) for n in run.call_graph],
        run.transcript_digest,
        run.effects,
        run.ledger_sealed,
        [encode_value(a) for a in run.harness_accesses],
        run.provenance_tags,
        run.mode,
    )


def _replay_bytes() -> bytes:
    return json.dumps({**clean_doc(), "mode": "strict"}, separators=(",", ":")).encode()


@pytest.mark.parametrize(
    ("old", "new"),
    [
        # The token array closed by '}' instead of ']'.
        (b'"recorded"}],"call_graph"', b'"recorded"}},"call_graph"'),
        # A ']' where a ',' separates two top-level fields.
        (b'"run_id":"run-1",', b'"run_id":"run-1"]'),
        # The same before and after the token array.
        (b'],"tokens"', b']]"tokens"'),
    ],
)
def test_invalid_json_the_strict_parser_refuses_is_refused(old: bytes, new: bytes) -> None:
    raw = _replay_bytes()
    assert raw.count(old) == 1
    bad = raw.replace(old, new)
    with pytest.raises(DocumentError):
        _strict(bad)
    with pytest.raises(DocumentError):
        load_document(bad)  # was a Run (and, against its recording, an ACCEPT)


def test_the_unmodified_document_still_streams_and_accepts() -> None:
    raw = _replay_bytes()
    assert _outcome(load_document, raw) == _outcome(_strict, raw)
    assert validate(clean_doc(), load_document(raw)).verdict is Verdict.ACCEPT


_STRUCTURAL = b"[]{},:"


@PROPERTY
@given(data=st.data(), tokens=st.integers(min_value=0, max_value=8))
def test_any_structural_byte_swap_reads_the_same_on_both_paths(
    data: st.DataObject, tokens: int
) -> None:
    doc = clean_doc(tokens)
    doc["mode"] = "strict"
    doc["harness_accesses"] = [{"a": [1, {"b": 2}]}]
    raw = json.dumps(doc, separators=(",", ":")).encode()
    spots = [i for i, b in enumerate(raw) if b in _STRUCTURAL]
    swaps = data.draw(
        st.lists(
            st.tuples(st.sampled_from(spots), st.sampled_from(list(_STRUCTURAL))),
            min_size=1,
            max_size=2,
        )
    )
    bad = bytearray(raw)
    for at, byte in swaps:
        bad[at] = byte
    assert _outcome(load_document, bytes(bad)) == _outcome(_strict, bytes(bad))


# -- a number literal past the float range ----------------------------------------


def _with_literal(doc: dict[str, Any], marker: str, literal: str) -> bytes:
    text = json.dumps(doc, separators=(",", ":"))
    assert text.count(marker) == 1
    return text.replace(marker, literal).encode()


@pytest.mark.parametrize("literal", ["1e400", "-1e400", "1" * 400 + ".0", "2e999"])
@pytest.mark.parametrize("load", [load_document, _strict], ids=["streamed", "strict"])
def test_a_number_literal_that_overflows_to_infinity_is_refused(literal: str, load: Any) -> None:
    # JSON has no infinity: 'Infinity' is refused, and so must be a literal the
    # decoder can only read as one — else 1e400 and 2e400 were the same value.
    doc = clean_doc()
    doc["tokens"][0]["value"] = "MARK"
    with pytest.raises(DocumentError):
        load(_with_literal(doc, '"MARK"', literal))


def test_two_different_overflowing_literals_never_accept() -> None:
    r, p = clean_doc(), {**clean_doc(), "mode": "strict"}
    r["tokens"][0]["value"] = "MARK"
    p["tokens"][0]["value"] = "MARK"
    r["call_graph"][0]["weight"] = "WMARK"
    p["call_graph"][0]["weight"] = "WMARK"
    r_raw = _with_literal(r, '"MARK"', "1e400").replace(b'"WMARK"', b"1e400")
    p_raw = _with_literal(p, '"MARK"', "2e400").replace(b'"WMARK"', b"9e999")
    try:
        verdict = validate(r_raw, p_raw).verdict
    except DocumentError:
        return  # refused: not a verdict, as the spec wants
    pytest.fail(f"two different numbers read as one value: {verdict}")


NUMBER = st.builds(
    lambda sign, whole, frac, exp: f"{sign}{whole}{frac}{exp}",
    st.sampled_from(["", "-"]),
    st.sampled_from(["0"]) | st.from_regex(r"[1-9][0-9]{0,25}", fullmatch=True),
    st.sampled_from([""]) | st.from_regex(r"\.[0-9]{1,25}", fullmatch=True),
    st.sampled_from([""])
    | st.builds(
        lambda e, n: f"{e}{n}", st.sampled_from(["e", "E", "e+", "e-"]), st.integers(0, 400)
    ),
)


@PROPERTY
@given(literals=st.lists(NUMBER, min_size=1, max_size=4))
def test_number_literals_read_the_same_on_both_paths(literals: list[str]) -> None:
    doc = {**clean_doc(len(literals)), "mode": "strict"}
    for i in range(len(literals)):
        doc["tokens"][i]["value"] = f"MARK{i}"
    raw = json.dumps(doc, separators=(",", ":"))
    for i, literal in enumerate(literals):
        raw = raw.replace(f'"MARK{i}"', literal)
    assert _outcome(load_document, raw.encode()) == _outcome(_strict, raw.encode())
