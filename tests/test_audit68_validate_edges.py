"""audit68: edges of ``validate`` where a wrong ACCEPT could hide.

Each test is a probe of the decision table (docs/decision-table.md) at an input
edge: how a side is named, how identity fields and logs compare, and whether the
native token kernels and the pure-Python reference give the same decision.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import struct
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgpack
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from test_decision_cli import cli
from test_decision_support import clean_doc, colliding_kinds, replay_of, stored_replay

from cpstore.cli import main as cli_main
from cpstore.decision import token_checks
from cpstore.decision.gates import sign_off
from cpstore.decision.table import FindingCode, Verdict
from cpstore.decision.validate import validate
from cpstore.errors import InvalidInputError, ReplayDivergenceError
from cpstore.native import binding, ingest_reference, reference
from cpstore.native.canonical import encode_value
from cpstore.native.records import kind_code, pack_token
from cpstore.replay.cursor import ReplayCursor
from cpstore.replay.guards import LedgerGuard
from cpstore.replay.session import ReplaySession
from cpstore.run.document import dump_document, load_document, parse_document
from cpstore.run.model import Effect, Observation, PackedTokens, ReplayMode, Run, Token
from cpstore.store.facade import open as open_store

# -- naming a side: 32 hex characters are always an id ----------------------------


def _store_with_a_checkpoint(path: Path) -> str:
    with open_store(path) as store:
        rec = store.recorder("agent")
        rec.token("rng", 1)
        return rec.checkpoint(1, {"memory": "x"})


def test_an_uppercase_id_names_the_checkpoint_never_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A str of 32 hex characters is a checkpoint id in either case: a file in the working
    directory named like the id never stands in for the recording. Before audit68 only
    lowercase hex was an id, so ``validate(cid.upper(), P, store=)`` read a file named so
    as R and gave an ACCEPT (standing "evidence") about a document, not the checkpoint."""
    cid = _store_with_a_checkpoint(tmp_path / "s")
    monkeypatch.chdir(tmp_path)
    doc = clean_doc()
    (tmp_path / cid.upper()).write_text(json.dumps(doc))  # planted beside the caller
    with open_store(tmp_path / "s") as store:
        d = validate(cid.upper(), replay_of(doc), store=store, record=False)
    assert d.recorded.checkpoint_id == cid
    assert d.verdict is Verdict.REJECT  # the checkpoint is not the planted document
    with pytest.raises(InvalidInputError, match="needs a store"):
        validate(cid.upper(), replay_of(doc))


def test_the_cli_reads_an_uppercase_id_as_the_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``cpstore validate`` too: README and decision-table.md say 32 hex characters are
    always an id (``./NAME`` for a file named like one); an uppercase id with a file of
    that name beside it was read as the file (ACCEPT, exit 0)."""
    cid = _store_with_a_checkpoint(tmp_path / "s")
    monkeypatch.chdir(tmp_path)
    doc = clean_doc()
    (tmp_path / cid.upper()).write_text(json.dumps(doc))
    (tmp_path / "p.json").write_text(json.dumps(replay_of(doc)))
    code, out = cli([cid.upper(), "p.json", "--store", "s", "--json"])
    body = json.loads(out)
    assert body["recorded"]["checkpoint_id"] == cid
    assert code == 10 and body["verdict"] == "REJECT"
    code, out = cli([f"./{cid.upper()}", "p.json", "--json"])  # the documented way to a file
    assert code == 0 and json.loads(out)["verdict"] == "ACCEPT"


# -- the native token kernels and the pure-Python reference decide alike ----------

_KIND_A, _KIND_B = colliding_kinds()  # two names, one hashed code
_CODE_A = kind_code(_KIND_A)
_CODE_C = kind_code("custom")
_DIGESTS = [bytes([i]) * 16 for i in range(3)]


@st.composite
def _token_logs(draw: st.DrawFn) -> tuple[bytes, bytes]:
    """R's records and P's: P a copy of R with a few records changed, cut or extended."""
    n = draw(st.integers(0, 12))
    rows = [
        [
            draw(st.sampled_from([i, i, i, i + 1, 0])),
            draw(st.sampled_from([1, 2, 3, 4, _CODE_A, _CODE_C])),
            draw(st.sampled_from([1, 1, 1, 2])),
            draw(st.sampled_from(_DIGESTS)),
        ]
        for i in range(n)
    ]
    p_rows = [list(row) for row in rows]
    for _ in range(draw(st.integers(0, 3))):
        what = draw(st.sampled_from(["seq", "kind", "prov", "value", "cut", "add"]))
        if what == "add" or not p_rows:
            p_rows.append([len(p_rows), 1, 1, _DIGESTS[0]])
            continue
        i = draw(st.integers(0, len(p_rows) - 1))
        if what == "cut":
            del p_rows[i:]
        else:
            field = ("seq", "kind", "prov", "value").index(what)
            p_rows[i][field] = draw(
                [
                    st.integers(0, 20),
                    st.sampled_from([1, 2, _CODE_A, _CODE_C]),
                    st.sampled_from([1, 2]),
                    st.sampled_from(_DIGESTS),
                ][field]
            )
    return _pack(rows), _pack(p_rows)


def _pack(rows: list[list[Any]]) -> bytes:
    return b"".join(pack_token(s, k, p, d) for s, k, p, d in rows)


def _decision_key(r: Run, p: Run) -> Any:
    d = validate(r, p)
    return d.verdict, d.fidelity, [f.to_dict() for f in d.findings]


@settings(max_examples=300, deadline=None)
@given(
    logs=_token_logs(),
    p_names=st.sampled_from(["same", "other", "none"]),
)
def test_native_and_reference_token_kernels_give_the_same_decision(
    logs: tuple[bytes, bytes], p_names: str
) -> None:
    """validate over the native kernels (first_divergence, scan_tokens, hashed_kinds, the
    little-endian kind column) and over the pure-Python reference (and the struct path of
    a big-endian host, and a hashed-kind cap of 1) gives the same decision, finding for
    finding, for any pair of well-formed logs: seqs broken, live tokens, one record
    changed in any field, a prefix, an extension, and equal hashed codes named alike,
    differently (two names with one code) or not at all."""
    r_recs, p_recs = logs
    r_names = {_CODE_A: _KIND_A, _CODE_C: "custom"}
    names = {
        "same": dict(r_names),
        "other": {_CODE_A: _KIND_B, _CODE_C: "custom"},
        "none": {_CODE_C: "custom"},
    }[p_names]
    r = Run("run", 3, "s", tokens=PackedTokens(r_recs, kind_names=r_names), ledger_sealed=True)
    p = Run("run", 3, "s", tokens=PackedTokens(p_recs, kind_names=names), mode=ReplayMode.STRICT)
    native = _decision_key(r, p)

    # The oracle, from the table: a record differing in seq, kind or value, a count
    # difference, or a hashed code R uses that P names otherwise, is a REJECT; else a
    # live token (either side) or a broken seq in R is a QUARANTINE; else ACCEPT.
    def compared(recs: bytes) -> list[bytes]:
        return [recs[i : i + 12] + recs[i + 16 : i + 32] for i in range(0, len(recs), 32)]

    r_codes = {int.from_bytes(r_recs[i + 8 : i + 12], "little") for i in range(0, len(r_recs), 32)}
    diverged = compared(r_recs) != compared(p_recs) or (p_names != "same" and _CODE_A in r_codes)
    unverified = any(recs[i + 12] != 1 for recs in logs for i in range(0, len(recs), 32)) or any(
        int.from_bytes(r_recs[i : i + 8], "little") != i // 32 for i in range(0, len(r_recs), 32)
    )
    want = Verdict.REJECT if diverged else Verdict.QUARANTINE if unverified else Verdict.ACCEPT
    assert native[0] is want
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(token_checks, "first_divergence", reference.first_divergence)
        mp.setattr(token_checks, "scan_tokens", reference.scan_tokens)
        mp.setattr(
            token_checks,
            "hashed_kinds",
            lambda recs: ingest_reference.hashed_kinds(bytes(recs), 256),
        )
        mp.setattr(token_checks, "sys", SimpleNamespace(byteorder="big"))
        assert _decision_key(r, p) == native
        mp.setattr(token_checks, "hashed_kinds", lambda recs: binding.hashed_kinds(recs, cap=1))
        assert _decision_key(r, p) == native


# -- a Run's fields are compared as their values, not by their own __eq__ ----------


class _LooseStr(str):
    """A str subclass whose comparisons say "equal" to any str (a case-folding id type
    gone wrong) and whose ``startswith`` never matches: its text is what counts."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str)

    def __ne__(self, other: object) -> bool:
        return not isinstance(other, str)

    __hash__ = str.__hash__

    def startswith(self, *args: Any, **kwargs: Any) -> bool:
        return False


class _LooseInt(int):
    """An int subclass equal to any int."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, int)

    def __ne__(self, other: object) -> bool:
        return not isinstance(other, int)

    __hash__ = int.__hash__


def _loosen_p(run: Run, field: str) -> Run:
    """``run`` with ``field`` changed, held in a subclass whose __eq__ hides the change."""
    if field == "run_id":
        return dataclasses.replace(run, run_id=_LooseStr(run.run_id + "'"))
    if field == "step":
        return dataclasses.replace(run, step=_LooseInt(run.step + 1))
    if field == "state_digest":
        return dataclasses.replace(run, state_digest=_LooseStr(run.state_digest + "'"))
    if field == "transcript_digest":
        return dataclasses.replace(run, transcript_digest=_LooseStr("other"))
    if field in ("obs_step", "obs_source", "obs_payload"):
        o = run.observations[0]
        changed = {
            "obs_step": Observation(_LooseInt(o.step + 1), o.source, o.payload_digest, o.pinned_at),
            "obs_source": Observation(o.step, _LooseStr("other"), o.payload_digest, o.pinned_at),
            "obs_payload": Observation(o.step, o.source, _LooseStr("other"), o.pinned_at),
        }[field]
        return dataclasses.replace(run, observations=(changed, *run.observations[1:]))
    if field in ("effect_seq", "effect_target", "effect_payload"):
        e = run.effects[0]
        changed_e = {
            "effect_seq": Effect(_LooseInt(e.seq + 7), e.target, e.payload_digest),
            "effect_target": Effect(e.seq, _LooseStr("other"), e.payload_digest),
            "effect_payload": Effect(e.seq, e.target, _LooseStr("other")),
        }[field]
        return dataclasses.replace(run, effects=(changed_e, *run.effects[1:]))
    assert field == "kind_name"  # the other name of one hashed code, held loosely
    names = {code: _LooseStr(_KIND_B) for code in run.tokens.kind_names}
    tokens = PackedTokens(run.tokens.records, values=run.tokens.values, kind_names=names)
    return dataclasses.replace(run, tokens=tokens)


_LOOSE_FIELDS = [
    "run_id",
    "step",
    "state_digest",
    "transcript_digest",
    "obs_step",
    "obs_source",
    "obs_payload",
    "effect_seq",
    "effect_target",
    "effect_payload",
    "kind_name",
]


@pytest.mark.parametrize("field", _LOOSE_FIELDS)
def test_a_replay_run_decides_as_its_document_whatever_its_fields_eq_says(field: str) -> None:
    """A ``Run`` built in Python (a ``ReplaySession``'s ``finish(state_digest)`` takes the
    caller's str) is compared on its values, as its document is: a str or int subclass
    whose ``__eq__`` calls every value equal does not hide a changed run id, step, state,
    transcript, observation, effect or kind name. Before audit68 each was an ACCEPT
    through the Run and a REJECT or QUARANTINE through its document."""
    doc = clean_doc()
    doc["tokens"].append(
        {"seq": len(doc["tokens"]), "kind": _KIND_A, "value": 0, "provenance": "recorded"}
    )
    r = parse_document(doc)
    p = _loosen_p(parse_document(replay_of(doc)), field)
    as_document = validate(r, load_document(dump_document(p, encoding="msgpack")))
    d = validate(r, p)
    assert as_document.verdict is not Verdict.ACCEPT
    assert [f.to_dict() for f in d.findings] == [f.to_dict() for f in as_document.findings]
    assert d.verdict is as_document.verdict


def test_a_recording_replay_tag_counts_whatever_its_startswith_says() -> None:
    """R's provenance tags are read as text: a tag object whose own ``startswith`` denies
    the ``replay:`` prefix is still a REPLAY_OF_REPLAY (before audit68: an ACCEPT)."""
    doc = clean_doc()
    r = dataclasses.replace(parse_document(doc), provenance_tags=(_LooseStr("replay:abc"),))
    d = validate(r, replay_of(doc))
    assert d.codes == {FindingCode.REPLAY_OF_REPLAY} and d.verdict is Verdict.REJECT


# -- a finding shows a value as every input path holds it -----------------------------


@pytest.mark.parametrize("value", [-0.0, (1, -0.0), {"b": 1, "a": (2,)}])
def test_a_finding_shows_values_alike_from_a_mapping_and_a_packed_run_file(value: Any) -> None:
    """Values equal in the canonical encoding (``-0.0`` and ``0.0``, a tuple and a list,
    two key orders) are shown alike in a finding, whichever path brought the run: a
    mapping keeps the caller's object, a ``.cprun`` file (or the store) the canonical
    one. Before audit68 a TOKEN_MISMATCH, CALL_GRAPH_MISMATCH or HARNESS_PERTURBATION
    showed ``-0.0`` from the mapping and ``0.0`` from the file, so the same decision
    differed by input path (test_audit31_paths_agree drew it: a flaky failure)."""
    doc = clean_doc(tokens=1)
    doc["tokens"][0]["value"] = value
    doc["call_graph"][0]["detail"] = value
    p = replay_of(doc, harness_accesses=[value])
    p["tokens"][0]["kind"] = "clock"
    p["call_graph"][0]["node"] = "other"
    d_map = validate(doc, p)
    assert {FindingCode.TOKEN_MISMATCH, FindingCode.CALL_GRAPH_MISMATCH} <= d_map.codes
    forms: list[tuple[Any, Any]] = [
        (dump_document(parse_document(doc), encoding="cprun"), p),
        (doc, dump_document(parse_document(p), encoding="cprun")),
    ]
    for r_form, p_form in forms:
        d = validate(r_form, p_form)
        assert [f.to_dict() for f in d.findings] == [f.to_dict() for f in d_map.findings]


# -- a replay cursor keeps every refused request, a colliding kind name too ----------


@pytest.mark.parametrize("asked", ["other name, one code", "clock"])
def test_a_swallowed_request_for_a_colliding_kind_stays_in_the_replay(
    tmp_path: Path, asked: str
) -> None:
    """A replay that asks, at a token recorded as kind A, for kind B (another name with
    A's 31-bit code) asked for another kind: the cursor refuses it as it refuses any kind
    mismatch (ReplayDivergenceError at that seq) and keeps the refused request in P, so a
    retry loop that swallows the refusal and asks for A gets a REJECT located at that
    token, as it does for a kind with its own code. Before audit68 the collision raised
    InvalidInputError and kept nothing: the swallowed request vanished and P, equal to R,
    was an ACCEPT."""
    wanted = _KIND_B if asked == "other name, one code" else asked
    with open_store(tmp_path / "s") as store:
        rec = store.recorder("agent")
        rec.token("rng", 1)
        rec.token(_KIND_A, "x")
        rec.token("rng", 2)
        cid = rec.checkpoint(1, {"memory": "x"})
        with store.read(cid) as cp:
            session = ReplaySession(cp)
            session.cursor.resolve("rng")
            with pytest.raises(ReplayDivergenceError) as refused:
                session.cursor.resolve(wanted)
            assert refused.value.where == "seq=1"
            assert session.cursor.resolve(_KIND_A) == "x"  # the retry the loop makes
            session.cursor.resolve("rng")
            p = session.finish(cp.manifest.state_digest)
        d = validate(cid, p, store=store, record=False)
    assert d.verdict is Verdict.REJECT
    first = d.divergences["tokens"]
    assert (first.code, first.position) == (FindingCode.TOKEN_MISMATCH, 1)


# -- token values: equal exactly when their canonical encodings are -------------------


def _as_form(doc: dict[str, Any], path: str) -> Any:
    if path == "msgpack":
        return msgpack.packb(doc, use_bin_type=True)
    if path == "cprun":
        return dump_document(parse_document(doc), encoding="cprun")
    return doc


_NEAR: list[tuple[Any, Any]] = [
    (0.0, -0.0),  # one canonical float (docs/format.md): equal
    (math.nan, float("-nan")),  # every NaN is one canonical NaN: equal
    ([1, [2]], (1, (2,))),  # a tuple is a list: equal
    ({"a": 1, "b": 2}, {"b": 2, "a": 1}),  # key order: equal
    (b"x", bytearray(b"x")),  # bytes-likes are bin: equal
    (1, 1.0),
    (1, True),
    (0, False),
    (None, False),
    (None, ""),
    ("", b""),
    ("x", b"x"),
    ("\u00e9", "e\u0301"),  # NFC and NFD: different text
    (2**64, 2**64 + 1),
    (2**63, -(2**63)),
    (-(2**63) - 1, -(2**63)),
    ({1: "a"}, {1.0: "a"}),
    ({"k": None}, {}),
    ([None], []),
    ([], {}),
    (1.5, 1.5000000000000002),
]


@settings(max_examples=120, deadline=None)
@given(
    pair=st.sampled_from(_NEAR),
    swap=st.booleans(),
    at=st.integers(0, 5),
    path=st.sampled_from(["mapping", "msgpack", "cprun", "stored"]),
)
def test_a_token_value_differs_exactly_when_its_canonical_encoding_does(
    tmp_path_factory: pytest.TempPathFactory, pair: tuple[Any, Any], swap: bool, at: int, path: str
) -> None:
    """Two values at one token are the same value exactly when their canonical
    encodings are equal ("by type and by value", docs/format.md): 1 and 1.0, 1 and
    True, None and False, str and bytes, NFC and NFD text, 2**64 and 2**64 + 1 are
    REJECTs; -0.0 and 0.0, two NaNs, a tuple and a list, two key orders are one value
    (the documented folds). The same through a mapping, msgpack bytes, a packed run
    file and a recording in the store."""
    a, b = (pair[1], pair[0]) if swap else pair
    wide = any(isinstance(v, int) and not -(2**63) <= v < 2**64 for v in (a, b))
    assume(not (path == "msgpack" and wide))  # msgpack has no such int (run-document.md)
    doc = clean_doc()
    doc["tokens"][at]["value"] = a
    p = replay_of(doc)
    p["tokens"][at]["value"] = b
    same = encode_value(a) == encode_value(b)
    want = Verdict.ACCEPT if same else Verdict.REJECT
    if path == "stored":
        with open_store(tmp_path_factory.mktemp("s") / "s") as store:
            rec = store.recorder(doc["run_id"])
            for t in doc["tokens"]:
                rec.token(t["kind"], t["value"])
            cid = rec.checkpoint(doc["step"], {"m": 1})
            with store.read(cid) as cp:
                r_side: Any = cid
                p["state_digest"] = cp.manifest.state_digest
                p["observations"], p["call_graph"], p["effects"] = [], [], []
                p["transcript_digest"] = None
            d = validate(r_side, p, store=store, record=False)
    else:
        d = validate(_as_form(doc, path), _as_form(p, path))
    assert d.verdict is want, d.findings
    if not same:
        assert [(f.code, f.position) for f in d.findings] == [(FindingCode.TOKEN_MISMATCH, at)]


def test_a_kind_table_entry_that_is_not_a_name_is_left_as_it_is() -> None:
    """Reading a Run's values as plain values leaves what is no str or int alone: a
    hand-built kind table naming an unused code with something else still decides
    (an earlier form of that reading raised TypeError here)."""
    odd: Any = {5: 7}
    r = Run("a", 1, "s", tokens=PackedTokens(b"", kind_names=odd), ledger_sealed=True)
    p = Run("a", 1, "s", tokens=PackedTokens(b"", kind_names=odd), mode=ReplayMode.STRICT)
    assert validate(r, p).verdict is Verdict.ACCEPT


# -- a cursor serves a recording's value alike from memory and from the store ---------

_NEG_NAN = struct.unpack(">d", bytes.fromhex("fff8000000000001"))[0]  # sign and payload set


def test_a_cursor_serves_a_float_as_the_recording_holds_it_on_every_path(tmp_path: Path) -> None:
    """A float the canonical encoding folds (``-0.0``, a NaN with a sign or payload) is
    served to the replay as the recording holds it, ``0.0`` and the canonical NaN, by a
    cursor over an in-memory recording as by one over the store or a loaded file. Before
    audit68 the in-memory cursor served the caller's own object: one recording gave a
    replay ``-0.0`` from a mapping and ``0.0`` from the store (bits compared here)."""
    values = [-0.0, _NEG_NAN, 1.5, "x"]
    doc = clean_doc(tokens=0)
    doc["tokens"] = [
        {"seq": i, "kind": "rng", "value": v, "provenance": "recorded"}
        for i, v in enumerate(values)
    ]

    def served(cursor: ReplayCursor) -> list[Any]:
        out = [cursor.resolve("rng") for _ in values]
        return [struct.pack(">d", v).hex() if isinstance(v, float) else v for v in out]

    from_mapping = served(ReplayCursor(parse_document(doc).tokens))
    packed = dump_document(parse_document(doc), encoding="msgpack")
    from_file = served(ReplayCursor(load_document(packed).tokens))
    with open_store(tmp_path / "s") as store:
        rec = store.recorder("agent")
        for v in values:
            rec.token("rng", v)
        cid = rec.checkpoint(1, {"m": 1})
        with store.read(cid) as cp:
            from_store = served(ReplayCursor.from_checkpoint(cp))
    assert from_store == ["0000000000000000", "7ff8000000000000", "3ff8000000000000", "x"]
    assert from_mapping == from_store == from_file


def test_a_best_effort_cursor_refuses_a_colliding_kind_too() -> None:
    """In BEST_EFFORT the colliding name is refused as in STRICT (the live source is not
    asked: a live token would carry the recorded kind's code, named as the recorded kind),
    and the refusal is kept in P at its position (decision-table.md, Token kinds)."""
    asked: list[int] = []
    cursor = ReplayCursor(
        PackedTokens.from_tokens([Token(0, _KIND_A, "x")]), mode=ReplayMode.BEST_EFFORT
    )
    with pytest.raises(ReplayDivergenceError, match="hashed code"):
        cursor.resolve(_KIND_B, live=lambda: asked.append(1))
    assert asked == []
    kept = cursor.replayed()
    assert len(kept) == 1 and kept.info(0).seq == 0 and kept.values == [None]


# -- policy questions (behaviour pinned as documented; see the audit68 report) --------


def test_policy_two_empty_state_digests_are_equal_states() -> None:
    """POLICY QUESTION. run-document.md: digests are "opaque strings compared exactly ...
    a document may use any string as long as R and P agree", so ``""`` on both sides is
    state equality (seed 000's condition 1) though it proves nothing about either state,
    where decision-table.md says two *missing* transcripts are not equal transcripts.
    A stored checkpoint's digest is never empty: only document-to-document validation."""
    doc = clean_doc(state_digest="")
    assert validate(doc, replay_of(doc)).verdict is Verdict.ACCEPT


def test_policy_a_document_ledger_repeating_a_seq_is_accepted() -> None:
    """POLICY QUESTION. TOKEN_SEQUENCE holds R's tokens to seqs 0, 1, 2, ...; nothing holds
    a document's (or a Run's) ledger so (a stored ledger always is). Two entries with one
    seq are one idempotency key (docs/effects.md: ``run:seq``), so an outbox delivers one
    of them; a replay through a LedgerGuard over that ledger mirrors it and is an ACCEPT."""
    doc = clean_doc()
    doc["effects"][1]["seq"] = 0
    r = parse_document(doc)
    guard = LedgerGuard(r.effects, sealed=True)
    for e in r.effects:
        guard.check_digest(e.target, e.payload_digest)
    p = dataclasses.replace(r, effects=guard.attempted, mode=ReplayMode.STRICT)
    assert validate(r, p).verdict is Verdict.ACCEPT


def test_policy_a_replay_that_bypassed_the_ledger_guard_is_accepted(tmp_path: Path) -> None:
    """POLICY QUESTION. "A replay that performed only a prefix of the ledger attempted
    nothing unrecorded" (decision-table.md, Effects): the empty prefix too, so a replay
    whose effects never went through ``session.guard`` (seed 002's orphaned write, made
    outside the guard) is indistinguishable from one that attempted none. Every other
    stream a replay leaves uninstrumented is a finding (no tokens: TOKEN_COUNT; no reads:
    OBSERVATION_MISMATCH; no decisions: CALL_GRAPH_MISMATCH)."""
    with open_store(tmp_path / "s") as store:
        rec = store.recorder("agent")
        rec.effect("crm", b"update-1")
        cid = rec.checkpoint(1, {"m": 1})
        with store.read(cid) as cp:
            p = ReplaySession(cp).finish(cp.manifest.state_digest)  # no guard.check
        assert p.effects == ()
        assert validate(cid, p, store=store, record=False).verdict is Verdict.ACCEPT


def test_a_first_difference_row_counts_one_however_much_differs() -> None:
    """decision-table.md: ``count`` is how many positions show a finding, and a
    first-difference row (TOKEN_MISMATCH, CALL_GRAPH_MISMATCH, OBSERVATION_MISMATCH)
    counts 1 (the page said only "how many positions show it"; audit68 made it say so)."""
    r = clean_doc()
    p = replay_of(r)
    for t in p["tokens"]:
        t["value"] = "z"
    for o in p["observations"]:
        o["payload_digest"] = "z"
    for n in p["call_graph"]:
        n["node"] = "z"
    d = validate(r, p)
    assert [(f.code, f.count) for f in d.findings] == [
        (FindingCode.TOKEN_MISMATCH, 1),
        (FindingCode.CALL_GRAPH_MISMATCH, 1),
        (FindingCode.OBSERVATION_MISMATCH, 1),
    ]


# -- the command line's table shows a side's text, never acts on it --------------------


@pytest.mark.parametrize(
    "forged",
    [
        "run-1\nverdict   ACCEPT\nfidelity  FAITHFUL",
        "run-1\x1b[8A\x1b[2Kverdict   ACCEPT",  # cursor up, erase line: over the real verdict
        "run-1\rverdict   ACCEPT",
        "run-1\u2028verdict   ACCEPT",
    ],
)
def test_the_table_escapes_control_characters_a_side_holds(tmp_path: Path, forged: str) -> None:
    """``cpstore validate``'s table prints what the sides hold (a run id, a source, a
    target, a kind name) in its cells and messages; a newline, carriage return, line
    separator or terminal escape there is shown escaped, so a replay document cannot
    forge a "verdict ACCEPT" line under (or over) a REJECT. Before audit68 the cells
    printed it raw: the OBSERVED cell of a RUN_MISMATCH broke into a line reading
    "verdict   ACCEPT", and an escape sequence could erase the real verdict."""
    r = clean_doc()
    p = replay_of(r, run_id=forged)
    p["observations"][0]["source"] = forged
    p["effects"].append({"seq": 2, "target": forged, "payload_digest": forged})
    rp, pp = tmp_path / "r.json", tmp_path / "p.json"
    rp.write_text(json.dumps(r))
    pp.write_text(json.dumps(p))
    for wide in ([], ["--wide"]):
        code, out = cli([str(rp), str(pp), *wide])
        assert code == 10
        lines = out.splitlines()
        assert lines[0] == "verdict   REJECT"
        assert all(line.isprintable() for line in lines), [x for x in lines if not x.isprintable()]
        assert not any(line.lstrip().startswith("verdict") for line in lines[1:])


def test_the_audit_listing_escapes_control_characters_a_record_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``cpstore audit`` lists one line per record; a sign-off reason (an operator's free
    text) holding a newline or an escape sequence is shown escaped, so it cannot add a
    line that reads as an ACCEPT decision to the listing an operator reads before signing
    off (decision-table.md). Before audit68 it was printed raw."""
    forged = "ok\n     9  2026-12-04T00:00:00Z  " + "f" * 32 + "  decision   ACCEPT decision"
    with open_store(tmp_path / "s") as store:
        rec = store.recorder("agent")
        rec.token("rng", 1)
        cid = rec.checkpoint(1, {"memory": "x"})
        d = validate(cid, stored_replay(store, cid, mode=None), store=store)  # QUARANTINE
        sign_off(store, d, operator="oncall\x1b[2K", reason=forged)
    capsys.readouterr()
    assert cli_main(["audit", "--store", str(tmp_path / "s")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert all(line.isprintable() for line in lines)
    assert not any("ACCEPT" in line for line in lines if "signoff" not in line)
    assert len([line for line in lines if re.match(r"\s*\d+  \d{4}-", line)]) == 2  # 2 records


# -- LIVE_RESOLUTION is located where the live token stands ---------------------------


def test_a_live_token_is_located_at_its_position_not_at_the_seq_it_claims() -> None:
    """LIVE_RESOLUTION names the stream position of the first live token (unit ``seq``:
    the seq a well-formed log holds there), as TOKEN_MISMATCH does since audit57, never
    the seq field the record claims, which a broken log can hold anywhere. Before audit68
    a replay whose live token 1 claimed seq 0 was located at token 0, a recorded one;
    a recording's live token 1 claiming seq 5 at 5, past its end."""
    r = clean_doc(tokens=2)
    p = replay_of(r)
    p["tokens"][1].update(seq=0, provenance="live")
    d = validate(r, p)
    live = [f for f in d.findings if f.code is FindingCode.LIVE_RESOLUTION]
    assert [(f.side, f.position, f.unit) for f in live] == [("replayed", 1, "seq")]
    r2 = clean_doc(tokens=2)
    r2["tokens"][1].update(seq=5, provenance="live")
    d2 = validate(r2, replay_of(r2))
    live = [f for f in d2.findings if f.code is FindingCode.LIVE_RESOLUTION]
    assert sorted((f.side, f.position) for f in live) == [("recorded", 1), ("replayed", 1)]
    (gap,) = [f for f in d2.findings if f.code is FindingCode.TOKEN_SEQUENCE]
    assert gap.position == 1
