"""Retention beside a live recorder: an acknowledged checkpoint always reads back."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path
from typing import Any

import pytest

from cpstore.errors import ConflictError, NotFoundError
from cpstore.store.facade import open as open_store


def _state(i: int) -> dict[str, Any]:
    # Few distinct values: later checkpoints reuse objects of earlier, pruned ones.
    return {"mode": ["idle", "busy", "done"][i % 3], "n": i % 5, "blob": bytes([i % 4]) * 300}


class TestSameProcess:
    @pytest.mark.parametrize("durability", ["sync", "batched"])
    def test_checkpoint_after_prune_reads_back(self, tmp_path: Path, durability: Any) -> None:
        """A state part last stored by a pruned checkpoint is stored again, not assumed."""
        with open_store(tmp_path / "s", durability=durability, batch_size=1) as st:
            rec = st.recorder("r")
            rec.checkpoint(1, {"mode": "idle"})
            rec.checkpoint(2, {"mode": "busy"})
            st.flush()
            st.prune(keep_last=1)
            cid = rec.checkpoint(3, {"mode": "idle"})
            st.flush()
            with st.read(cid) as cp:
                assert cp.state() == {"mode": "idle"}
            report = st.verify()
            assert report.ok, report.problems

    def test_payload_and_transcript_after_prune_read_back(self, tmp_path: Path) -> None:
        """Observation payloads, the transcript and chunked parts survive a prune in between."""
        big = b"z" * (300 * 1024)
        with open_store(tmp_path / "s") as st:
            rec = st.recorder("r")
            rec.transcript(b"t1")
            rec.checkpoint(1, {"big": big})
            rec.transcript(b"t2")
            rec.checkpoint(2, {"small": 1})
            st.prune(keep_last=1)
            rec.transcript(b"t1")
            rec.observe(3, "src", b"payload", pinned_at=1.0)
            cid = rec.checkpoint(3, {"big": big})
            with st.read(cid) as cp:
                assert cp.state() == {"big": big}
                assert cp.payload(3, "src") == b"payload"
            assert st.verify_checkpoint(cid) == ()
            assert st.verify().ok

    def test_fork_whose_parent_was_pruned_is_refused(self, tmp_path: Path) -> None:
        """A fork whose parent was pruned meanwhile is refused, never given a dangling parent."""
        with open_store(tmp_path / "s") as st:
            rec = st.recorder("r")
            first = rec.checkpoint(1, {"a": 1})
            rec.checkpoint(2, {"a": 2})
            fork = st.recorder("r", branch="b", parent=first)
            st.prune(keep_last=1)
            with pytest.raises(ConflictError) as info:
                fork.checkpoint(3, {"a": 3})
            assert info.value.got == "pruned"
            assert st.ref("r", "b") is None
            assert st.verify().ok


def _record(path: str, seconds: float, out: Any) -> None:
    with open_store(path) as st:
        rec = st.recorder("r")
        deadline = time.monotonic() + seconds
        i = 0
        while time.monotonic() < deadline:
            if i % 7 == 3:
                rec.observe(i, "src", b"obs-%d" % (i % 4), pinned_at=float(i))
            out.put((rec.checkpoint(i, _state(i)), i))
            i += 1
    out.put(None)


def _prune(path: str, seconds: float) -> int:
    removed = 0
    with open_store(path) as st:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            removed += st.prune(keep_last=1)
            time.sleep(0.3)
    return removed


class TestProcesses:
    def test_prune_in_another_process_never_loses_an_acknowledged_checkpoint(
        self, tmp_path: Path
    ) -> None:
        """Writer beside a pruner process for 20 s: every acked id reads back or was pruned."""
        path = str(tmp_path / "s")
        open_store(path).close()
        ctx = multiprocessing.get_context("spawn")
        out = ctx.Queue()
        writer = ctx.Process(target=_record, args=(path, 20.0, out))
        pruner = ctx.Process(target=_prune, args=(path, 20.0))
        writer.start()
        pruner.start()
        acked: list[tuple[str, int]] = []
        while (item := out.get(timeout=60)) is not None:
            acked.append(item)
        writer.join(60)
        pruner.join(60)
        assert writer.exitcode == 0 and pruner.exitcode == 0
        assert len(acked) > 10
        with open_store(path) as st:
            head = st.ref("r")
            assert head == acked[-1][0]
            pruned = 0
            for cid, i in acked:
                try:
                    with st.read(cid) as cp:
                        assert cp.state() == _state(i)
                except NotFoundError as exc:
                    assert cid != head
                    assert exc.what == "checkpoint was pruned", exc
                    pruned += 1
            assert pruned > 0  # retention did run in between
            report = st.verify()
            assert report.ok, report.problems
