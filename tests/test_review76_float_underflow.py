"""review76 (policy, pinned): a JSON number literal below the float range reads as zero.

A literal past the float range (``1e400``) is refused (audit31): it would read as
infinity, two different literals as one value. A literal *below* it (``1e-400``,
``-2.5e-330``) rounds to ``0.0`` (or ``-0.0``, which the canonical encoding writes as
``0.0``), as every JSON reader rounds it: two different literals are then one value,
the same token as ``0.0``. That is ordinary rounding to the nearest float (``0.1`` and
``0.10000000000000001`` are one value too), so it is kept; listed as a policy question
in review76's report. Both read paths agree, and a replay token ``0.0`` matches it.
"""

from __future__ import annotations

import json

import pytest
from run_docs import doc_body, rng_token

from cpstore.decision.table import Verdict
from cpstore.decision.validate import validate
from cpstore.native.canonical import encode_value
from cpstore.run import document
from cpstore.run.document import load_document, parse_document


def _doc(literal: str, mode: str | None = None) -> bytes:
    body = doc_body(ledger_sealed=True, mode=mode, tokens=[rng_token(value="VALUE", kind="clock")])
    return json.dumps(body).replace('"VALUE"', literal).encode()


@pytest.mark.parametrize("literal", ["1e-400", "-1e-400", "2.5e-330", "0e0", "-0.0"])
def test_a_literal_below_the_float_range_is_the_token_zero(literal: str) -> None:
    fast = load_document(_doc(literal))
    strict = parse_document(document._strict_json(_doc(literal)))
    assert bytes(fast.tokens.view()) == bytes(strict.tokens.view())
    assert [encode_value(v) for v in fast.tokens.values or []] == [encode_value(0.0)]
    replay = load_document(_doc("0.0", mode="strict"))
    assert validate(fast, replay).verdict is Verdict.ACCEPT


def test_the_smallest_subnormal_is_not_zero() -> None:
    recording = load_document(_doc("5e-324"))
    replay = load_document(_doc("0.0", mode="strict"))
    assert validate(recording, replay).verdict is Verdict.REJECT
