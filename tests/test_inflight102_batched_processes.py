"""inflight102: two processes write batched into one store; one meets a failing batch.

Process A records runs a0-a2 in rounds (one checkpoint per run, then ``flush()``);
process B records b0-b1 the same way and, asked by A between two of A's rounds, commits a
checkpoint on a0: A's next batch (a0's checkpoint extends A's stale head) fails
ConflictError and is dropped whole. A's recorders in it then refuse ("not stored"), and A
opens new ones, which continue from the stored heads. Checked: every checkpoint
acknowledged (its flush returned) is stored, each head is its last acknowledged
checkpoint (a0's: A's, after B's), nothing acknowledged was dropped, and the store
verifies. Spawned processes; events with timeouts (no sleeps).
"""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path
from typing import Any

from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures

import cpstore
from cpstore.errors import ConflictError

_WAIT = 120.0
_ROUNDS = 6
_MOVE_AT = 2  # A's round whose batch fails (B moved a0 just before it)
_STEP = 1000  # steps never go backwards: B's on a0 is above A's before, below A's after


def _rounds(
    st: cpstore.Store, runs: list[str], rounds: range, who: str, before: Any = None
) -> dict[str, Any]:
    """Checkpoint each run each round, then flush; ``before(round)`` runs first. Returns
    the acknowledged ids per run (in order), the refusals and the failed flushes."""
    recs = {run: st.recorder(run) for run in runs}
    acked: dict[str, list[str]] = {run: [] for run in runs}
    refused: list[str] = []
    failed: list[str] = []
    for r in rounds:
        if before is not None:
            before(r)
        queued: dict[str, str] = {}
        for i, run in enumerate(runs):
            step = _STEP + 10 * r + i  # B's checkpoint on a0 sits between rounds 1 and 2
            try:
                queued[run] = recs[run].checkpoint(step, {"who": who, "round": r})
            except ConflictError as exc:  # its head was in a dropped batch
                assert "not stored" in str(exc), exc
                refused.append(run)
                recs[run] = st.recorder(run)  # continues from the stored head
                queued[run] = recs[run].checkpoint(step, {"who": who, "round": r})
        try:
            st.flush()
        except ConflictError as exc:
            failed.append(f"{r}: {exc}")
            continue
        for run, cid in queued.items():
            acked[run].append(cid)
    return {"acked": acked, "refused": refused, "failed": failed}


def _proc_a(url: str, move: Any, moved: Any, out: str) -> None:
    def before(r: int) -> None:
        if r == _MOVE_AT:
            move.set()
            if not moved.wait(_WAIT):
                raise TimeoutError("B never moved a0")

    with cpstore.open(url, durability="batched", batch_size=1000) as st:
        got = _rounds(st, ["a0", "a1", "a2"], range(_ROUNDS), "A", before)
    Path(out).write_text(json.dumps(got))


def _proc_b(url: str, move: Any, moved: Any, out: str) -> None:
    with cpstore.open(url, durability="batched", batch_size=1000) as st:
        first = _rounds(st, ["b0", "b1"], range(_ROUNDS // 2), "B")
        if not move.wait(_WAIT):
            raise TimeoutError("A never asked for the move")
        on_a0 = st.recorder("a0").checkpoint(_STEP + 10 * _MOVE_AT - 5, {"who": "B"})
        st.flush()  # acknowledged: a0's head until A's next acknowledged one
        moved.set()
        second = _rounds(st, ["b0", "b1"], range(_ROUNDS // 2, _ROUNDS), "B")
    got = {
        "acked": {run: first["acked"][run] + second["acked"][run] for run in ["b0", "b1"]},
        "on_a0": on_a0,
        "failed": first["failed"] + second["failed"],
    }
    Path(out).write_text(json.dumps(got))


def check_two_processes(url: str, tmp_path: Path) -> None:
    with cpstore.open(url) as st:  # made once, before the processes race to make it
        st.recorder("seed").checkpoint(0, {"seed": True})
    ctx = multiprocessing.get_context("spawn")
    move, moved = ctx.Event(), ctx.Event()
    outs = [str(tmp_path / "a.json"), str(tmp_path / "b.json")]
    procs = [
        ctx.Process(target=_proc_a, args=(url, move, moved, outs[0])),
        ctx.Process(target=_proc_b, args=(url, move, moved, outs[1])),
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(_WAIT * 2)
        if proc.is_alive():
            proc.kill()
        assert proc.exitcode == 0, f"child exit code {proc.exitcode}"
    a, b = (json.loads(Path(out).read_text()) for out in outs)
    assert len(a["failed"]) == 1 and a["failed"][0].startswith(f"{_MOVE_AT}: "), a["failed"]
    assert sorted(a["refused"]) == ["a0", "a1", "a2"]  # each in the dropped batch
    assert b["failed"] == []
    with cpstore.open(url, create=False) as st:
        for who in (a, b):
            for run, cids in who["acked"].items():
                for cid in cids:
                    assert st.manifest(cid).run_id == run  # raises NotFoundError when lost
                assert st.ref(run) == cids[-1], run
        assert st.manifest(b["on_a0"]).run_id == "a0"
        assert len(a["acked"]["a0"]) == _ROUNDS - 1  # one round dropped, every other kept
        assert st.manifest(a["acked"]["a0"][_MOVE_AT]).parent == b["on_a0"]
        assert st.verify().ok


def test_two_processes_batched_one_failing_batch_loses_nothing_acknowledged(
    tmp_path: Path,
) -> None:
    check_two_processes(str(tmp_path / "s"), tmp_path)


def test_two_processes_batched_one_failing_batch_on_postgres(
    pg_url: str,  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    check_two_processes(pg_url, tmp_path)
