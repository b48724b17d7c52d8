"""Run documents: parsing, errors that name the field, bounded memory, round trips."""

from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest
from test_decision_support import clean_doc

from cpstore.decision.table import Verdict
from cpstore.decision.validate import validate
from cpstore.errors import DocumentError, FormatVersionError, InvalidInputError, NotFoundError
from cpstore.run.document import (
    DOCUMENT_FORMAT,
    MAX_DOCUMENT_BYTES,
    dump_document,
    load_document,
    parse_document,
)
from cpstore.run.model import ReplayMode


def test_json_and_msgpack_documents_parse_to_the_same_run(tmp_path: Path) -> None:
    """The same document as JSON and as msgpack gives identical packed tokens."""
    doc = clean_doc()
    a = load_document(json.dumps(doc).encode())
    path = tmp_path / "r.msgpack"
    path.write_bytes(msgpack.packb(doc))
    b = load_document(path)
    assert bytes(a.tokens.view()) == bytes(b.tokens.view())
    assert a.observations == b.observations and a.mode is ReplayMode.STRICT


@pytest.mark.parametrize("encoding", ["json", "msgpack"])
def test_dump_then_load_round_trips(encoding: str) -> None:
    """dump_document/load_document keep every field."""
    run = parse_document(clean_doc())
    again = load_document(dump_document(run, encoding=encoding))
    assert bytes(again.tokens.view()) == bytes(run.tokens.view())
    assert again.tokens.values == run.tokens.values
    assert (again.call_graph, again.effects, again.provenance_tags) == (
        run.call_graph,
        run.effects,
        run.provenance_tags,
    )
    assert validate(run, again).verdict is Verdict.ACCEPT


def test_json_keeps_int_and_float_distinct() -> None:
    """1 and 1.0 in a JSON document are different token values."""
    r = clean_doc(tokens=1)
    p = clean_doc(tokens=1)
    r["tokens"][0]["value"] = 1
    p["tokens"][0]["value"] = 1.0
    a = load_document(json.dumps(r).encode())
    b = load_document(json.dumps(p).encode())
    assert bytes(a.tokens.view()) != bytes(b.tokens.view())


@pytest.mark.parametrize(
    ("mutate", "where"),
    [
        (lambda d: d.pop("state_digest"), "state_digest"),
        (lambda d: d.pop("tokens"), "tokens"),
        (lambda d: d.update(step="47"), "step"),
        (lambda d: d.update(step=True), "step"),
        (lambda d: d.update(step=-1), "step"),
        (lambda d: d["tokens"][2].pop("kind"), "tokens[2].kind"),
        (lambda d: d["tokens"][1].update(provenance="cache"), "tokens[1].provenance"),
        (lambda d: d["tokens"][0].update(seq=2**64), "tokens[0].seq"),
        (lambda d: d["tokens"][0].update(kind=""), "tokens[0].kind"),
        (lambda d: d["observations"][1].update(pinned_at="now"), "observations[1].pinned_at"),
        (lambda d: d["observations"][1].pop("pinned_at"), "observations[1].pinned_at"),
        (lambda d: d["observations"][0].update(source=3), "observations[0].source"),
        (lambda d: d["call_graph"][1].pop("node"), "call_graph[1].node"),
        (lambda d: d["call_graph"].append(7), "call_graph[3]"),
        (lambda d: d["effects"][0].update(target=None), "effects[0].target"),
        (lambda d: d.update(ledger_sealed="yes"), "ledger_sealed"),
        (lambda d: d.update(mode="fast"), "mode"),
        (lambda d: d.update(provenance_tags=[1]), "provenance_tags[0]"),
        (lambda d: d.update(observations={}), "observations"),
        (lambda d: d.update(surprise=1), "surprise"),
        (lambda d: d["tokens"][0].update(extra=1), "tokens[0].extra"),
    ],
)
def test_bad_fields_raise_document_error_naming_the_field(
    mutate: Callable[[dict[str, Any]], object], where: str
) -> None:
    """Missing, mistyped and unknown fields are DocumentError with ``where`` set."""
    doc = clean_doc()
    mutate(doc)
    with pytest.raises(DocumentError) as info:
        load_document(json.dumps(doc).encode())
    assert info.value.where == where


def test_document_errors_are_value_errors_never_verdicts() -> None:
    """validate() raises on a bad document rather than returning a verdict."""
    doc = clean_doc()
    del doc["run_id"]
    with pytest.raises(ValueError, match="run_id"):
        validate(doc, clean_doc())


@pytest.mark.parametrize("version", [0, 2, "1", None])
def test_unknown_format_version_is_refused(version: object) -> None:
    """Any format other than the integer 1 is refused, never misread."""
    doc = clean_doc(format=version)
    with pytest.raises((FormatVersionError, DocumentError)) as info:
        parse_document(doc)
    assert info.value.where == "format"
    assert DOCUMENT_FORMAT == 1


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"{",
        b"[1,2]",
        b'{"a": NaN}',
        b'{"format": 1, "format": 1}',
        b"\xc1",
        b"\x92\x01\x02",
        b'"just a string"',
    ],
)
def test_garbage_is_a_document_error(raw: bytes) -> None:
    """Non-documents (bad JSON, JSON constants, duplicate keys, bad msgpack) raise DocumentError."""
    with pytest.raises(DocumentError):
        load_document(raw)


def test_deep_nesting_is_a_document_error_not_a_crash() -> None:
    """100k nested arrays raise DocumentError (no RecursionError escapes)."""
    with pytest.raises(DocumentError):
        load_document(b"[" * 100_000 + b"]" * 100_000)


def test_msgpack_header_declaring_a_billion_tokens_is_refused_without_allocating() -> None:
    """An array32 header of 10**9 entries in a tiny document allocates nothing big."""
    head = msgpack.packb({"format": 1, "run_id": "r", "step": 1, "state_digest": "s"})
    # Rewrite the map to declare one more entry, "tokens", whose array claims 10**9 items.
    body = bytearray(head)
    body[0] = 0x85
    body += msgpack.packb("tokens") + b"\xdd" + (10**9).to_bytes(4, "big") + b"\x90"
    tracemalloc.start()
    try:
        with pytest.raises(DocumentError, match="msgpack"):
            load_document(bytes(body))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 10 * 1024 * 1024


def test_document_larger_than_the_limit_is_refused(tmp_path: Path) -> None:
    """max_bytes bounds what is read from a file."""
    path = tmp_path / "big.json"
    path.write_bytes(json.dumps(clean_doc(tokens=200)).encode())
    with pytest.raises(DocumentError, match="too large"):
        load_document(path, max_bytes=1000)


_OVER_THE_LIMIT = r"""
import resource, sys
import cpstore
from cpstore import DocumentError
from cpstore.run import MAX_DOCUMENT_BYTES
path = sys.argv[1]
with open(path, "wb") as fh:
    fh.truncate(MAX_DOCUMENT_BYTES + 1)  # sparse: no disk, no memory
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    cpstore.load_document(path)
except DocumentError as exc:
    grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    print(grew, exc.where, exc.expected, exc.got, exc.what, sep="|")
"""


def test_a_file_just_over_the_default_limit_is_refused_from_its_size(tmp_path: Path) -> None:
    """One byte over MAX_DOCUMENT_BYTES is refused from the file size, without reading it."""
    path = tmp_path / "sparse.json"
    out = subprocess.run(
        [sys.executable, "-c", _OVER_THE_LIMIT, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    grew, where, expected, got, what = out.stdout.strip().split("|")
    assert int(grew) < 16 * 1024, grew  # KiB: the 128 MiB were never read
    assert where == str(path)
    assert expected == f"<= {MAX_DOCUMENT_BYTES} bytes"
    assert got == f"{MAX_DOCUMENT_BYTES + 1} bytes"
    assert "too large" in what and "max_bytes" in what


def test_max_bytes_is_the_exact_limit_for_files_and_bytes(tmp_path: Path) -> None:
    """A document of exactly max_bytes parses; one byte less refuses it, naming the size."""
    raw = json.dumps(clean_doc(tokens=20)).encode()
    path = tmp_path / "doc.json"
    path.write_bytes(raw)
    for source in (path, raw, memoryview(raw)):
        assert load_document(source, max_bytes=len(raw)).run_id == "run-1"
        with pytest.raises(DocumentError, match="too large") as info:
            load_document(source, max_bytes=len(raw) - 1)
        assert info.value.got == f"{len(raw)} bytes"
        assert info.value.expected == f"<= {len(raw) - 1} bytes"
    with pytest.raises(DocumentError) as info:
        load_document(path, max_bytes=10)
    assert info.value.where == str(path)


def test_missing_file_is_not_found_naming_the_path(tmp_path: Path) -> None:
    """A path that does not exist raises NotFoundError with the path as ``where``."""
    with pytest.raises(NotFoundError) as info:
        load_document(tmp_path / "nope.json")
    assert info.value.where is not None and info.value.where.endswith("nope.json")


def test_unknown_version_is_reported_before_missing_fields() -> None:
    """A format-2 document with other fields is a FormatVersionError, not 'missing field'."""
    with pytest.raises(FormatVersionError):
        load_document(b'{"format": 2, "something": "else"}')


def test_json_cannot_carry_bytes_values_so_dump_says_use_msgpack() -> None:
    """A bytes token value dumps to msgpack but JSON refuses with a clear error."""
    doc = clean_doc(tokens=1)
    doc["tokens"][0]["value"] = b"\x01"
    run = load_document(msgpack.packb(doc, use_bin_type=True))
    assert load_document(dump_document(run, encoding="msgpack")).tokens.values == [b"\x01"]
    with pytest.raises(InvalidInputError, match="msgpack"):
        dump_document(run, encoding="json")


def test_large_document_tokens_are_held_packed() -> None:
    """Parsing 20k tokens yields one bytes buffer of 32-byte records."""
    run = parse_document(clean_doc(tokens=20_000))
    assert isinstance(run.tokens.records, bytes)
    assert len(run.tokens.records) == 20_000 * 32


def test_two_kind_names_with_one_hashed_code_are_refused() -> None:
    """k9870 and k53003 share a 31-bit kind code; a document using both is refused."""
    doc = clean_doc(tokens=2)
    doc["tokens"][0]["kind"] = "k9870"
    doc["tokens"][1]["kind"] = "k53003"
    with pytest.raises(DocumentError, match="same code") as info:
        parse_document(doc)
    assert info.value.where == "tokens[1].kind"
