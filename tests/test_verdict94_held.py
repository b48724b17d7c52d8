"""verdict94: what the adversarial hunt for a wrong verdict attacked and found holding.

A pair (R, P) is made from a clean recording by random mutations on either side, each
aimed at a wrong ACCEPT (a value equal under msgpack's reading but not canonically, a kind
or provenance changed with the value kept, an unpinned or re-pinned read of the same
payload, an effect recorded on one side only or reordered, a call graph's nodes reordered,
a sealed ledger on one side, a replay: tag, a harness access, a lossy transcript, the
state equal while everything else differs, empty logs on both sides). The decision must:

* be ACCEPT exactly when a reference written from docs/decision-table.md, independently
  of cpstore's checks, finds nothing;
* be REJECT whenever a proven divergence is there (identity, state, tokens, call graph,
  observations), whatever else holds;
* be the same, finding for finding, for the pair as mappings, JSON, msgpack and ``.cprun``.
"""

from __future__ import annotations

import copy
import random
import struct
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from test_decision_support import clean_doc

from cpstore.decision.table import Verdict
from cpstore.decision.validate import validate
from cpstore.errors import InvalidInputError
from cpstore.native.canonical import encode_value
from cpstore.run.document import dump_document, parse_document
from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store

#: Value pairs a reading other than the canonical one could call equal (or not).
_NEAR = [1, 1.0, True, "1", b"1", [1], 0.0, -0.0, None, False, {"a": 1}, {"a": True}, 2**64]


def _mutate(doc: dict[str, Any], which: int, arg: int) -> None:
    toks, obs, eff, cg = doc["tokens"], doc["observations"], doc["effects"], doc["call_graph"]
    k = arg % max(1, len(toks))
    if which == 0 and toks:
        toks[k]["value"] = _NEAR[arg % len(_NEAR)]
    elif which == 1 and toks:
        toks[k]["kind"] = ("rng", "clock", "tool", "env", "custom")[arg % 5]
    elif which == 2 and toks:
        toks[k]["provenance"] = "live"
    elif which == 3 and toks:
        del toks[k]
    elif which == 4 and toks:
        toks.append(copy.deepcopy(toks[k]))
    elif which == 5 and len(toks) > 1:
        toks[0], toks[1] = toks[1], toks[0]
    elif which == 6 and obs:
        obs[arg % len(obs)]["pinned_at"] = None
    elif which == 7 and obs:
        obs[arg % len(obs)]["pinned_at"] = 100.0 + arg
    elif which == 8 and obs:
        obs[arg % len(obs)]["payload_digest"] = "other"
    elif which == 9 and eff:
        del eff[arg % len(eff)]
    elif which == 10:
        eff.append({"seq": len(eff), "target": "db", "payload_digest": f"x{arg}"})
    elif which == 11 and len(eff) > 1:
        eff.reverse()
    elif which == 12 and len(cg) > 1:
        cg[0], cg[1] = cg[1], cg[0]
    elif which == 13:
        doc["ledger_sealed"] = not doc["ledger_sealed"]
    elif which == 14:
        doc["provenance_tags"] = [*doc["provenance_tags"], ("replay:x", "Replay:x")[arg % 2]]
    elif which == 15:
        doc["harness_accesses"] = [{"read": "counter", "n": arg}]
    elif which == 16:
        doc["transcript_digest"] = (None, "other")[arg % 2]
    elif which == 17:
        doc["state_digest"] = f"state-{arg}"
    elif which == 18:
        doc["mode"] = (None, "best_effort", "strict")[arg % 3]
    elif which == 19:
        doc["step"] = arg
    elif which == 20:
        doc["run_id"] = f"run-{arg}"
    elif which == 21:
        toks.clear()
        obs.clear()
        eff.clear()
        cg.clear()


def _canon(value: Any) -> bytes:
    return encode_value(value)


def _pin(o: dict[str, Any]) -> float | None:
    return None if o["pinned_at"] is None else float(o["pinned_at"])


def _proven_divergence(r: dict[str, Any], p: dict[str, Any]) -> bool:
    """The table's REJECT rows, from the docs (nothing of cpstore's checks)."""

    def tok(t: dict[str, Any]) -> tuple[Any, ...]:
        return (t["seq"], t["kind"], _canon(t["value"]))

    def ob(o: dict[str, Any]) -> tuple[Any, ...]:
        return (o["step"], o["source"], o["payload_digest"])

    return (
        r["run_id"] != p["run_id"]
        or r["step"] != p["step"]
        or r["state_digest"] != p["state_digest"]
        or [tok(t) for t in r["tokens"]] != [tok(t) for t in p["tokens"]]
        or [_canon(n) for n in r["call_graph"]] != [_canon(n) for n in p["call_graph"]]
        or [ob(o) for o in r["observations"]] != [ob(o) for o in p["observations"]]
        or any(t.startswith("replay:") for t in r["provenance_tags"])
    )


def _nothing_found(r: dict[str, Any], p: dict[str, Any]) -> bool:
    """ACCEPT's condition, from the docs: no divergence and nothing unprovable."""
    ledger = [(e["seq"], e["target"], e["payload_digest"]) for e in r["effects"]]
    tried = [(e["seq"], e["target"], e["payload_digest"]) for e in p["effects"]]
    return (
        not _proven_divergence(r, p)
        and all(t["provenance"] == "recorded" for t in [*r["tokens"], *p["tokens"]])
        and [t["seq"] for t in r["tokens"]] == list(range(len(r["tokens"])))
        and all(_pin(o) is not None for o in [*r["observations"], *p["observations"]])
        and [_pin(o) for o in r["observations"]] == [_pin(o) for o in p["observations"]]
        and tried == ledger[: len(tried)]
        and r["ledger_sealed"] is True
        and not p["harness_accesses"]
        and p["mode"] == "strict"
        and r["mode"] != "best_effort"
        and r["transcript_digest"] == p["transcript_digest"]
    )


_MUTATIONS = st.lists(
    st.tuples(st.booleans(), st.integers(0, 21), st.integers(0, 40)), min_size=0, max_size=3
)


def _forms(doc: dict[str, Any]) -> dict[str, Any]:
    run = parse_document(doc)
    out: dict[str, Any] = {"mapping": doc, "run": run}
    for encoding in ("json", "msgpack", "cprun"):
        try:
            out[encoding] = dump_document(run, encoding=encoding)
        except InvalidInputError:  # a value the format cannot hold (bytes, 2**64 in msgpack)
            continue
    return out


def decide(r: dict[str, Any], p: dict[str, Any]) -> tuple[Verdict, int]:
    """The verdict of the pair, the same in every form both sides can be written in, and
    how many forms gave it."""
    rf, pf = _forms(r), _forms(p)
    decisions = [validate(rf[form], pf[form]) for form in rf if form in pf]
    first = decisions[0]
    for d in decisions[1:]:
        assert [f.to_dict() for f in d.findings] == [f.to_dict() for f in first.findings]
        assert d.fidelity is first.fidelity
    return first.verdict, len(decisions)


@settings(max_examples=400, deadline=None)
@given(mutations=_MUTATIONS, on_state=st.booleans())
def test_accept_exactly_when_nothing_is_found_in_every_form(
    mutations: list[tuple[bool, int, int]], on_state: bool
) -> None:
    r = clean_doc(mode=None)
    p = clean_doc()
    for on_r, which, arg in mutations:
        _mutate(r if on_r else p, which, arg)
    if on_state:  # the state equal while everything else may differ
        p["state_digest"] = r["state_digest"]
    verdict, forms = decide(r, p)
    assert forms >= 3
    assert (verdict is Verdict.ACCEPT) == _nothing_found(r, p)
    if _proven_divergence(r, p):
        assert verdict is Verdict.REJECT


def test_near_equal_floats_read_as_their_bits() -> None:
    """-0.0 and 0.0 are one canonical value (docs/format.md): equal tokens; any other two
    floats of different bits are different tokens, whatever Python's == says."""
    r = clean_doc(mode=None)
    for a, b, equal in [(0.0, -0.0, True), (1.0, 1.0 + 2**-52, False), (5e-324, 0.0, False)]:
        r["tokens"][0]["value"] = a
        p = copy.deepcopy(r)
        p["mode"] = "strict"
        p["tokens"][0]["value"] = b
        assert (validate(r, p).verdict is Verdict.ACCEPT) is equal
        assert struct.pack(">d", a) == struct.pack(">d", b) or not equal or a == b


def _record(store: Store, branch: str, *, pinned: bool, sealed: bool) -> str:
    rec = store.recorder("run-1", branch=branch)
    rec.decision(1, "plan")
    rec.decision(12, "read_config")
    rec.decision(30, {"node": "x", "tool": "search", "args": ["q"]})
    for i, value in enumerate([7, 1.5, None, "v", b"b", {"k": [1]}]):
        rec.token(("rng", "clock", "tool", "custom")[i % 4], value)
    rec.observe(3, "clock", b"c3", pinned_at=100.0)
    rec.observe(12, "read_config", b"cfg", pinned_at=101.5 if pinned else None)
    rec.effect("db", b"e0")
    rec.effect("mail", b"e1")
    rec.transcript(b"hello")
    cid = rec.checkpoint(47, {"s": 1}, seal_ledger=sealed)
    rec.close(discard_effects=not sealed)
    return cid


def _as_document(store: Store, cid: str) -> dict[str, Any]:
    """The stored checkpoint as the run document of the same recording."""
    with store.read(cid) as cp:
        m = cp.manifest
        tokens = []
        for i in range(cp.token_count()):
            seq, kind, provenance, value = cp.token(i)
            tokens.append({"seq": seq, "kind": kind, "value": value, "provenance": provenance})
        return {
            "format": 1,
            "run_id": m.run_id,
            "step": m.step,
            "state_digest": m.state_digest,
            "observations": [
                {"step": s, "source": src, "payload_digest": d, "pinned_at": pin}
                for s, src, d, pin in cp.observations()
            ],
            "tokens": tokens,
            "call_graph": [dict(n) for n in cp.call_graph()],
            "transcript_digest": m.transcript_digest,
            "effects": [{"seq": s, "target": t, "payload_digest": d} for s, t, d in cp.effects()],
            "ledger_sealed": bool(m.ledger_sealed),
            "harness_accesses": [],
            "provenance_tags": list(m.provenance_tags),
            "mode": None,
        }


def test_a_stored_recording_and_its_document_decide_alike(tmp_path: Path) -> None:
    """R as a stored checkpoint and R as its run document: the same findings and fidelity
    for 3 recordings x 150 replays mutated as above (and the reference's ACCEPT)."""
    rnd = random.Random(94)
    with open_store(tmp_path / "s") as store:
        for branch, pinned, sealed in [
            ("main", True, True),
            ("a", False, True),
            ("b", True, False),
        ]:
            cid = _record(store, branch, pinned=pinned, sealed=sealed)
            recorded = _as_document(store, cid)
            for _ in range(150):
                p = copy.deepcopy(recorded)
                p["mode"] = "strict"
                for _ in range(rnd.randint(0, 3)):
                    _mutate(p, rnd.randint(0, 20), rnd.randint(0, 40))
                stored = validate(cid, p, store=store, record=False)
                as_doc = validate(recorded, p)
                assert [f.to_dict() for f in stored.findings] == [
                    f.to_dict() for f in as_doc.findings
                ]
                assert stored.fidelity is as_doc.fidelity
                assert (stored.verdict is Verdict.ACCEPT) == _nothing_found(recorded, p)
