"""The smallest run document the loaders accept, for tests that vary one field of it.

Each review76 test file spelled its own copy of these eight fields (duplicates found five);
``doc_body(**fields)`` is that body with the given fields added or replaced."""

from __future__ import annotations

from typing import Any


def rng_token(seq: int = 0, value: Any = 0, kind: str = "rng") -> dict[str, Any]:
    """One recorded token, as a document holds it."""
    return {"seq": seq, "kind": kind, "value": value, "provenance": "recorded"}


def doc_body(**fields: Any) -> dict[str, Any]:
    """A format-1 run document of run ``r`` at step 0 with no streams, then ``fields``."""
    body: dict[str, Any] = {
        "format": 1,
        "run_id": "r",
        "step": 0,
        "state_digest": "s",
        "observations": [],
        "call_graph": [],
        "transcript_digest": None,
        "effects": [],
    }
    body.update(fields)
    return body


def marked_document(field: str, mark: str) -> dict[str, Any]:
    """A document holding the string ``mark`` in one place of ``field``: a token's value
    ("token", its second token), a harness access ("harness"), a call graph node's
    field ("node"), the mode ("mode"), or an unknown field ``zzz`` (anything else)."""
    if field == "token":
        return doc_body(tokens=[rng_token(0, 1), rng_token(1, mark)])
    if field == "harness":
        return doc_body(tokens=[rng_token()], harness_accesses=[mark])
    if field == "node":
        return doc_body(tokens=[rng_token()], call_graph=[{"step": 0, "node": "n", "x": mark}])
    if field == "mode":
        return doc_body(tokens=[rng_token()], mode=mark)
    return doc_body(tokens=[rng_token()], zzz=mark)  # an unknown field
