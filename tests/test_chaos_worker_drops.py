"""The chaos worker (tests/chaos_worker.py) never acknowledges a checkpoint the store said
was dropped, whichever of its calls the drop was reported to; a checkpoint whose call
raised another thread's drop counts as may-have-committed; a push is acknowledged only
when the store said main landed."""

from __future__ import annotations

import json
import random
import threading
from pathlib import Path

import chaos_roles
import pytest
from chaos_check import may_have_committed
from chaos_log import Log
from chaos_process import close_logged
from chaos_worker import Worker

import cpstore
from cpstore.errors import ConflictError


def test_a_drop_reported_to_a_tmp_checkpoint_is_never_acknowledged_later(
    tmp_path: Path,
) -> None:
    """Batched: the worker queues a checkpoint of its own run, then a stale one of run "c"
    is queued; op_tmp's checkpoint (a direct call, not Worker.checkpoint) fills the batch,
    whose commit fails the stale compare-and-set and drops the whole batch; the later
    flush must not acknowledge the dropped checkpoint (the CI failure of 2026-12-02: an
    "acknowledged checkpoint lost" the store had said was not stored)."""
    path = tmp_path / "s"
    with cpstore.open(path, durability="batched", batch_size=3) as st:
        w = Worker(st, Log(str(tmp_path / "w0.log"), 0, 0), random.Random(1), "w0")
        stale = st.recorder("c")  # head None: made before another handle records "c"
        with cpstore.open(path) as other:
            other.recorder("c").checkpoint(1, {"moved": True})
        w.checkpoint(w.main, w.run, "main", flush=False)
        assert len(w.main_pending) == 1
        dropped = w.main_pending[0]
        stale.checkpoint(2, {"stale": True})  # queued: the batch now holds two
        try:
            w.op_tmp()  # its checkpoint fills the batch; the commit fails on "c"
            raise AssertionError("the batch with the stale compare-and-set was committed")
        except ConflictError:
            pass
        w.flush()
        lines = (tmp_path / "w0.log").read_text().splitlines()
        mine = [line for line in lines if f'"id": "{dropped["oid"]}"' in line]
        assert mine and not [line for line in mine if '"ev": "a"' in line], mine
        assert st.ref(w.run) != dropped["cid"]


def test_a_failed_last_flush_at_close_is_logged_and_the_worker_goes_on(tmp_path: Path) -> None:
    """Batched: close() flushes what is still queued and raises when that commit fails
    (here a stale compare-and-set); the worker's close logs it as a documented error
    instead of dying without its ``end`` (the CI failure of 2026-12-02, stop 27: a
    worker exited 1 with no defect logged)."""
    path = tmp_path / "s"
    log_path = tmp_path / "w0.log"
    st = cpstore.open(path, durability="batched", batch_size=8)
    stale = st.recorder("c")
    with cpstore.open(path) as other:
        other.recorder("c").checkpoint(1, {"moved": True})
    stale.checkpoint(2, {"stale": True})  # queued; close's flush fails on "c"
    close_logged(st, Log(str(log_path), 0, 0))
    lines = [json.loads(line) for line in log_path.read_text().splitlines()]
    assert [(r["ev"], r["op"]) for r in lines] == [("b", "close"), ("x", "close")]
    assert lines[1]["err"] == "ConflictError" and lines[0]["id"] == lines[1]["id"]
    with cpstore.open(path) as again:
        assert again.manifest(again.resolve("c@main")).step == 1  # the stale one: not stored


def test_a_clean_close_is_logged_as_acknowledged(tmp_path: Path) -> None:
    """The same wrapper on a close whose flush commits: ``b`` then ``a``, and what was
    queued is stored."""
    path = tmp_path / "s"
    log_path = tmp_path / "w0.log"
    st = cpstore.open(path, durability="batched", batch_size=8)
    cid = st.recorder("r").checkpoint(1, {"x": 1})
    close_logged(st, Log(str(log_path), 0, 0))
    lines = [json.loads(line) for line in log_path.read_text().splitlines()]
    assert [(r["ev"], r["op"]) for r in lines] == [("b", "close"), ("a", "close")]
    with cpstore.open(path) as again:
        assert again.ref("r") == cid


def test_a_checkpoint_that_raised_another_threads_drop_may_be_stored(tmp_path: Path) -> None:
    """Batched: thread B's failed commit drops the main thread's queued checkpoint; the
    drop is told at the main thread's next flush, which its next checkpoint makes when it
    fills the batch: that batch commits (the checkpoint is stored), then the call raises
    "... in another thread's batch commit, which failed: not stored" about the earlier
    one. The log's ConflictError for that checkpoint must count as may-have-committed
    (a prune explained by it, chaos_check.newer), not as refused."""
    path = tmp_path / "s"
    log_path = tmp_path / "w0.log"
    with cpstore.open(path, durability="batched", batch_size=2) as st:
        w = Worker(st, Log(str(log_path), 0, 0), random.Random(1), "w0")
        stale = st.recorder("c")  # head None: made before another handle records "c"
        with cpstore.open(path) as other:
            other.recorder("c").checkpoint(1, {"moved": True})
        w.checkpoint(w.main, w.run, "main", flush=False)  # queued: dropped by B below
        raised: list[BaseException] = []

        def b() -> None:
            try:
                stale.checkpoint(2, {"stale": True})  # fills the batch: its commit fails
            except ConflictError as exc:
                raised.append(exc)

        t = threading.Thread(target=b)
        t.start()
        t.join()
        assert raised, "thread B's stale compare-and-set was committed"
        st.recorder("y").checkpoint(1, {"y": 1})  # one queued: the next fills the batch
        with pytest.raises(ConflictError, match="another thread's batch commit"):
            w.op_tmp()
        lines = [json.loads(line) for line in log_path.read_text().splitlines()]
        x = lines[-1]
        begin = next(r for r in lines if r["ev"] == "b" and r["id"] == x["id"])
        assert (x["ev"], x["op"], begin["run"].startswith("tmp-")) == ("x", "ckpt", True)
        head = st.ref(begin["run"])  # the checkpoint whose call raised: stored
        assert head is not None and st.manifest(head).state_digest == begin["sd"]
        assert may_have_committed(x)


@pytest.mark.parametrize(
    ("where", "got", "acked"),
    [("refs", ["own-w0/f1"], True), ("refs/own-w0/f1", "ab" * 16, False)],
)
def test_a_push_is_acknowledged_only_when_its_conflict_says_main_landed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str, got: object, acked: bool
) -> None:
    """transfer's collected ConflictError (where "refs", got the branches that went
    elsewhere) means every other branch landed; one raised mid-transfer for one branch
    (moved or pruned there meanwhile) may have stopped before main. The worker acked a
    push on any ConflictError not naming main in ``got`` (a hex id there, for the latter)."""

    def conflict(*_: object, **__: object) -> None:
        raise ConflictError("a branch conflict", where=where, got=got)

    monkeypatch.setattr(chaos_roles, "transfer", conflict)
    cpstore.open(tmp_path / "peer").close()
    log_path = tmp_path / "w0.log"
    with cpstore.open(tmp_path / "s") as st:
        w = Worker(st, Log(str(log_path), 0, 0), random.Random(1), "w0")
        w.checkpoint(w.main, w.run, "main")
        roles = chaos_roles.Roles(0, str(tmp_path / "peer"))
        roles.bind(w)
        try:
            roles.push()
        except ConflictError:
            assert not acked
        finally:
            assert roles.peer is not None
            roles.peer.close()
    pushes = [json.loads(r) for r in log_path.read_text().splitlines() if '"push"' in r]
    # (acked here, the stand-in transfer copied nothing: the worker's own check of the
    # pushed head then logs a defect, which is right for a push that lied)
    assert [r["ev"] for r in pushes if r["ev"] != "defect"] == ["b", "a" if acked else "x"]
