"""A close that leaves the environment open (another thread's txn did not end) and whose
fsync fails, and the later close of that environment by the next open when its fsync
fails: each says both what may not be on disk and that the store was left open. Before
(audit50's findings): the sync's error alone (the "left open" lost), and the later close's
failure swallowed."""

from __future__ import annotations

from pathlib import Path

import pytest
from left_open import left_open, read_held

import cpstore
from cpstore.errors import StoreError
from cpstore.store import lmdb_txns
from cpstore.store.lmdb_env import Env


def _failing_sync(env: Env) -> None:
    raise StoreError("fsync failed (test)", where=env.path)


def _notes(exc: BaseException) -> str:
    return "\n".join(getattr(exc, "__notes__", ()))


def test_a_close_left_open_whose_sync_fails_raises_the_sync_failure_noting_left_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lmdb_txns, "CLOSE_WAIT_SECONDS", 0.5)
    st = cpstore.open(str(tmp_path / "s"), durability="none")
    cid = st.recorder("r").checkpoint(0, {"a": 1})
    with read_held(st, cid):
        monkeypatch.setattr(Env, "sync", _failing_sync)
        with pytest.raises(StoreError, match="fsync failed") as told:
            st.close()
        monkeypatch.undo()
    assert "was left open" in _notes(told.value)  # before: no note, the left open unsaid
    with cpstore.open(str(tmp_path / "s"), readonly=True, create=False) as ro:
        assert ro.ref("r") == cid


def test_the_next_open_warns_when_closing_the_store_left_open_fails_its_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lmdb_txns, "CLOSE_WAIT_SECONDS", 0.5)
    path = str(tmp_path / "s")
    cid = left_open(path, "none")
    monkeypatch.setattr(Env, "sync", _failing_sync)
    with pytest.warns(RuntimeWarning, match="fsync failed") as seen:  # before: no warning
        again = cpstore.open(path)  # closes the environment left open first
    monkeypatch.undo()
    assert "left open" in str(seen[0].message)
    with again:
        assert again.ref("r") == cid
