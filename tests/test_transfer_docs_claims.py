"""What docs/security.md and docs/store.md say push and pull do, held to the code.

docs/security.md said a keyed destination opened without its key "is refused before
anything is copied", unconditionally; the code (and docs/store.md) refuse it only when
a decision is to be carried: with none, the checkpoints land and its log is untouched.
The docs now say so; this pins both halves on the command line.
"""

from __future__ import annotations

from pathlib import Path

import cpstore
from cpstore.cli import main

KEY = bytes(range(32))


def _audit(at: Path) -> tuple[int, bool]:
    with cpstore.open(at, readonly=True, audit_key=KEY) as store:
        return len(list(store.audit_records())), store.verify().ok


def test_a_keyed_destination_without_its_key_takes_a_push_with_no_decision_to_carry(
    tmp_path: Path,
) -> None:
    src_at, dst_at = tmp_path / "src", tmp_path / "dst"
    with cpstore.open(dst_at, audit_key=KEY) as dst:
        dst.append_audit("note", {"n": 1})
        assert dst.audit_keyed
    with cpstore.open(src_at) as src:
        head = src.recorder("r").checkpoint(0, {"a": 1})
    before = _audit(dst_at)
    assert main(["push", str(dst_at), "--store", str(src_at)]) == 0
    with cpstore.open(dst_at, readonly=True) as dst:
        assert dst.ref("r") == head
    assert _audit(dst_at) == before == (1, True)


def test_a_keyed_destination_without_its_key_is_refused_a_decision_to_carry(
    tmp_path: Path,
) -> None:
    src_at, dst_at = tmp_path / "src", tmp_path / "dst"
    with cpstore.open(dst_at, audit_key=KEY):
        pass
    with cpstore.open(src_at) as src:
        cid = src.recorder("r").checkpoint(0, {"a": 1})
        src.append_audit(
            "decision",
            {
                "decision_id": "d1",
                "verdict": "REJECT",
                "findings": [{"code": "STATE_MISMATCH"}],
                "recorded": {"checkpoint_id": cid, "run_id": "r", "branch": "main"},
            },
        )
    assert main(["pull", str(src_at), "--store", str(dst_at)]) == 7
    with cpstore.open(dst_at, readonly=True) as dst:
        assert dst.runs() == []
