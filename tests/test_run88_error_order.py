"""A document with several bad fields is refused for the same one by both loaders.

The order (docs/run-document.md, "Which error"): what the decoder refuses (not JSON or
msgpack, a NaN, a msgpack extension type, nesting too deep) first, the first in the
document; then ``format``; then an unknown or a missing field; then the first field, in
the document's order, whose value is bad. Until run88 the whole-document loader checked
the token list before every other field and the streamed loader after every other field,
and the streamed loader raised a token the decoder refused after the other fields' own
refusals: a bad token and a bad ``run_id`` were ``tokens[0].kind`` for one and
``run_id`` for the other.
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
from cpstore.native.canonical import encode_value
from cpstore.run import cprun, document, stream
from cpstore.run.document import load_document, parse_document

PROPERTY = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

#: A bad value of each field, as the field checks refuse it (not the decoder).
BAD: dict[str, Any] = {
    "format": 2,
    "run_id": 5,
    "step": -1,
    "state_digest": 7,
    "observations": [{"step": 1, "source": 2, "payload_digest": "p", "pinned_at": None}],
    "call_graph": [5],
    "transcript_digest": 3,
    "effects": [{"seq": -1, "target": "t", "payload_digest": "p"}],
    "ledger_sealed": 1,
    "harness_accesses": 5,
    "provenance_tags": [1],
    "mode": "zz",
}
GOOD: dict[str, Any] = {
    "format": 1,
    "run_id": "r",
    "step": 3,
    "state_digest": "s",
    "observations": [{"step": 1, "source": "s", "payload_digest": "p", "pinned_at": 1.5}],
    "tokens": [],
    "call_graph": [{"step": 1, "node": "a"}],
    "transcript_digest": None,
    "effects": [],
    "ledger_sealed": True,
    "harness_accesses": [[1, "x"]],
    "provenance_tags": ["t"],
    "mode": "strict",
}
#: A value the decoder itself refuses: JSON's NaN, msgpack's extension type.
_UNREADABLE = "\x00cpstore:unreadable\x00"


def _token(i: int, bad: str | None) -> dict[str, Any]:
    token: dict[str, Any] = {"seq": i, "kind": "rng", "value": i, "provenance": "recorded"}
    if bad == "field":
        del token["kind"]
    elif bad == "unreadable":
        token["value"] = [1, _UNREADABLE]
    return token


def _raw(doc: dict[str, Any], encoding: str) -> bytes:
    if encoding == "json":
        return json.dumps(doc).replace(json.dumps(_UNREADABLE), "NaN").encode()

    def ext(value: Any) -> Any:
        if value == _UNREADABLE:
            return msgpack.ExtType(5, b"")
        if isinstance(value, list):
            return [ext(v) for v in value]
        if isinstance(value, dict):
            return {k: ext(v) for k, v in value.items()}
        return value

    return msgpack.packb(ext(doc))  # type: ignore[no-any-return]


def _refusal(raw: bytes, *, streamed: bool) -> tuple[Any, ...]:
    try:
        if streamed:
            load_document(raw)
        else:
            parse_document(document._decode(raw))
    except CpstoreError as exc:
        return type(exc), exc.what, exc.where, exc.expected, exc.got
    raise AssertionError("a bad document was loaded")


def _field(where: str) -> str:
    return re.split(r"[.[]", where, maxsplit=1)[0]


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of 3 tokens, so a bad token may lie in any chunk."""
    monkeypatch.setattr(stream, "CHUNK", 3)


@st.composite
def documents(draw: st.DrawFn) -> tuple[dict[str, Any], list[str], list[str]]:
    """A document with several bad fields, its keys in any order: (doc, the fields bad in
    their checks, the fields holding a value the decoder refuses), both in its order."""
    keys = draw(st.permutations(list(GOOD)))
    checked = draw(st.sets(st.sampled_from([*BAD, "tokens"]), max_size=4))
    unreadable = draw(
        st.sets(st.sampled_from(["run_id", "call_graph", "harness_accesses", "tokens"]), max_size=2)
    )
    count = draw(st.integers(min_value=1, max_value=10))
    doc: dict[str, Any] = {}
    for key in keys:
        if key == "tokens":
            at_field = draw(st.integers(0, count - 1))
            at_unreadable = draw(st.integers(0, count - 1))
            doc[key] = [
                _token(
                    i,
                    "unreadable"
                    if "tokens" in unreadable and i == at_unreadable
                    else "field"
                    if "tokens" in checked and i == at_field
                    else None,
                )
                for i in range(count)
            ]
        elif key in unreadable:
            doc[key] = (
                _UNREADABLE
                if key == "run_id"
                else [{"step": 0, "node": _UNREADABLE}]
                if key == "call_graph"
                else [_UNREADABLE]
            )
        else:
            doc[key] = BAD[key] if key in checked else GOOD[key]
    order = list(doc)
    return (
        doc,
        sorted(checked - unreadable, key=order.index),
        sorted(unreadable, key=order.index),
    )


@PROPERTY
@given(documents(), st.sampled_from(["json", "msgpack"]))
def test_both_loaders_name_the_first_bad_field_in_the_document(
    small_chunks: None,
    drawn: tuple[dict[str, Any], list[str], list[str]],
    encoding: str,
) -> None:
    """Same class, message, place, expected and got; the place the documented order's."""
    doc, checked, unreadable = drawn
    if not checked and not unreadable:
        load_document(_raw(doc, encoding))
        return
    raw = _raw(doc, encoding)
    streamed = _refusal(raw, streamed=True)
    assert streamed == _refusal(raw, streamed=False)
    where = streamed[2]
    if unreadable:
        assert _field(where) == unreadable[0]
    elif "format" in checked:
        assert where == "format"
    else:
        assert _field(where) == checked[0]


@pytest.mark.parametrize("encoding", ["json", "msgpack"])
@pytest.mark.parametrize("tokens_first", [True, False])
def test_a_bad_token_and_a_bad_run_id_name_the_first_in_the_document(
    encoding: str, tokens_first: bool
) -> None:
    """The reported case: the whole-document loader said ``tokens[0].kind``, the streamed
    one ``run_id``, whichever came first."""
    doc = dict(GOOD, run_id=5, tokens=[_token(0, "field")])
    if tokens_first:
        doc = {"tokens": doc.pop("tokens"), **doc}
    raw = _raw(doc, encoding)
    for streamed in (True, False):
        where = _refusal(raw, streamed=streamed)[2]
        assert where == ("tokens[0].kind" if tokens_first else "run_id")


@pytest.mark.parametrize("encoding", ["json", "msgpack"])
def test_a_token_the_decoder_refuses_comes_before_a_later_field_it_refuses(
    encoding: str,
) -> None:
    """runleft86's leftover: a NaN in ``tokens[0].value`` then one in a later unknown field
    was ``zz`` streamed and ``tokens[0].value`` whole."""
    doc = dict(GOOD, tokens=[_token(0, "unreadable")], zz=_UNREADABLE)
    raw = _raw(doc, encoding)
    assert _field(_refusal(raw, streamed=True)[2]) == "tokens"
    assert _refusal(raw, streamed=True) == _refusal(raw, streamed=False)


def test_a_bad_token_after_a_bad_one_in_a_later_chunk_names_the_decoders_refusal(
    small_chunks: None,
) -> None:
    """A token with a missing field in the first chunk and a NaN in a later one: the NaN
    (the decoder meets it reading the document), by both loaders."""
    doc = dict(GOOD, tokens=[_token(0, "field"), *(_token(i, None) for i in range(1, 7))])
    doc["tokens"][5] = _token(5, "unreadable")
    for encoding in ("json", "msgpack"):
        raw = _raw(doc, encoding)
        assert _refusal(raw, streamed=True) == _refusal(raw, streamed=False)
        assert _refusal(raw, streamed=True)[2].startswith("tokens[5]")


# -- packed run files ---------------------------------------------------------------------

#: A bad metadata value of each field, as a .cprun holds it, and as a document does.
PACKED_BAD: dict[str, tuple[Any, Any]] = {
    "run_id": (5, 5),
    "step": (-1, -1),
    "state_digest": (7, 7),
    "observations": ([[True, "s", "p", None]], [dict(GOOD["observations"][0], step=True)]),
    "call_graph": ([5], [5]),
    "transcript_digest": (3, 3),
    "effects": ([[-1, "t", "p"]], [{"seq": -1, "target": "t", "payload_digest": "p"}]),
    "ledger_sealed": (1, 1),
    "harness_accesses": (5, 5),
    "provenance_tags": ([1], [1]),
    "mode": ("zz", "zz"),
}


def _packed(bad: dict[str, Any]) -> bytes:
    """A .cprun of a one-token run whose metadata holds ``bad``'s values (digests right)."""
    run = load_document(_raw(dict(GOOD, tokens=[_token(0, None)]), "msgpack"))
    meta = {**cprun._decode_meta(cprun._meta(run)), **bad}
    records, offsets, blob = cprun._token_sections(run)
    sections = [(1, cprun._meta_bytes(meta)), (2, records), (3, offsets), (4, blob)]
    return b"".join(cprun._chunks(sections))


@pytest.mark.parametrize("field", list(PACKED_BAD))
def test_a_packed_field_is_refused_as_the_documents(field: str) -> None:
    """Same class, message, place (after the file's name) and got as a msgpack document's
    (``ledger_sealed`` said "ledger_sealed must be a bool", an observation's bool step
    "must be an integer")."""
    packed, plain = PACKED_BAD[field]
    with pytest.raises(CpstoreError) as from_file:
        load_document(_packed({field: packed}))
    got = _refusal(_raw(dict(GOOD, **{field: plain}), "msgpack"), streamed=True)
    assert from_file.value.where == f"document: {got[2]}"
    assert (type(from_file.value), from_file.value.what, from_file.value.got) == (
        got[0],
        got[1],
        got[4],
    )


@given(st.sets(st.sampled_from(list(PACKED_BAD)), min_size=2, max_size=4))
@settings(max_examples=80, deadline=None)
def test_several_bad_packed_fields_name_the_first_in_the_metadata(fields: set[str]) -> None:
    """The metadata's own order (its canonical key order), as a document's is its order."""
    data = _packed({f: PACKED_BAD[f][0] for f in fields})
    order = sorted(PACKED_BAD, key=encode_value)  # a canonical map's key order
    with pytest.raises(CpstoreError) as err:
        load_document(data)
    first = min(fields, key=order.index)
    assert _field((err.value.where or "").removeprefix("document: ")) == first


@pytest.mark.parametrize("change", ["unknown", "missing"])
def test_an_unknown_or_missing_packed_field_is_named_as_the_documents(change: str) -> None:
    """``<file>: surprise`` as a document's ``surprise`` (it was ``<file>:
    metadata.surprise``, where a known field's value was ``<file>: run_id``)."""
    run = load_document(_raw(dict(GOOD, tokens=[_token(0, None)]), "msgpack"))
    meta = cprun._decode_meta(cprun._meta(run))
    doc = dict(GOOD, tokens=[_token(0, None)])
    if change == "unknown":
        meta["surprise"] = doc["surprise"] = 1
    else:
        del meta["state_digest"], doc["state_digest"]
    records, offsets, blob = cprun._token_sections(run)
    sections = [(1, cprun._meta_bytes(meta)), (2, records), (3, offsets), (4, blob)]
    with pytest.raises(CpstoreError) as err:
        load_document(b"".join(cprun._chunks(sections)))
    got = _refusal(_raw(doc, "msgpack"), streamed=True)
    assert err.value.where == f"document: {got[2]}"
    assert err.value.what == got[1]
