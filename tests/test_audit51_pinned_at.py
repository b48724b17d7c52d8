"""audit51: a replayed read pinned at another time than the recording's is not ACCEPTed.

Seed 000, condition 3: every nondeterministic read "is recorded with an explicit
``pinned_at`` timestamp and replayed from the log rather than re-fetched", and "if
state matches but an observation was re-fetched instead of pinned -> treat as
divergence (unknown), because equivalence cannot be proven" (its sketch digests
``pinned_at`` with the rest, so another pin fails its check too). A read served from
the log carries the log's pin (a ``ReplaySession`` copies it); another pin is a read
fetched and pinned anew: re-fetched, as a null pin is, so UNPINNED_OBSERVATION
(QUARANTINE; the payload digests are equal, so no divergence is proven, and dropping
the pin would not make it lighter). Before audit51 only a null pin counted, so two
pinned reads of one payload at different times were an ACCEPT, on every input path
and against a stored recording.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_decision_support import clean_doc, input_forms, replay_of

from cpstore import dump_document, parse_document, validate
from cpstore.decision.table import FindingCode, Verdict
from cpstore.native.binding import digest
from cpstore.run.model import Observation
from cpstore.store.facade import open as open_store


def _repinned(doc: dict[str, Any], index: int, pin: float) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    out["observations"][index]["pinned_at"] = pin
    return out


@pytest.mark.parametrize("form", ["mapping", "run", "json", "msgpack", "cprun"])
def test_a_read_pinned_at_another_time_quarantines(form: str) -> None:
    r = clean_doc()
    p = _repinned(replay_of(r), 1, 999.0)  # read_config at step 12: recorded pin 101.5
    d = validate(r, input_forms(p)[form])
    assert d.verdict is Verdict.QUARANTINE and not d.evidence and d.releasable
    assert d.codes == {FindingCode.UNPINNED_OBSERVATION}
    f = d.findings[0]
    assert (f.side, f.position, f.unit, f.count) == ("replayed", 12, "step", 1)
    assert (f.expected, f.observed) == (101.5, 999.0)
    assert "pinned at 999.0" in f.message and "101.5" in f.message


def test_the_first_of_unpinned_and_repinned_reads_is_located() -> None:
    r = clean_doc()
    p = _repinned(replay_of(r), 2, 5.0)
    p["observations"][0]["pinned_at"] = 7.0  # step 3: re-pinned, before the null pin
    p["observations"][1]["pinned_at"] = None
    f = validate(r, p).findings[0]
    assert (f.code, f.position, f.count) == (FindingCode.UNPINNED_OBSERVATION, 3, 3)
    assert (f.expected, f.observed) == (100.0, 7.0)
    assert "(1 unpinned, 2 re-pinned)" in f.message


def test_equal_pins_still_accept_and_an_int_pin_is_its_float() -> None:
    r = clean_doc()
    assert validate(r, replay_of(r)).verdict is Verdict.ACCEPT
    r["observations"][0]["pinned_at"] = 100  # the same instant as 100.0
    p = replay_of(r)
    p["observations"][0]["pinned_at"] = 100.0
    assert validate(r, p).verdict is Verdict.ACCEPT


def test_a_null_pin_is_as_before() -> None:
    """A replay's live read (pin null) is UNPINNED_OBSERVATION as before (audit33's retries)."""
    r = clean_doc()
    p = replay_of(r)
    p["observations"][1]["pinned_at"] = None
    d = validate(r, p)
    assert d.codes == {FindingCode.UNPINNED_OBSERVATION} and d.verdict is Verdict.QUARANTINE


def test_against_a_stored_recording(tmp_path: Path) -> None:
    with open_store(tmp_path / "s") as store:
        rec = store.recorder("run-p")
        rec.observe(12, "read_config", b"cfg-v1", pinned_at=101.5)
        rec.decision(12, "read_config")
        cid = rec.checkpoint(12, {"k": 1})
        p = {
            "format": 1,
            "run_id": "run-p",
            "step": 12,
            "state_digest": store.manifest(cid).state_digest,
            "observations": [
                {
                    "step": 12,
                    "source": "read_config",
                    "payload_digest": bytes(digest(b"cfg-v1")).hex(),
                    "pinned_at": 101.5,
                }
            ],
            "tokens": [],
            "call_graph": [{"step": 12, "node": "read_config"}],
            "transcript_digest": None,
            "effects": [],
            "mode": "strict",
        }
        assert validate(cid, p, store=store, record=False).verdict is Verdict.ACCEPT
        d = validate(cid, _repinned(p, 0, 202.0), store=store, record=False)
        assert d.codes == {FindingCode.UNPINNED_OBSERVATION}, d.findings
        assert d.verdict is Verdict.QUARANTINE


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 2),
    st.floats(0, 1e12, allow_nan=False),
    st.sampled_from(["mapping", "json", "msgpack", "cprun"]),
)
def test_any_other_pin_never_accepts(index: int, pin: float, form: str) -> None:
    r = clean_doc()
    p = _repinned(replay_of(r), index, pin)
    d = validate(r, input_forms(p)[form])
    if pin == r["observations"][index]["pinned_at"]:
        assert d.verdict is Verdict.ACCEPT
    else:
        assert d.verdict is Verdict.QUARANTINE
        assert d.codes == {FindingCode.UNPINNED_OBSERVATION}


def test_an_int_pin_in_a_python_run_compares_as_the_float_every_path_holds() -> None:
    """A Run built in Python keeps an int pin; a document (and the store) hold its float.
    2**53 + 1 pins the float 2**53: the same pin, whatever path R or P takes."""
    r = clean_doc()
    r["observations"][0]["pinned_at"] = float(2**53)
    p = parse_document(replay_of(r))
    obs = (Observation(3, "clock", "c3", 2**53 + 1), *p.observations[1:])
    p_int = dataclasses.replace(p, observations=obs)
    assert validate(r, p_int).verdict is Verdict.ACCEPT
    assert validate(r, dump_document(p_int, encoding="json")).verdict is Verdict.ACCEPT
    r_int = dataclasses.replace(parse_document(r), observations=obs)
    assert validate(r_int, replay_of(r)).verdict is Verdict.ACCEPT
