"""Identity fields in validate: a replay's run id and step are compared exactly (hunt100).

What held, kept as tests: two run ids are the same run only when they are the same text
(NFC against NFD of one name, case, trailing whitespace, a zero-width space, a huge id: a
RUN_MISMATCH, never folded into an ACCEPT) whichever way the documents arrive (a mapping,
JSON bytes, msgpack bytes, a stored checkpoint); a step or run id of another type (``True``,
``1.0``, ``"1"``, ``None``, bytes, an int id) is bad input, never read as the value it
equals in Python; a duplicate key in a JSON object or msgpack map is refused; and a field
of identity found only in metadata changes nothing.
"""

from __future__ import annotations

import dataclasses
import json
import unicodedata
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cpstore
from cpstore.errors import CpstoreError
from cpstore.run.document import dump_document, parse_document

_DIGEST = "ab" * 16


def _doc(run_id: Any = "run-1", step: Any = 1, **extra: Any) -> dict[str, Any]:
    return {
        "format": 1,
        "run_id": run_id,
        "step": step,
        "state_digest": _DIGEST,
        "tokens": [{"seq": 0, "kind": "rng", "value": 0.5, "provenance": "recorded"}],
        "observations": [{"step": 1, "source": "cfg", "payload_digest": _DIGEST, "pinned_at": 1.0}],
        "call_graph": [{"step": 1, "node": "n"}],
        "transcript_digest": _DIGEST,
        "effects": [],
        "ledger_sealed": True,
        "harness_accesses": [],
        "provenance_tags": [],
        "mode": "strict",
        **extra,
    }


def _codes(decision: cpstore.Decision) -> set[str]:
    return {str(f.code.value) for f in decision.findings}


def _as(form: str, doc: dict[str, Any]) -> Any:
    if form == "mapping":
        return doc
    return dump_document(parse_document(doc), encoding=form)


def test_the_base_pair_is_an_accept() -> None:
    assert cpstore.validate(_doc(), _doc()).verdict is cpstore.Verdict.ACCEPT


_PIECES = ["a", "A", "\u00e9", "e\u0301", " ", "\u200b", "\u00a0", "\u00df", "ss"]
_NAMES = st.lists(st.sampled_from(_PIECES), min_size=1, max_size=6).map("".join)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=_NAMES, b=_NAMES, form=st.sampled_from(["mapping", "json", "msgpack"]))
def test_run_ids_are_one_run_only_when_they_are_the_same_text(a: str, b: str, form: str) -> None:
    decision = cpstore.validate(_as(form, _doc(a)), _as(form, _doc(b)))
    if a == b:
        assert decision.verdict is cpstore.Verdict.ACCEPT
    else:
        assert decision.verdict is cpstore.Verdict.REJECT
        assert "RUN_MISMATCH" in _codes(decision)


@pytest.mark.parametrize(
    ("r", "p"),
    [
        (unicodedata.normalize("NFC", "café"), unicodedata.normalize("NFD", "café")),
        ("Run-1", "run-1"),
        ("run-1", "run-1 "),
        ("run-1", "run-1\u200b"),
        ("x" * 200, "x" * 100_000),
    ],
)
def test_near_equal_run_ids_against_a_stored_recording_are_rejected(
    tmp_path: Path, r: str, p: str
) -> None:
    """R stored, P the strict ReplaySession run of it with only its run id changed."""
    state = {"a": 1}
    with cpstore.open(tmp_path / "s") as store:
        rec = store.recorder(r)
        rec.token("rng", 0.5)
        cid = rec.checkpoint(1, state)
        with store.read(cid) as cp:
            session = cpstore.ReplaySession(cp)
            session.cursor.resolve("rng")
            replayed = session.finish(cpstore.state_digest(state))
        same = cpstore.validate(cid, replayed, store=store, record=False)
        other = dataclasses.replace(replayed, run_id=p)
        moved = cpstore.validate(cid, other, store=store, record=False)
    assert same.verdict is cpstore.Verdict.ACCEPT
    assert moved.verdict is cpstore.Verdict.REJECT
    assert _codes(moved) == {"RUN_MISMATCH"}


@pytest.mark.parametrize("step", [True, 1.0, "1", None, -1, 2**63])
@pytest.mark.parametrize("form", ["mapping", "json", "msgpack"])
def test_a_step_of_another_type_is_bad_input_never_the_value_it_equals(
    step: Any, form: str
) -> None:
    bad = _doc(step=step)
    if form == "json":
        source: Any = json.dumps(bad).encode()
    elif form == "msgpack":
        source = msgpack.packb(bad)
    else:
        source = bad
    with pytest.raises(CpstoreError):
        cpstore.validate(_doc(), source)
    with pytest.raises(CpstoreError):
        cpstore.validate(source, _doc())


@pytest.mark.parametrize("run_id", [1, None, b"run-1", ["run-1"], True])
@pytest.mark.parametrize("form", ["mapping", "json", "msgpack"])
def test_a_run_id_of_another_type_is_bad_input(run_id: Any, form: str) -> None:
    bad = _doc(run_id=run_id)
    if form == "json":
        if isinstance(run_id, bytes):
            pytest.skip("JSON has no bytes")
        source: Any = json.dumps(bad).encode()
    elif form == "msgpack":
        source = msgpack.packb(bad)
    else:
        source = bad
    with pytest.raises(CpstoreError):
        cpstore.validate(_doc(), source)


def test_a_duplicate_run_id_key_is_refused_in_json_and_msgpack() -> None:
    text = json.dumps(_doc())
    twice = text.replace('"run_id": "run-1"', '"run_id": "run-2", "run_id": "run-1"')
    assert twice != text
    with pytest.raises(CpstoreError, match="duplicate"):
        cpstore.validate(_doc(), twice.encode())
    body = msgpack.packb(_doc())
    assert body[0] == 0x80 + len(_doc())  # a fixmap: one more entry fits
    extra = msgpack.packb("run_id") + msgpack.packb("run-2")
    with pytest.raises(CpstoreError, match="duplicate"):
        cpstore.validate(_doc(), bytes([body[0] + 1]) + extra + body[1:])


def test_identity_named_only_in_metadata_changes_nothing(tmp_path: Path) -> None:
    """A run id or step in user metadata is not the checkpoint's: the manifest's decides."""
    with cpstore.open(tmp_path / "s") as store:
        rec = store.recorder("run-1")
        rec.token("rng", 0.5)
        a = rec.checkpoint(1, {"a": 1}, metadata={"run_id": "other", "step": 9})
        rec2 = store.recorder("run-2")
        rec2.token("rng", 0.5)
        b = rec2.checkpoint(1, {"a": 1}, metadata={"run_id": "run-1", "step": 1})
        decision = cpstore.validate(a, b, store=store, record=False)
    assert decision.verdict is cpstore.Verdict.REJECT
    assert "RUN_MISMATCH" in _codes(decision)
