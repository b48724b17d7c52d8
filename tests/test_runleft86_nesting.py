"""A run document's nesting limit is 1 024 containers, JSON as msgpack, whatever the
interpreter's recursion limit; both loaders name the same place for it.

left83's leftovers (docs/reliability.md): JSON's limit was the interpreter's recursion
limit less the caller's frames, so a token value 200 deep (well inside the canonical 256)
was "document nested too deeply" under a lowered recursion limit, and one 1 100 deep was
refused for its value under a raised one; msgpack under a lowered limit let a bare
``RecursionError`` out of both loaders. At msgpack's stack the streamed loader named the
field or token (``tokens[1]``) and the whole-document loader ``document``. Now a document
nesting more than 1 024 arrays and maps is "document nested too deeply", named at the
first container past the limit (at most eight steps from the document, as the msgpack
locator names any deeper refusal) by both loaders, and the loaders are given the frames
they need: the outcome is the document's alone.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import msgpack
import pytest
from run_docs import doc_body, marked_document, rng_token

from cpstore.errors import CpstoreError
from cpstore.run.document import _decode, load_document, parse_document

MARK = "\x00runleft86-depth\x00"
LIMIT = 1024  # containers nested in the whole document

#: Containers above MARK in _document(field), and the place of a container past the
#: limit inside it (eight steps from the document at most).
_FIELDS = {
    "token": (3, "tokens[1].value[0][0][0][0][0]"),
    "harness": (2, "harness_accesses[0][0][0][0][0][0][0]"),
    "node": (3, "call_graph[0].x[0][0][0][0][0]"),
    "mode": (1, "mode[0][0][0][0][0][0][0]"),
    "unknown": (1, "zzz[0][0][0][0][0][0][0]"),
}


def _document(field: str) -> dict[str, Any]:
    return marked_document(field, MARK)


def _raw(field: str, encoding: str, total: int, *, after: Any = None) -> bytes:
    """``_document(field)`` with MARK replaced by lists nesting the whole document
    ``total`` containers deep around 1 (and ``after`` as a later harness access)."""
    doc = _document(field)
    if after is not None:
        doc["harness_accesses"] = [*doc.get("harness_accesses", []), after]
    depth = total - _FIELDS[field][0]
    if encoding == "json":
        inner = "[" * depth + "1" + "]" * depth
        return json.dumps(doc).replace(json.dumps(MARK), inner).encode()
    raw: bytes = msgpack.packb(doc)
    return raw.replace(msgpack.packb(MARK), b"\x91" * depth + b"\x01")


def _frames() -> int:
    frame: Any = sys._getframe()
    count = 0
    while frame is not None:
        count += 1
        frame = frame.f_back
    return count


@contextmanager
def _recursion_limit(limit: int | None) -> Iterator[None]:
    old = sys.getrecursionlimit()
    if limit is not None:
        sys.setrecursionlimit(limit)
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


Outcome = tuple[str, str | None, str | None]


def _outcome(load: Callable[[], Any], limit: int | None) -> Outcome:
    try:
        with _recursion_limit(limit):
            load()
    except CpstoreError as exc:
        return type(exc).__name__, exc.what, exc.where
    except RecursionError:
        return "RecursionError", None, None
    return "accepted", None, None


def _both(raw: bytes, limit: int | None) -> tuple[Outcome, Outcome]:
    """(streamed loader's outcome, whole-document loader's outcome) under ``limit``."""
    return (
        _outcome(lambda: load_document(raw), limit),
        _outcome(lambda: parse_document(_decode(raw)), limit),
    )


#: None: the default; lowered to 150 frames above the test's stack; raised to 6 000.
LIMITS = ["default", "lowered", "raised"]


def _limit(name: str) -> int | None:
    return {"default": None, "lowered": _frames() + 150, "raised": 6000}[name]


# -- item 4: msgpack's stack named alike -------------------------------------------------


@pytest.mark.parametrize("field", sorted(_FIELDS))
@pytest.mark.parametrize("extra", [1, 2, 10, 900])
@pytest.mark.parametrize("limit", ["default", "raised"])
def test_past_msgpacks_stack_both_loaders_name_the_same_place(
    field: str, extra: int, limit: str
) -> None:
    streamed, strict = _both(_raw(field, "msgpack", LIMIT + extra), _limit(limit))
    expected = ("DocumentError", "document nested too deeply", _FIELDS[field][1])
    assert strict == expected  # said "document"
    assert streamed == expected  # said "tokens[1]", "call_graph", ...


# -- item 5: JSON's limit is the document's ---------------------------------------------


@pytest.mark.parametrize("field", sorted(_FIELDS))
@pytest.mark.parametrize("total", [200, 255, LIMIT - 1, LIMIT, LIMIT + 1, LIMIT + 2, 1100])
def test_the_outcome_is_the_same_under_any_recursion_limit(field: str, total: int) -> None:
    """JSON and msgpack, both loaders, default, lowered and raised recursion limits: one
    outcome (class, message, place)."""
    outcomes = {
        outcome
        for encoding in ("json", "msgpack")
        for limit in LIMITS
        for outcome in _both(_raw(field, encoding, total), _limit(limit))
    }
    assert len(outcomes) == 1, outcomes
    (outcome,) = outcomes
    if total > LIMIT:
        assert outcome == ("DocumentError", "document nested too deeply", _FIELDS[field][1])
    elif field in ("token", "harness", "node") and total <= 255:
        assert outcome[0] == "accepted"
    else:
        assert outcome[0] == "DocumentError" and outcome[1] != "document nested too deeply"


@pytest.mark.parametrize("limit", LIMITS)
@pytest.mark.parametrize("encoding", ["json", "msgpack"])
def test_a_value_inside_the_canonical_limit_loads_under_a_lowered_limit(
    encoding: str, limit: str
) -> None:
    # Before: JSON "document nested too deeply", msgpack a bare RecursionError.
    for field in ("token", "harness", "node"):
        streamed, strict = _both(_raw(field, encoding, 255), _limit(limit))
        assert streamed[0] == strict[0] == "accepted", (field, streamed, strict)


@pytest.mark.parametrize("limit", LIMITS)
def test_the_first_refusal_in_the_text_is_the_one_reported(limit: str) -> None:
    """A raised recursion limit lets the decoder read past a container nested too deeply
    and meet another refusal later in the same field (a NaN): the nesting comes first
    in the text, and is what both loaders report; a NaN before it is reported instead."""
    later = _raw("harness", "json", LIMIT + 5, after=float("nan"))
    streamed, strict = _both(later, _limit(limit))
    expected = ("DocumentError", "document nested too deeply", _FIELDS["harness"][1])
    assert streamed == strict == expected
    earlier = later.replace(b"[[", b"[NaN, [", 1)
    streamed, strict = _both(earlier, _limit(limit))
    assert (
        streamed == strict == ("DocumentError", "JSON constant not allowed", "harness_accesses[0]")
    )


def test_the_recursion_limit_is_given_back() -> None:
    before = sys.getrecursionlimit()
    lowered = _frames() + 150
    with _recursion_limit(lowered):
        load_document(_raw("token", "json", 255))
        load_document(_raw("token", "msgpack", 255))
        assert sys.getrecursionlimit() == lowered
    assert sys.getrecursionlimit() == before


@pytest.mark.parametrize("key", ["a.b", "", 'q"', "\u00e9"])
def test_the_place_spells_keys_as_documented(key: str) -> None:
    inner = "[" * (LIMIT + 3) + "1" + "]" * (LIMIT + 3)
    text = json.dumps(doc_body(tokens=[rng_token(0, {key: "X"})])).replace('"X"', inner)
    streamed, strict = _both(text.encode(), None)
    assert streamed == strict
    assert strict[2] == f"tokens[0].value[{json.dumps(key)}][0][0][0][0]"
