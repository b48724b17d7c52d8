"""audit31: every way a run reaches the validator gives the same decision.

A recording R and a replay P (clean, or with any set of the table's
divergences) are validated through each input path — the decoded mapping,
JSON and msgpack bytes (streamed), the strict parse, a packed run file, the
streaming writer's output in each encoding — and every path must give the same
verdict, fidelity, findings (code, stream, side, position, expected,
observed, message, count) and recording gaps. A path that dropped or
normalised a field (a token's kind or provenance, an observation's source
or pin, an effect's target) would show as a different decision here.

With a store (LMDB and PostgreSQL): R recorded by the recorder (one call per
item, or the bulk appends) and validated by checkpoint id gives the decision
the same R gives as a document, on both backends.
"""

from __future__ import annotations

import copy
import io
import json
import uuid
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pg_cluster import backend_store  # noqa: F401 - fixture
from test_decision_properties import MUTATIONS, mutated, recordings

from cpstore.decision.table import Decision, Verdict
from cpstore.decision.validate import validate
from cpstore.errors import InvalidInputError
from cpstore.native.binding import digest
from cpstore.run import document
from cpstore.run.document import dump_document, load_document, parse_document
from cpstore.run.writer import write_document
from cpstore.store.facade import Store

PROPERTY = settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def _key(d: Decision) -> Any:
    return (
        d.verdict,
        d.fidelity,
        [f.to_dict() for f in d.findings],
        [g.to_dict() for g in d.recording_gaps],
    )


def _forms(doc: dict[str, Any]) -> dict[str, Any]:
    """The same run through every input path the validator takes."""
    run = parse_document(doc)
    out: dict[str, Any] = {
        "mapping": doc,
        "run": run,
        "cprun": dump_document(run, encoding="cprun"),
    }
    buf = io.BytesIO()
    write_document(run, buf, encoding="cprun")
    out["writer-cprun"] = buf.getvalue()
    try:
        packed = msgpack.packb(doc, use_bin_type=True)
    except OverflowError:
        packed = None  # an int beyond 64 bits: msgpack has no form for it
    if packed is not None:
        out["msgpack"] = packed
        out["msgpack-strict"] = parse_document(document._strict_msgpack(packed))
        out["cprun-of-streamed"] = dump_document(load_document(packed), encoding="cprun")
        buf = io.BytesIO()
        write_document(run, buf, encoding="msgpack")
        out["writer-msgpack"] = buf.getvalue()
    try:
        raw = json.dumps(doc, allow_nan=False).encode()
    except (TypeError, ValueError):
        return out  # bytes values: JSON cannot carry them
    out["json"] = raw
    out["json-strict"] = parse_document(document._strict_json(raw))
    buf = io.BytesIO()
    write_document(run, buf, encoding="json")
    out["writer-json"] = buf.getvalue()
    return out


def _seq_break(doc: dict[str, Any]) -> None:
    if doc["tokens"]:
        doc["tokens"][-1]["seq"] += 5


#: Changes of R (the recording's own conditions), each making an R-side row fire.
R_MUTATIONS: dict[str, Any] = {
    "unsealed": lambda d: d.update(ledger_sealed=False),
    "replay_tag": lambda d: d.update(provenance_tags=[*d["provenance_tags"], "replay:1"]),
    "seq_break": _seq_break,
    "live": lambda d: d["tokens"][0].update(provenance="live") if d["tokens"] else None,
    "unpinned": lambda d: d["observations"][0].update(pinned_at=None),
    "harness": lambda d: d.update(harness_accesses=["r-side"]),
    "no_mode": lambda d: d.update(mode=None),
}


@PROPERTY
@given(
    clean=recordings(),
    names=st.lists(st.sampled_from(sorted(MUTATIONS)), max_size=4),
    r_names=st.lists(st.sampled_from(sorted(R_MUTATIONS)), max_size=2),
)
def test_every_input_path_gives_the_same_decision(
    clean: dict[str, Any], names: list[str], r_names: list[str]
) -> None:
    p = mutated(clean, names)
    r = copy.deepcopy(clean)
    for name in r_names:
        R_MUTATIONS[name](r)
    expected = _key(validate(r, p))
    for r_name, r_form in _forms(r).items():
        assert _key(validate(r_form, p)) == expected, f"R as {r_name}"
    for p_name, p_form in _forms(p).items():
        assert _key(validate(r, p_form)) == expected, f"P as {p_name}"


# -- the store: a recorded R by checkpoint id --------------------------------------


def _record(store: Store, doc: dict[str, Any], bulk: bool) -> tuple[str, dict[str, Any]]:
    """Record ``doc`` (payload digests become the store's) and return the id and R."""
    run_id = f"{doc['run_id']}-{uuid.uuid4().hex[:8]}"  # one store serves every example
    rec = store.recorder(run_id, branch="main")
    r = json.loads(json.dumps({**doc, "mode": None}, default=lambda b: b.hex()))
    r["run_id"] = run_id
    obs = []
    for i, o in enumerate(doc["observations"]):
        payload = f"obs{i}:{o['payload_digest']}".encode()
        obs.append((o["step"], f"src-{o['source']}", payload, o["pinned_at"]))
        r["observations"][i].update(
            source=f"src-{o['source']}", payload_digest=bytes(digest(payload)).hex()
        )
    effects = []
    for i, e in enumerate(doc["effects"]):
        payload = f"eff{i}".encode()
        effects.append((f"t-{e['target']}", payload))
        r["effects"][i].update(
            target=f"t-{e['target']}", payload_digest=bytes(digest(payload)).hex()
        )
    tokens = [(t["kind"], t["value"]) for t in doc["tokens"]]
    r["tokens"] = [dict(t) for t in doc["tokens"]]  # values as given (bytes kept)
    if bulk:
        rec.observe_many(obs)
        rec.effect_many(effects)
        if tokens:
            rec.tokens(tokens)
    else:
        for step, source, payload, pinned in obs:
            rec.observe(step, source, payload, pinned_at=pinned)
        for target, payload in effects:
            rec.effect(target, payload)
        for kind, value in tokens:
            rec.token(kind, value)
    for node in doc["call_graph"]:
        rec.decision(node["step"], dict(node))
    if doc["transcript_digest"] is not None:
        rec.transcript(doc["transcript_digest"].encode())
    cid = rec.checkpoint(doc["step"], {"k": 1}, tags=doc.get("provenance_tags", []))
    rec.close()
    with store.read(cid) as cp:
        r["state_digest"] = cp.manifest.state_digest
        r["transcript_digest"] = cp.manifest.transcript_digest
    r.pop("mode")
    return cid, r


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    doc=recordings(),
    names=st.lists(st.sampled_from(sorted(MUTATIONS)), max_size=3),
    bulk=st.booleans(),
)
def test_a_stored_recording_decides_as_its_document(
    store: Store, doc: dict[str, Any], names: list[str], bulk: bool
) -> None:
    try:
        cid, r = _record(store, doc, bulk)
    except InvalidInputError:
        return  # a name the recorder refuses (blank source...): not a run it holds
    p = mutated({**r, "mode": "strict"}, names)
    by_doc = validate(r, p)
    by_id = validate(cid, p, store=store, record=False)
    assert _key(by_id) == _key(by_doc)
    if not names:
        assert by_id.verdict is Verdict.ACCEPT


@pytest.mark.parametrize("field", ["source", "target", "kind", "provenance", "pinned_at"])
def test_a_replay_differing_only_in_an_identity_field_never_accepts(
    store: Store, field: str
) -> None:
    doc = {
        "format": 1,
        "run_id": "run-9",
        "step": 5,
        "state_digest": "x",
        "observations": [{"step": 1, "source": "cfg", "payload_digest": "p", "pinned_at": 1.0}],
        "tokens": [{"seq": 0, "kind": "tool", "value": 7, "provenance": "recorded"}],
        "call_graph": [{"step": 1, "node": "n"}],
        "transcript_digest": "t",
        "effects": [{"seq": 0, "target": "db", "payload_digest": "e"}],
        "ledger_sealed": True,
    }
    cid, r = _record(store, doc, bulk=False)
    p = {**r, "mode": "strict"}
    assert validate(cid, p, store=store, record=False).verdict is Verdict.ACCEPT
    p = json.loads(json.dumps(p))
    if field == "source":
        p["observations"][0]["source"] += "'"
    elif field == "target":
        p["effects"][0]["target"] += "'"
    elif field == "kind":
        p["tokens"][0]["kind"] = "env"
    elif field == "provenance":
        p["tokens"][0]["provenance"] = "live"
    else:
        p["observations"][0]["pinned_at"] = None
    for form in _forms(p).values():
        assert validate(cid, form, store=store, record=False).verdict is not Verdict.ACCEPT
