"""audit43: R and P that differ only in how a runtime might represent a field.

A validator that normalised representations (unicode forms, trailing blanks, 1 and
1.0, True and 1, None and a missing key) would call two different recordings equal:
a wrong ACCEPT. Each pair here differs in exactly one such way and must not ACCEPT;
key order and the document encoding (JSON, msgpack, .cprun) are the same run and must.
"""

from __future__ import annotations

import copy
import unicodedata
from collections.abc import Callable
from typing import Any

import pytest
from test_decision_support import clean_doc, replay_of

from cpstore.decision.table import FindingCode, Verdict
from cpstore.decision.validate import validate
from cpstore.run.document import dump_document, load_document, parse_document

NFC, NFD = unicodedata.normalize("NFC", "café"), unicodedata.normalize("NFD", "café")


def _node(r: dict[str, Any], p: dict[str, Any]) -> Callable[[dict[str, Any]], Any]:
    def edit(doc: dict[str, Any], fields: dict[str, Any]) -> None:
        doc["call_graph"][2] = {"step": 30, "node": "tool", **fields}

    def both(doc: dict[str, Any]) -> None:
        edit(doc["r"], r)
        edit(doc["p"], p)

    return both


def _token(r: Any, p: Any) -> Callable[[dict[str, Any]], Any]:
    def edit(doc: dict[str, Any]) -> None:
        doc["r"]["tokens"][0]["value"] = r
        doc["p"]["tokens"][0]["value"] = p

    return edit


def _p(change: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
    return lambda doc: change(doc["p"])


def _r(change: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
    return lambda doc: change(doc["r"])


def _dup_seq(doc: dict[str, Any]) -> None:
    doc["tokens"][2]["seq"] = 1


def _dup_seq_both(doc: dict[str, Any]) -> None:
    _dup_seq(doc["r"])
    _dup_seq(doc["p"])


CASES: dict[str, tuple[Callable[[dict[str, Any]], Any], Verdict, FindingCode]] = {
    "run_id NFC vs NFD": (
        lambda d: (d["r"].update(run_id=NFC), d["p"].update(run_id=NFD)),
        Verdict.REJECT,
        FindingCode.RUN_MISMATCH,
    ),
    "run_id trailing blank": (
        _p(lambda p: p.update(run_id="run-1 ")),
        Verdict.REJECT,
        FindingCode.RUN_MISMATCH,
    ),
    "token 1 vs 1.0": (_token(1, 1.0), Verdict.REJECT, FindingCode.TOKEN_MISMATCH),
    "token True vs 1": (_token(True, 1), Verdict.REJECT, FindingCode.TOKEN_MISMATCH),
    "token NFC vs NFD": (_token(NFC, NFD), Verdict.REJECT, FindingCode.TOKEN_MISMATCH),
    "token None vs a missing key": (
        _token({"v": None}, {}),
        Verdict.REJECT,
        FindingCode.TOKEN_MISMATCH,
    ),
    "token bytes vs str": (_token(b"v1", "v1"), Verdict.REJECT, FindingCode.TOKEN_MISMATCH),
    "node version 1 vs 1.0": (
        _node({"version": 1}, {"version": 1.0}),
        Verdict.REJECT,
        FindingCode.CALL_GRAPH_MISMATCH,
    ),
    "node flag True vs 1": (
        _node({"flag": True}, {"flag": 1}),
        Verdict.REJECT,
        FindingCode.CALL_GRAPH_MISMATCH,
    ),
    "node model None vs missing": (
        _node({"model": None}, {}),
        Verdict.REJECT,
        FindingCode.CALL_GRAPH_MISMATCH,
    ),
    "node model NFC vs NFD": (
        _node({"model": NFC}, {"model": NFD}),
        Verdict.REJECT,
        FindingCode.CALL_GRAPH_MISMATCH,
    ),
    "node model trailing blank": (
        _node({"model": "m-1"}, {"model": "m-1 "}),
        Verdict.REJECT,
        FindingCode.CALL_GRAPH_MISMATCH,
    ),
    "observation pinned in R, re-fetched in P, same digest": (
        _p(lambda p: p["observations"][1].update(pinned_at=None)),
        Verdict.QUARANTINE,
        FindingCode.UNPINNED_OBSERVATION,
    ),
    "observation re-fetched in R, pinned in P, same digest": (
        _r(lambda r: r["observations"][1].update(pinned_at=None)),
        Verdict.QUARANTINE,
        FindingCode.UNPINNED_OBSERVATION,
    ),
    "P's token log a prefix of R's": (
        _p(lambda p: p["tokens"].pop()),
        Verdict.REJECT,
        FindingCode.TOKEN_COUNT,
    ),
    "P's token log empty": (
        _p(lambda p: p["tokens"].clear()),
        Verdict.REJECT,
        FindingCode.TOKEN_COUNT,
    ),
    "R's token log empty": (
        _r(lambda r: r["tokens"].clear()),
        Verdict.REJECT,
        FindingCode.TOKEN_COUNT,
    ),
    "a seq repeated in P only": (_p(_dup_seq), Verdict.REJECT, FindingCode.TOKEN_MISMATCH),
    "a seq repeated in both": (
        _dup_seq_both,
        Verdict.QUARANTINE,
        FindingCode.TOKEN_SEQUENCE,
    ),
    "ledger sealed in P only": (
        lambda d: (d["r"].update(ledger_sealed=False), d["p"].update(ledger_sealed=True)),
        Verdict.QUARANTINE,
        FindingCode.LEDGER_UNSEALED,
    ),
    "harness access in P only": (
        _p(lambda p: p.update(harness_accesses=[None])),
        Verdict.QUARANTINE,
        FindingCode.HARNESS_PERTURBATION,
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_difference_in_representation_is_a_difference(name: str) -> None:
    change, verdict, code = CASES[name]
    r = clean_doc()
    pair = {"r": r, "p": replay_of(r)}
    change(pair)
    d = validate(pair["r"], pair["p"])
    assert d.verdict is verdict and code in d.codes, d.findings


def test_key_order_and_encoding_are_the_same_run() -> None:
    r = clean_doc()
    r["tokens"][0]["value"] = {"a": 1, "b": [1.0, None]}
    r["call_graph"][2] = {"step": 30, "node": "tool", "model": "m", "version": 2}
    p = replay_of(r)
    p["tokens"][0]["value"] = {"b": [1.0, None], "a": 1}
    p["call_graph"][2] = {"version": 2, "model": "m", "node": "tool", "step": 30}
    p = copy.deepcopy(p)
    assert validate(r, p).verdict is Verdict.ACCEPT
    pr, pp = parse_document(r), parse_document(p)
    for a in ("json", "msgpack", "cprun"):
        for b in ("json", "msgpack", "cprun"):
            ra = load_document(dump_document(pr, encoding=a))
            pb = load_document(dump_document(pp, encoding=b))
            assert validate(ra, pb).verdict is Verdict.ACCEPT, (a, b)
