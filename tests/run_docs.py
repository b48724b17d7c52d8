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
