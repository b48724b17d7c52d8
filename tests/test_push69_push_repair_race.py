"""push69: pushes racing a damage and its repair in other processes recreate nothing.

The destination's ``r/main`` went elsewhere (its true head on another lineage than the
source's). One process, round after round, deletes that ref row behind cpstore's back
and, once at least two pushes ran wholly inside the damage, puts it back with
``repair_ref`` at the true head; another pushes in a loop (recording on a branch of its
own in the source between pushes, which lands whenever the table is whole). A push is
refused with the destination's refs digest named, or is a ConflictError (``r/main``
diverged, or moved under it): never a push that recreated ``r/main`` at the source's
head, which the next repair would have found standing (its record's ``damaged``). On
both engines.
"""

from __future__ import annotations

import multiprocessing
import queue
import time
from pathlib import Path
from typing import Any

from pg_cluster import backend_url  # noqa: F401 - fixture

import cpstore
from cpstore.errors import ConflictError, IntegrityError
from cpstore.store.transfer import transfer

ROUNDS = 5
WAIT = 120.0  # seconds a round waits for the pusher before giving up (a hung test)


def _damager(url: str, head: str, pushes: Any, out: Any) -> None:
    damaged: list[str | None] = []
    with cpstore.open(url) as st:
        refs = st.backend.db("refs")
        for _ in range(ROUNDS):
            st.backend.write_txn(lambda txn: txn.delete(b"r\0main", db=refs))
            seen = pushes.value
            deadline = time.monotonic() + WAIT
            while pushes.value < seen + 2 and time.monotonic() < deadline:
                time.sleep(0.005)
            record = st.repair_ref("r", "main", head, operator="p", reason="race")
            damaged.append(record.body["damaged"])
    out.put(damaged)


def _pusher(src_at: str, url: str, pushes: Any, stop: Any, out: Any) -> None:
    outcomes: list[str] = []
    with cpstore.open(src_at) as src, cpstore.open(url) as dst:
        rec = src.recorder("f")
        i = 0
        while not stop.is_set():
            rec.checkpoint(i, {"f": i})
            i += 1
            try:
                report = transfer(src.backend, dst.backend)
                outcomes.append(f"landed {report.refs_created} created")
            except IntegrityError as exc:
                outcomes.append(f"refused at {exc.where}")
            except ConflictError as exc:
                outcomes.append("conflict" if "r/main" in str(exc) else f"conflict {exc}")
            with pushes.get_lock():
                pushes.value += 1
    out.put(outcomes)


def test_pushes_racing_a_vanished_ref_and_its_repair_never_recreate_it(
    url: str, tmp_path: Path
) -> None:
    src_at = str(tmp_path / "src")
    with cpstore.open(src_at) as src, cpstore.open(url) as dst:
        rec = src.recorder("r")
        for i in range(2):
            rec.checkpoint(i, {"i": i})
        transfer(src.backend, dst.backend)
        rec.checkpoint(2, {"src": 2})
        mine = dst.recorder("r").checkpoint(2, {"dst": 2})  # the destination diverged
    ctx = multiprocessing.get_context("spawn")
    pushes, stop = ctx.Value("i", 0), ctx.Event()
    damaged_q, outcomes_q = ctx.Queue(), ctx.Queue()
    pusher = ctx.Process(target=_pusher, args=(src_at, url, pushes, stop, outcomes_q))
    damager = ctx.Process(target=_damager, args=(url, mine, pushes, damaged_q))
    pusher.start()
    damager.start()
    try:
        damaged = damaged_q.get(timeout=ROUNDS * WAIT)
    finally:
        stop.set()
    try:
        outcomes = outcomes_q.get(timeout=WAIT)
    except queue.Empty:  # pragma: no cover - reported by the asserts below
        outcomes = ["the pusher reported nothing"]
    pusher.join(WAIT)
    damager.join(WAIT)
    assert damaged == [None] * ROUNDS  # every repair found r/main absent: none recreated
    assert set(outcomes) <= {"refused at meta/refs_digest", "conflict"}, outcomes
    assert outcomes.count("refused at meta/refs_digest") >= ROUNDS  # one wholly inside each
    with cpstore.open(src_at) as src, cpstore.open(url) as dst:
        assert dst.ref("r") == mine
        try:
            transfer(src.backend, dst.backend)
        except ConflictError as exc:
            assert "r/main" in str(exc)
        assert dst.ref("f") == src.ref("f") and dst.ref("r") == mine
        assert dst.verify().ok
