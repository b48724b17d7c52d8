"""A commit that reported an error, read back after another process swept its checkpoint.

The txn committed, then (before this process read the store back) another process reset
the branch back to the head the txn expected, released the moved-off checkpoint and ran
gc, which swept it (leaving its tombstone). The read-back sees the head where the txn
expected it and the checkpoint not stored: that must read "cannot tell"
(OutcomeUnknownError), never "not stored" (a caller retrying would commit it a second time
over the reset; one giving up would take a stored write for lost).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from test_group_commit_errors import fail_commits

from cpstore.errors import OutcomeUnknownError, StoreError
from cpstore.store.facade import open as open_store

#: In another process: reset run/main back to argv[2], release what the reset retained,
#: gc; prints the ids gc removed.
RESET_AND_SWEEP = """
import sys
from cpstore.store.facade import open as open_store
with open_store(sys.argv[1]) as st:
    st.reset_ref("run", "main", sys.argv[2], expected_old=st.ref("run"), operator="ops",
                 reason="undo")
    for cid in list(st.retained()):
        st.release_retained(cid, operator="ops", reason="sweep it")
    report = st.gc(keep_last=10)
    print(list(report.checkpoints))
"""


@pytest.mark.parametrize("durability", ["sync", "none"])
def test_a_landed_commit_reset_away_and_swept_by_another_process_reads_cannot_tell(
    tmp_path: Path, durability: str
) -> None:
    """The commit landed, another process reset the branch back and gc swept the
    checkpoint before the read-back: the writer gets OutcomeUnknownError, not "not stored"."""
    path = tmp_path / "s"
    with open_store(path, durability=durability) as st:  # type: ignore[arg-type]
        rec = st.recorder("run")
        first = rec.checkpoint(0, {"v": 0})
        swept: list[str] = []

        def sweep_elsewhere() -> None:
            out = subprocess.run(
                [sys.executable, "-c", RESET_AND_SWEEP, str(path), first],
                capture_output=True,
                text=True,
                timeout=120,
                check=True,
            ).stdout
            swept.append(out)

        fail_commits(st, lands=True, between=sweep_elsewhere)
        with pytest.raises(StoreError) as info:
            rec.checkpoint(1, {"v": 1})
        assert isinstance(info.value, OutcomeUnknownError), repr(info.value)
        assert swept and swept[0].strip() not in ("", "[]"), swept  # gc did sweep it
        assert st.ref("run") == first  # nothing committed again over the reset
        assert len(st.history("run")) == 1
