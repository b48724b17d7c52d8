"""audit31: a decision the gates act on is never made over unverified store reads.

``validate(..., verify=False)`` skips the hash checks of what R references: an
explicit opt-out for looking. Recorded (the default with ``store=``), its ACCEPT
became the checkpoint's standing decision and the gates acted on it — the
decision record does not say that verification was skipped — so a damaged
checkpoint (INTEGRITY, REJECT, with verification) was resumed from and its
rollback certified. Recording now needs verification.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from stored import edit_raw
from test_decision_support import stored_replay

from cpstore.cli.entry import main
from cpstore.decision.gates import certify_rollback
from cpstore.decision.table import FindingCode, Verdict
from cpstore.decision.validate import validate
from cpstore.errors import InvalidInputError, NotFoundError
from cpstore.store.facade import open as open_store


def _damaged(path: Path) -> str:
    with open_store(path) as store:
        rec = store.recorder("r")
        rec.observe(1, "cfg", b"payload", pinned_at=1.0)
        rec.token("rng", 1)
        cid = rec.checkpoint(1, {"a": "x" * 40, "b": "y" * 40})
        rec.close()
        key = bytes.fromhex(store.manifest(cid).state_parts["b"])
    edit_raw(path, "objects", key, lambda old: old[:5] + bytes([old[5] ^ 0x01]) + old[6:])
    return cid


def test_an_unverified_decision_is_never_recorded(tmp_path: Path) -> None:
    cid = _damaged(tmp_path / "s")
    with open_store(tmp_path / "s") as store:
        p = stored_replay(store, cid)
        checked = validate(cid, p, store=store, record=False)
        assert checked.verdict is Verdict.REJECT and FindingCode.INTEGRITY in checked.codes
        looked = validate(cid, p, store=store, record=False, verify=False)
        assert looked.verdict is Verdict.ACCEPT  # the opt-out, not recorded: allowed
        with pytest.raises(InvalidInputError, match="verif"):
            validate(cid, p, store=store, verify=False)  # was a recorded ACCEPT
        assert not [r for r in store.audit_records() if r.kind == "decision"]
        with pytest.raises(NotFoundError, match="no such decision"):
            certify_rollback(store, cid, looked)  # nothing in the log to certify


def test_the_command_line_refuses_record_with_no_verify(tmp_path: Path) -> None:
    cid = _damaged(tmp_path / "s")
    code = main(["validate", cid, cid, "--store", str(tmp_path / "s"), "--record", "--no-verify"])
    assert code == 3
    assert main(["validate", cid, cid, "--store", str(tmp_path / "s"), "--no-verify"]) == 11
