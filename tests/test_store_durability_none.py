"""durability="none": no fsync by cpstore, yet a killed writer loses nothing it acknowledged."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from cpstore.errors import InvalidInputError, StoreError
from cpstore.store.facade import open as open_store

# Writes checkpoints (bytes states, parts states, a chunked > 64 KiB part) in
# "none" mode and prints each id once checkpoint() has returned; never exits.
CHILD = r"""
import os, sys
from cpstore.store.facade import open as open_store
path, run = sys.argv[1], sys.argv[2]
st = open_store(path, durability="none")
rec = st.recorder(run)
state = {f"p{i}": os.urandom(512) for i in range(6)}
step = 0
while True:
    state[f"p{step % 6}"] = os.urandom(512)
    if step % 5 == 0:
        state["big"] = os.urandom(100_000)
    value = os.urandom(300) if step % 4 == 3 else dict(state)
    cid = rec.checkpoint(step, value)
    print(cid, flush=True)
    step += 1
"""


def _read_ids(child: subprocess.Popen[str], count: int, timeout: float = 60.0) -> list[str]:
    """The first ``count`` ids the child printed (each acknowledged by checkpoint())."""
    assert child.stdout is not None
    ids: list[str] = []
    deadline = time.monotonic() + timeout
    while len(ids) < count:
        assert time.monotonic() < deadline, "the child wrote too slowly"
        line = child.stdout.readline()
        assert line, f"the child ended early: {child.stderr.read() if child.stderr else ''}"
        ids.append(line.strip())
    return ids


class TestModeNames:
    @pytest.mark.parametrize("mode", ["None", "fsync", "SYNC", "", None, 0, b"none"])
    def test_an_unknown_mode_is_invalid_input_listing_the_modes(
        self, tmp_path: Path, mode: Any
    ) -> None:
        """Any name but sync, batched and none is refused before the store is touched."""
        with pytest.raises(InvalidInputError) as info:
            open_store(tmp_path / "s", durability=mode)
        assert info.value.expected == ["sync", "batched", "none"]
        assert info.value.got == mode
        assert not (tmp_path / "s").exists()

    def test_none_mode_opens_lmdb_without_sync(self, tmp_path: Path) -> None:
        """The environment is MDB_NOSYNC in "none" mode and syncs in the other two."""
        with open_store(tmp_path / "a", durability="none") as st:
            assert st.durability == "none"
            assert st.backend.env.env.flags()["sync"] is False
        for mode in ("sync", "batched"):
            with open_store(tmp_path / mode, durability=mode) as st:
                assert st.backend.env.env.flags()["sync"] is True


class TestOneProcessOneMode:
    def test_a_second_open_with_another_durability_is_refused(self, tmp_path: Path) -> None:
        """MDB_NOSYNC belongs to the process's one environment: mixing it in is a StoreError."""
        path = tmp_path / "s"
        with open_store(path) as st:
            with pytest.raises(StoreError, match="another durability") as info:
                open_store(path, durability="none")
            assert "none" in str(info.value.got)
            with open_store(path, durability="batched") as other:  # same env flags: allowed
                assert other.durability == "batched"
            assert st.ref("r") is None
        with open_store(path, durability="none") as st:
            for mode in ("sync", "batched"):
                with pytest.raises(StoreError, match="another durability"):
                    open_store(path, durability=mode)
            with open_store(path, durability="none") as again:
                assert again.durability == "none"

    def test_checkpoints_are_visible_at_once_and_flush_and_close_sync(self, tmp_path: Path) -> None:
        """Nothing is queued: a checkpoint is readable when the call returns; flush() fsyncs."""
        path = tmp_path / "s"
        with open_store(path, durability="none") as st:
            rec = st.recorder("r")
            cid = rec.checkpoint(0, {"a": 1})
            assert st.pending == 0
            assert st.ref("r") == cid
            with st.read(cid) as cp:
                assert cp.state() == {"a": 1}
            st.flush()
            rec.flush()
        st.flush()  # closed: nothing to do, nothing raised
        with open_store(path, readonly=True) as ro:
            ro.flush()
            assert ro.ref("r") == cid

    def test_only_checkpoint_commits_skip_the_fsync(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Checkpoints are not fsynced; audit records, ref moves and flush() are."""
        with open_store(tmp_path / "s", durability="none") as st:
            env = st.backend.env
            calls: list[int] = []
            real = env.sync

            def counted() -> None:
                calls.append(1)
                real()

            monkeypatch.setattr(env, "sync", counted)
            rec = st.recorder("r")
            first = rec.checkpoint(0, {"a": 1})
            rec.checkpoint(1, {"a": 2})
            assert calls == []
            st.append_audit("note", {"x": 1})
            assert calls == [1]
            st.fork("r", "b", first)
            assert len(calls) == 2
            st.flush()
            assert len(calls) == 3


class TestProcessCrash:
    def test_every_acknowledged_id_survives_sigkill_of_the_writer(self, tmp_path: Path) -> None:
        """Three "none" writers killed by SIGKILL: each printed id reads back and verifies.

        The parent writes its own run in "sync" mode meanwhile: processes may
        open one store with different modes (the flag is per process).
        """
        path = tmp_path / "s"
        acknowledged: list[str] = []
        with open_store(path) as parent:
            rec = parent.recorder("parent")
            mine = []
            for i, count in enumerate((5, 40, 120)):
                child = subprocess.Popen(
                    [sys.executable, "-c", CHILD, str(path), f"run{i}"],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                try:
                    acknowledged += _read_ids(child, count)
                    mine.append(rec.checkpoint(i, {"i": i}))
                finally:
                    child.send_signal(signal.SIGKILL)
                    child.communicate()
                assert child.returncode == -signal.SIGKILL
        with open_store(path) as st:
            report = st.verify()
            assert report.ok, report.problems
            for cid in acknowledged + mine:
                with st.read(cid) as cp:  # every object hash-checked on read
                    cp.state()
                    assert not cp.verify_objects()
            for i, count in enumerate((5, 40, 120)):
                assert len(st.history(f"run{i}")) >= count
        assert len(set(acknowledged)) == len(acknowledged) == 165

    def test_a_store_written_in_none_mode_reopens_in_any_mode(self, tmp_path: Path) -> None:
        """The mode is how a process commits, not a property of the store on disk."""
        path = tmp_path / "s"
        with open_store(path, durability="none") as st:
            cid = st.recorder("r").checkpoint(0, b"x")
        for mode in ("sync", "batched", "none"):
            with open_store(path, durability=mode) as st, st.read(cid) as cp:
                assert cp.state() == b"x"
        assert os.path.exists(path / "data.mdb")
