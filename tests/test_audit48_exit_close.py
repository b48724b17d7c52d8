"""Audit 48: an atexit close whose own checkpoints are in a daemon's commit that never ends.

audit47 bounded a close's wait for other threads' commits once the main thread has ended
(5 s, then OutcomeUnknownError and the close goes on), so a daemon's commit that never
ends (its map growth waiting on a daemon's read) no longer kept the process from exiting.
Only the wait after the close's own flush was bounded: when the closing thread's own
checkpoints were in that daemon's batch, the flush itself waited for them
(BatchOwners.wait_mine, unbounded until the exit flush sets its bound, which runs after
atexit) and the process never exited. Now that wait is bounded as well (fails before).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from test_audit47_close_drain import _ATEXIT_CLOSE_WHILE_A_COMMIT_NEVER_ENDS

#: audit47's script, the main thread's checkpoint queued before the daemon's flush (which
#: takes the whole queue: the main thread's checkpoint is in its batch).
_SCRIPT = _ATEXIT_CLOSE_WHILE_A_COMMIT_NEVER_ENDS.replace(
    'env, rd = st.backend.env, st.recorder("d")\n',
    'env, rd = st.backend.env, st.recorder("d")\nst.recorder("m").checkpoint(0, {"m": 0})\n',
)


def test_an_atexit_close_of_a_thread_in_a_stuck_commit_lets_the_process_exit(
    tmp_path: Path,
) -> None:
    assert _SCRIPT != _ATEXIT_CLOSE_WHILE_A_COMMIT_NEVER_ENDS
    try:
        done = subprocess.run(
            [sys.executable, "-c", _SCRIPT, str(tmp_path / "s")],
            check=False,
            capture_output=True,
            text=True,
            timeout=120,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the process never exited: {exc.stdout!r}")  # before
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["growing", "True", "OutcomeUnknownError"]
