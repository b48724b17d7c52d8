"""audit56: sides swapped, and the stored side cannot be read.

``validate(replay_run, checkpoint_id, store=...)`` with R declaring a replay mode and P
a stored checkpoint is an InvalidInputError (docs/decision-table.md): judged the other
way round, the replay would be taken for the recording. audit54 made a side that is read
list what it shows alone when the other cannot be read, but the swap guard looked only
when P *was* read: a swapped call whose checkpoint id names nothing (or a damaged
checkpoint) was judged backwards. The replay's ``best_effort`` mode became "the
recording declares itself a best_effort replay" (a QUARANTINE-level finding about the
recording), and the recorded decision quarantined the replay's run as if it were the
recording's branch.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_decision_support import clean_doc

from cpstore.decision.validate import validate
from cpstore.errors import InvalidInputError
from cpstore.store.facade import open as open_store

MISSING = "0" * 32


@pytest.mark.parametrize("mode", ["strict", "best_effort"])
def test_a_swapped_call_is_refused_when_the_checkpoint_cannot_be_read(
    tmp_path: Path, mode: str
) -> None:
    replay = clean_doc(mode=mode, ledger_sealed=False)
    with open_store(tmp_path / "s") as store:
        before = len(list(store.audit_records()))
        with pytest.raises(InvalidInputError, match="swapped"):
            validate(replay, MISSING, store=store)
        assert len(list(store.audit_records())) == before  # nothing recorded for the gates


def test_a_recording_document_against_a_missing_replay_is_still_a_decision(
    tmp_path: Path,
) -> None:
    # A recording document declares no replay mode: not swapped, judged as audit54 does.
    recording = clean_doc(ledger_sealed=False)
    del recording["mode"]
    with open_store(tmp_path / "s") as store:
        d = validate(recording, MISSING, store=store, record=False)
    assert {f.code.value for f in d.findings} == {"INTEGRITY", "LEDGER_UNSEALED"}
