"""A cpstore error's own fields survive pickling (a forked command's child relays its error
to the parent; multiprocessing workers): ``ValidationFailedError.decision`` was dropped, so
a QUARANTINE raised in a child became REJECT's exit 10 instead of QUARANTINE's 11 (audit41)."""

from __future__ import annotations

import pickle

from test_decision_support import clean_doc, replay_of

from cpstore.cli.exit_codes import EXIT_QUARANTINE, exit_code_for
from cpstore.decision.table import Verdict
from cpstore.decision.validate import validate
from cpstore.errors import CpstoreError, ValidationFailedError


def test_a_validation_failed_errors_decision_survives_pickling() -> None:
    r = clean_doc()
    decision = validate(r, replay_of(r, mode="best_effort"))
    assert decision.verdict is Verdict.QUARANTINE
    try:
        decision.raise_for_verdict()
    except ValidationFailedError as exc:
        err = exc
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is ValidationFailedError and str(back) == str(err)
    assert back.decision is not None and back.decision.verdict is Verdict.QUARANTINE
    assert exit_code_for(back) == exit_code_for(err) == EXIT_QUARANTINE


def test_an_errors_notes_survive_and_its_fields_stay_its_own() -> None:
    err = CpstoreError("what", where="w", expected=1, got=b"\x00")
    err.add_note("a note")
    back = pickle.loads(pickle.dumps(err))
    assert (back.what, back.where, back.expected, back.got) == ("what", "w", 1, b"\x00")
    assert back.__notes__ == ["a note"]
