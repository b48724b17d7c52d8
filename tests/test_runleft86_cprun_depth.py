"""A call-graph node or harness access at the canonical limit is written to ``.cprun`` too.

A run document holds each node and each harness access at the root of its own canonical
encoding (a leaf at depth 256 at most: docs/run-document.md, "Nesting limits"). The
``.cprun`` writer encoded the metadata map whole, where they sit two levels down (map,
list): a node or access at the limit loaded from JSON or msgpack and could not be written
(``CanonicalEncodingError``, left83's leftover). The metadata is now encoded (and checked
on load) with each node and access from its own root, the same bytes wherever
``encode_value`` gave any; one level deeper is refused by the ``.cprun`` loader as by the
document loaders.
"""

from __future__ import annotations

import dataclasses
import json
from array import array
from typing import Any

import msgpack
import pytest
from run_docs import doc_body, rng_token

from cpstore import validate
from cpstore.decision.table import Verdict
from cpstore.errors import CpstoreError, DocumentError
from cpstore.native.canonical import MAX_DEPTH, encode_value
from cpstore.run import cprun
from cpstore.run.document import dump_document, load_document, parse_document
from cpstore.run.model import PackedTokens, Run


def _deep(shape: str, depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value] if shape == "list" else {"a": value}
    return value


def _doc(field: str, shape: str, depth: int) -> dict[str, Any]:
    if field == "node":  # a node is encoded whole: its entries are one level down
        return doc_body(
            tokens=[rng_token()],
            call_graph=[{"step": 0, "node": "n"}, {"step": 1, "node": _deep(shape, depth - 1)}],
        )
    return doc_body(tokens=[rng_token()], harness_accesses=["x", _deep(shape, depth)])


def _same(a: Run, b: Run) -> bool:
    """Equal runs (PackedTokens compare by identity): every field, records and values."""
    empty = PackedTokens(b"")
    return (
        dataclasses.replace(a, tokens=empty) == dataclasses.replace(b, tokens=empty)
        and bytes(a.tokens.view()) == bytes(b.tokens.view())
        and a.tokens.values == b.tokens.values
    )


def _raw(doc: dict[str, Any], encoding: str) -> bytes:
    return json.dumps(doc).encode() if encoding == "json" else msgpack.packb(doc)


@pytest.mark.parametrize("encoding", ["json", "msgpack"])
@pytest.mark.parametrize("field", ["node", "harness"])
@pytest.mark.parametrize("shape", ["list", "map"])
@pytest.mark.parametrize("depth", [MAX_DEPTH - 2, MAX_DEPTH - 1, MAX_DEPTH])
def test_what_a_document_holds_a_cprun_holds(
    encoding: str, field: str, shape: str, depth: int
) -> None:
    run = load_document(_raw(_doc(field, shape, depth), encoding))
    packed = dump_document(run, encoding="cprun")  # CanonicalEncodingError before runleft86
    back = load_document(packed)
    assert _same(back, run)
    for other in ("json", "msgpack"):  # and back to a document, as the loaders read it
        assert _same(load_document(dump_document(back, encoding=other)), run)
    assert dump_document(load_document(packed), encoding="cprun") == packed


@pytest.mark.parametrize("field", ["node", "harness"])
@pytest.mark.parametrize("shape", ["list", "map"])
def test_one_level_deeper_is_refused_by_every_loader(field: str, shape: str) -> None:
    for encoding in ("json", "msgpack"):
        with pytest.raises(DocumentError) as err:
            load_document(_raw(_doc(field, shape, MAX_DEPTH + 1), encoding))
        assert err.value.where == ("call_graph[1]" if field == "node" else "harness_accesses[1]")
    # The same run as a .cprun: the metadata written at the limit, then one level added.
    run = load_document(msgpack.packb(_doc(field, shape, MAX_DEPTH)))
    meta = cprun._meta(run)
    step = b"\x91" if shape == "list" else b"\x81\xa1a"
    at_limit = step * (MAX_DEPTH - (1 if field == "node" else 0)) + b"\x01"
    assert meta.count(at_limit) == 1
    deeper = meta.replace(at_limit, step + at_limit)
    records, offsets, blob = cprun._token_sections(run)
    data = b"".join(
        bytes(c) for c in cprun._chunks([(1, deeper), (2, records), (3, offsets), (4, blob)])
    )
    with pytest.raises(DocumentError) as err:
        load_document(data)
    assert err.value.what == "metadata is not a canonical map"
    assert err.value.got == "value nested too deeply"


@pytest.mark.parametrize(
    "run",
    [
        Run("r", 0, "s", tokens=PackedTokens(b"", values=[])),
        parse_document(
            doc_body(
                tokens=[rng_token()],
                observations=[
                    {"step": 1, "source": "s", "payload_digest": "d", "pinned_at": 2**70}
                ],
                call_graph=[{"step": 0, "node": {b"k": [1.5, None, -(2**70)]}}],
                harness_accesses=[{1: {True: "x"}}, []],
                effects=[{"seq": 0, "target": "t", "payload_digest": "p"}],
                mode="strict",
                provenance_tags=["a", "b"],
            )
        ),
    ],
)
def test_the_metadata_bytes_are_the_encoders(run: Run) -> None:
    meta = cprun._meta(run)
    assert meta == encode_value(cprun._decode_meta(meta))
    assert _same(load_document(dump_document(run, encoding="cprun")), run)


def test_a_metadata_not_in_canonical_form_is_refused() -> None:
    run = load_document(msgpack.packb(_doc("node", "list", 3)))
    meta = cprun._meta(run)
    records, offsets, blob = cprun._token_sections(run)
    for bad in (
        meta.replace(b"\xa4step\x00", b"\xa4step\xd0\x00"),  # an int not in its shortest form
        b"\x91" + meta,  # no map
        meta[:-1],  # cut
    ):
        data = b"".join(
            bytes(c) for c in cprun._chunks([(1, bad), (2, records), (3, offsets), (4, blob)])
        )
        with pytest.raises(CpstoreError) as err:
            load_document(data)
        assert err.value.what == "metadata is not a canonical map"
    assert array("Q", bytes(offsets))[-1] == len(blob)


def _judged(recorded: Run, replayed: Run) -> Any:
    try:
        return validate(recorded, replayed, record=False).verdict
    except CpstoreError as exc:
        return type(exc).__name__


@pytest.mark.parametrize("field", ["node", "harness"])
@pytest.mark.parametrize("depth", [MAX_DEPTH - 3, MAX_DEPTH])
def test_one_outcome_in_all_three_formats(field: str, depth: int) -> None:
    """R and P differing in a node (or harness access) near or at the limit: P as JSON,
    msgpack and .cprun is judged alike, never ACCEPT; R against itself alike too."""
    recorded = load_document(msgpack.packb(_doc(field, "list", depth)))
    replayed = load_document(msgpack.packb(_doc(field, "map", depth)))
    outcomes, selves = set(), set()
    for encoding in ("json", "msgpack", "cprun"):
        p = load_document(dump_document(replayed, encoding=encoding))
        r = load_document(dump_document(recorded, encoding=encoding))
        outcomes.add(_judged(recorded, p))
        selves.add(_judged(r, load_document(dump_document(recorded, encoding=encoding))))
    assert len(outcomes) == 1 and len(selves) == 1, (outcomes, selves)
    assert Verdict.ACCEPT not in outcomes
    assert all(isinstance(o, Verdict) for o in outcomes), outcomes  # tests/test_deep_findings.py
    assert selves == {Verdict.ACCEPT} or all(isinstance(o, Verdict) for o in selves)
