"""A validation whose two runs differ in a value nested near the canonical depth limit
ends in a verdict, recorded or not.

A finding holds both sides' values (``expected``, ``observed``), and the decision's id and
audit record encode them four containers down (record, body, findings, the finding).
A call-graph node or token value nested 253 levels or more fitted in its run but not in
the decision: ``validate`` raised ``CanonicalEncodingError`` where the two runs differed
(runleft86's xfail) instead of REJECT. Such a value is now shown in the finding's plain
data by its canonical digest (``{"nested_too_deeply": true, "digest": ...}``); the finding
in memory keeps the value."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgpack
import pytest
from run_docs import doc_body, rng_token
from test_runleft86_cprun_depth import _deep, _doc

import cpstore
from cpstore.decision.table import FINDING_VALUE_DEPTH, Finding, FindingCode, Verdict
from cpstore.decision.validate import validate
from cpstore.native.binding import digest
from cpstore.native.canonical import MAX_DEPTH, encode_value
from cpstore.run.document import load_document


def _token_doc(shape: str, depth: int) -> dict[str, Any]:
    return doc_body(tokens=[{**rng_token(), "value": _deep(shape, depth)}])


def _pair(field: str, depth: int) -> tuple[Any, Any]:
    make = _token_doc if field == "token" else lambda s, d: _doc(field, s, d)
    return (
        load_document(msgpack.packb(make("list", depth))),
        load_document(msgpack.packb(make("map", depth))),
    )


@pytest.mark.parametrize("field", ["node", "token", "harness"])
@pytest.mark.parametrize("depth", [FINDING_VALUE_DEPTH - 1, FINDING_VALUE_DEPTH + 1, MAX_DEPTH])
def test_a_difference_near_the_limit_ends_in_a_verdict(field: str, depth: int) -> None:
    recorded, replayed = _pair(field, depth)
    codes = {f.code for f in validate(recorded, replayed, record=False).findings}
    alone = {f.code for f in validate(recorded, recorded, record=False).findings}
    if field == "harness":  # a harness access at all is a perturbation: a verdict, not ACCEPT
        assert validate(recorded, replayed, record=False).verdict == Verdict.QUARANTINE
        return
    want = FindingCode.CALL_GRAPH_MISMATCH if field == "node" else FindingCode.TOKEN_MISMATCH
    assert want in codes and want not in alone, (codes, alone)
    assert validate(recorded, replayed, record=False).verdict == Verdict.REJECT


@pytest.mark.parametrize(("field", "depth"), [("node", MAX_DEPTH), ("token", FINDING_VALUE_DEPTH)])
def test_a_recorded_decision_names_the_deep_values_by_digest(
    tmp_path: Path, field: str, depth: int
) -> None:
    """(A token's finding shows the token, its value one level down; past the encoder's
    limit, as at 256, it shows the token's repr, a string.)"""
    recorded, replayed = _pair(field, depth)
    with cpstore.open(tmp_path / "s") as store:
        decision = validate(recorded, replayed, store=store)
        assert decision.verdict == Verdict.REJECT and decision.audit_digest
        finding = decision.findings[0]
        shown = finding.to_dict()
        for side in ("expected", "observed"):
            value = getattr(finding, side)  # kept whole in memory
            assert shown[side] == {
                "nested_too_deeply": True,
                "digest": bytes(digest(encode_value(value))).hex(),
            }
        assert shown["expected"] != shown["observed"]
        assert store.verify().ok


def test_a_value_within_the_room_is_shown_as_it_is() -> None:
    deep = _deep("list", FINDING_VALUE_DEPTH)
    deeper = _deep("list", FINDING_VALUE_DEPTH + 1)
    f = Finding(FindingCode.CALL_GRAPH_MISMATCH, "call_graph", "both", 0, "index", deep, deeper, "")
    shown = f.to_dict()
    assert shown["expected"] == deep
    assert shown["observed"]["nested_too_deeply"] is True
    encode_value({"body": {"findings": [shown]}})  # fits in a decision's audit record
