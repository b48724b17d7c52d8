"""audit31: inputs that reached ACCEPT (or parsed where the spec refuses) and must not.

Each test names the path it drives (Run constructor, packed run file, streamed
JSON, strict JSON, msgpack) and the verdict or error the spec requires.
"""

from __future__ import annotations

import io
import json
import math
from typing import Any

import pytest
from test_decision_support import clean_doc

from cpstore.decision.table import Verdict
from cpstore.decision.validate import validate
from cpstore.errors import DocumentError, InvalidInputError
from cpstore.native.binding import native_digest
from cpstore.native.canonical import decode_value, encode_value
from cpstore.run.cprun import dump_cprun, parse_cprun
from cpstore.run.document import dump_document, parse_document
from cpstore.run.model import Effect, Observation, ReplayMode, Run
from cpstore.run.writer import write_document


def _replay_of(doc: dict[str, Any]) -> dict[str, Any]:
    return {**doc, "mode": "strict"}


# -- a pin that is not a time ------------------------------------------------------


@pytest.mark.parametrize("pin", [math.nan, math.inf, -math.inf, "never", False, True, b"t"])
def test_run_refuses_an_observation_pin_that_is_not_a_finite_number(pin: Any) -> None:
    # A run document refuses these (pinned_at: finite number or null). A Run built
    # directly took them, and the validator counts anything but None as pinned: a
    # replay engine writing NaN for "not pinned" (pandas' missing value) got ACCEPT.
    with pytest.raises(DocumentError) as err:
        Run("r", 1, "s", observations=(Observation(1, "cfg", "d", pin),))
    assert err.value.where == "observations[0].pinned_at"


@pytest.mark.parametrize("step", [-1, 2**63, True, 1.0, "1"])
def test_run_refuses_an_observation_step_a_document_refuses(step: Any) -> None:
    with pytest.raises(DocumentError) as err:
        Run("r", 1, "s", observations=(Observation(step, "cfg", "d", 1.0),))
    assert err.value.where == "observations[0].step"


@pytest.mark.parametrize("seq", [-1, 2**64, True, 1.0])
def test_run_refuses_an_effect_seq_a_document_refuses(seq: Any) -> None:
    with pytest.raises(DocumentError) as err:
        Run("r", 1, "s", effects=(Effect(seq, "db", "d"),))
    assert err.value.where == "effects[0].seq"


def test_unpinned_read_written_as_nan_is_never_accepted() -> None:
    # The same replay through each path: a document is refused, a packed run
    # file and a Run are refused too, never an ACCEPT.
    r = parse_document(clean_doc())
    p = parse_document(_replay_of(clean_doc()))
    assert validate(r, p).verdict is Verdict.ACCEPT  # the clean pair
    nan_obs = (Observation(12, "read_config", "cfg-v1", math.nan), *p.observations[1:])
    with pytest.raises(DocumentError):
        Run(
            p.run_id,
            p.step,
            p.state_digest,
            tokens=p.tokens,
            observations=nan_obs,
            call_graph=p.call_graph,
            transcript_digest=p.transcript_digest,
            effects=p.effects,
            mode=ReplayMode.STRICT,
        )


def test_packed_run_file_with_a_nan_pin_is_refused() -> None:
    # Build the file bytes from a clean run, then swap the metadata's pin for NaN
    # (re-digested): the loader must refuse it as a document refuses it.
    p = parse_document(_replay_of(clean_doc()))
    raw = bytearray(dump_cprun(p))
    off, size = int.from_bytes(raw[24:32], "little"), int.from_bytes(raw[32:40], "little")
    meta = decode_value(bytes(raw[off : off + size]))
    meta["observations"][0][3] = math.nan
    new = encode_value(meta)
    assert len(new) == size  # a float for a float: the layout stays
    raw[off : off + size] = new
    raw[40:56] = native_digest(new)
    with pytest.raises(DocumentError) as err:
        parse_cprun(bytes(raw))
    assert "pinned_at" in str(err.value.where)


@pytest.mark.parametrize("how", ["dump", "writer"])
def test_a_run_msgpack_cannot_hold_is_an_input_error_not_an_overflow(how: str) -> None:
    # A token value beyond 64 bits (the canonical encoding's big-int ext, which a
    # msgpack document does not carry): was a raw OverflowError (exit 1 in convert).
    doc = clean_doc()
    doc["tokens"][0]["value"] = 2**70
    run = parse_document(doc)
    with pytest.raises(InvalidInputError, match="msgpack"):
        if how == "dump":
            dump_document(run, encoding="msgpack")
        else:
            write_document(run, io.BytesIO(), encoding="msgpack")
    back = parse_document(json.loads(dump_document(run, encoding="json"))).tokens.values
    assert back is not None and back[0] == 2**70  # JSON and cprun carry it
