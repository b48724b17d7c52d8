"""review99: ``copy_store`` of a batched handle refuses a used destination before it
commits the handle's queue, and a failed commit says it came from there.

``copy_to`` commits the handle's queued checkpoints before the copy (so the copy holds
what the handle acknowledged), but a destination that is not a new or empty folder was
refused only after that commit: the refused copy changed the store, and beside a queue
that conflicts (another handle moved its branch) it raised the queue's ConflictError,
the batch dropped, where it refuses InvalidInputError (review98's finding for prune and
delete_run, missed for copies). A commit that fails carries a note naming the copy.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import cpstore
from cpstore.errors import ConflictError, InvalidInputError
from cpstore.store.maintenance import copy_store


def _conflicting(path: str, s: cpstore.Store) -> None:
    rec = s.recorder("r")
    rec.checkpoint(0, {"i": 0})
    s.flush()
    rec.checkpoint(1, {"i": 1})
    with cpstore.open(path) as o:  # another handle moves r/main: the queue conflicts
        o.recorder("r").checkpoint(1, {"moved": True})


@pytest.mark.parametrize("used", ["folder", "file"])
def test_a_refused_copy_commits_nothing(tmp_path: Path, used: str) -> None:
    path, dest = str(tmp_path / "s"), str(tmp_path / "dest")
    if used == "folder":
        os.makedirs(dest)
        Path(dest, "keep").write_text("mine")
    else:
        Path(dest).write_text("mine")
    s = cpstore.open(path, durability="batched", batch_size=1000)
    try:
        _conflicting(path, s)
        with pytest.raises(InvalidInputError, match="new or empty folder"):
            copy_store(s, dest)
        assert s.pending == 1  # still queued: not committed, not dropped
    finally:
        with pytest.raises(ConflictError):
            s.close()  # the queue's own conflict, told by the close
    assert not os.path.exists(os.path.join(dest, "data.mdb"))


def test_a_copys_failed_commit_names_the_copy(tmp_path: Path) -> None:
    path, dest = str(tmp_path / "s"), str(tmp_path / "dest")
    with cpstore.open(path, durability="batched", batch_size=1000) as s:
        _conflicting(path, s)
        with pytest.raises(ConflictError) as raised:
            copy_store(s, dest)
        exc = raised.value
        assert exc.where == "refs/r/main" and "before the" not in str(exc)
        notes = getattr(exc, "__notes__", [])
        assert len(notes) == 1, notes
        assert "before the copy, which did not run: nothing was copied" in notes[0]
        assert not os.path.exists(os.path.join(dest, "data.mdb"))
        assert s.pending == 0
