"""audit32: operator commands run as their own processes beside other processes writing
the same store (recorder puts, LangGraph saver puts), on LMDB and PostgreSQL: nothing
acknowledged is lost, a killed push leaves a verified destination, and every command
exits 0 or names what happened.

Every process here is real (``spawn`` pools and ``python -m cpstore.cli``), never a
thread: LMDB's locks and PostgreSQL's sessions belong to processes.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import time
from multiprocessing.pool import AsyncResult
from pathlib import Path
from typing import Any

from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures

import cpstore
from cpstore.errors import NotFoundError

RUNS = ("w0", "w1", "w2")
STEPS = 24


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cpstore.cli", *argv],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _record(url: str, runs: tuple[str, ...], steps: int) -> dict[str, list[str]]:
    """In its own process: ``steps`` checkpoints on each run, interleaved; the ids each
    ``checkpoint()`` acknowledged, per run, in order."""
    acked: dict[str, list[str]] = {run: [] for run in runs}
    with cpstore.open(url) as store:
        recs = {run: store.recorder(run) for run in runs}
        for step in range(steps):
            for run, rec in recs.items():
                rec.observe(step, "cfg", b"shared payload", pinned_at=1.0)
                rec.token("rng", step)
                acked[run].append(rec.checkpoint(step, {"run": run, "step": step}))
    return acked


def _gc_until(done: AsyncResult[Any], url: str, *argv: str) -> list[dict[str, Any]]:
    """``cpstore gc`` in a process of its own, again and again until ``done``; at least
    twice. Every run must exit 0 (its report is returned)."""
    reports: list[dict[str, Any]] = []
    while not done.ready() or len(reports) < 2:
        got = _cli("gc", *argv, "--store", url, "--json")
        assert got.returncode == 0 and "Traceback" not in got.stderr, got.stderr
        reports.append(json.loads(got.stdout))
    return reports


def test_cli_gc_beside_a_recording_process_loses_no_acknowledged_checkpoint(url: str) -> None:
    """gc --keep-last 2 again and again while another process records three runs: each
    head is the last acknowledged checkpoint, the newest two of each run read back with
    their states, every other acknowledged one reads or was pruned (tombstone), never
    anything else; verify (the command) is clean."""
    cpstore.open(url).close()
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        writing = pool.apply_async(_record, (url, RUNS, STEPS))
        reports = _gc_until(writing, url, "--keep-last", "2")
        acked: dict[str, list[str]] = writing.get(timeout=300)
    assert sum(r["checkpoints_removed"] for r in reports) > 0 or STEPS <= 2
    with cpstore.open(url, readonly=True) as store:
        for run, ids in acked.items():
            assert store.ref(run, "main") == ids[-1]
            for step, cid in enumerate(ids):
                try:
                    with store.read(cid) as cp:
                        assert cp.state() == {"run": run, "step": step}
                except NotFoundError as exc:
                    assert step < len(ids) - 2 and "pruned" in str(exc), (run, step, exc)
    got = _cli("verify", "--store", url)
    assert got.returncode == 0, got.stdout + got.stderr


def _saver_puts(url: str, thread: str, count: int) -> list[str]:
    """In its own process: ``count`` LangGraph puts on ``thread``, each on the last."""
    sys.path.insert(0, os.path.dirname(__file__))
    from lg_puts import put_value  # noqa: PLC0415 - a spawned child's import path

    from cpstore.langgraph import CpstoreSaver  # noqa: PLC0415

    ids: list[str] = []
    with cpstore.open(url) as store:
        saver = CpstoreSaver(store)
        for i in range(count):
            ids.append(put_value(saver, thread, ids[-1] if ids else None, f"v{i}"))
    return ids


def test_cli_gc_beside_a_langgraph_saver_process_keeps_the_thread_readable(url: str) -> None:
    """gc --keep-last 1 beside a saver putting a thread: every put returns, the thread's
    latest tuple is the last put with its value, verify clean."""
    sys.path.insert(0, os.path.dirname(__file__))
    from lg_puts import cfg  # noqa: PLC0415

    from cpstore.langgraph import CpstoreSaver  # noqa: PLC0415

    cpstore.open(url).close()
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        putting = pool.apply_async(_saver_puts, (url, "t-1", 30))
        _gc_until(putting, url, "--keep-last", "1")
        ids: list[str] = putting.get(timeout=300)
    with cpstore.open(url) as store:
        got = CpstoreSaver(store).get_tuple(cfg("t-1"))
        assert got is not None and got.config["configurable"]["checkpoint_id"] == ids[-1]
        assert got.checkpoint["channel_values"] == {"x": "v29"}
    done = _cli("verify", "--store", url)
    assert done.returncode == 0, done.stdout + done.stderr


def test_cli_dry_run_and_looks_beside_a_recording_process_remove_nothing(url: str) -> None:
    """gc --dry-run, verify, log and stats beside a writer: all exit 0, and nothing is
    pruned (no tombstone, every acknowledged checkpoint reads) nor any audit record added."""
    cpstore.open(url).close()
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        writing = pool.apply_async(_record, (url, RUNS, STEPS))
        while not writing.ready():
            for argv in (["gc", "--keep-last", "1", "--dry-run"], ["verify"], ["log"], ["stats"]):
                got = _cli(*argv, "--store", url)
                assert got.returncode == 0 and "Traceback" not in got.stderr, (argv, got.stderr)
        acked: dict[str, list[str]] = writing.get(timeout=300)
    with cpstore.open(url, readonly=True) as store:
        for run, ids in acked.items():
            for step, cid in enumerate(ids):
                with store.read(cid) as cp:
                    assert cp.state() == {"run": run, "step": step}
        assert list(store.audit_records()) == []
        assert store.verify().counts["tombstones"] == 0


_PUSH_KILLED = """
import sys
from cpstore.cli import main
print("ready", flush=True)  # imported: the kill lands in the push itself
sys.exit(main(["push", sys.argv[2], "--store", sys.argv[1]]))
"""


def test_a_push_killed_at_random_points_beside_a_writer_leaves_a_verified_destination(
    url: str, tmp_path: Path
) -> None:
    """`cpstore push` SIGKILLed at random points while another process records into the
    source: after each kill the destination verifies, and every ref it has names a
    checkpoint whose whole lineage reads back with the source's states; a last push makes
    it the source's."""
    src, dst = str(tmp_path / "src"), url
    _record(src, ("seed",), 40)
    rng = random.Random(32)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        writing = pool.apply_async(_record, (src, RUNS, STEPS))
        killed = 0
        for _ in range(5):
            child = subprocess.Popen(
                [sys.executable, "-c", _PUSH_KILLED, src, dst],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            # After the imports, within the push's ~0.1-0.5 s: a kill from Popen at
            # 0.3-1.5 s came after every push had ended once pushes got faster (ci23).
            assert child.stdout is not None and child.stdout.readline() == "ready\n"
            time.sleep(rng.uniform(0.0, 0.15))
            child.send_signal(signal.SIGKILL)
            _, err = child.communicate(timeout=60)
            assert "Traceback" not in err, err
            killed += child.returncode == -signal.SIGKILL
            _check_landed(src, dst)
        writing.get(timeout=300)
    assert killed, "every push ended before its kill"
    got = _cli("push", dst, "--store", src)
    assert got.returncode == 0, got.stderr
    with cpstore.open(src, readonly=True) as s, cpstore.open(dst, readonly=True) as d:
        assert {r: s.branches(r) for r in s.runs()} == {r: d.branches(r) for r in d.runs()}
    _check_landed(src, dst)


def _check_landed(src: str, dst: str) -> None:
    """The destination verifies, and each of its refs' lineages reads as in the source."""
    try:
        d = cpstore.open(dst, readonly=True)
    except NotFoundError:
        return  # killed before the destination was made
    with d, cpstore.open(src, readonly=True) as s:
        report = d.verify()
        assert report.ok, report.problems
        for run in d.runs():
            for branch in d.branches(run):
                got = [(e.manifest.id, e.state) for e in d.history_states(run, branch)]
                assert got, (run, branch)
                for cid, state in got:
                    with s.read(cid) as cp:
                        assert cp.state() == state


def _record_reopening(url: str, steps: int) -> list[str]:
    """In its own process: one checkpoint per open (open, record, close), ``steps`` times,
    so compact finds the store closed now and then; the acknowledged ids."""
    acked: list[str] = []
    for step in range(steps):
        with cpstore.open(url) as store:
            rec = store.recorder("w")
            rec.observe(step, "cfg", os.urandom(256), pinned_at=1.0)
            acked.append(rec.checkpoint(step, {"step": step, "pad": "x" * 2000}))
    return acked


def test_cli_compact_and_gc_beside_a_reopening_writer_lose_nothing(tmp_path: Path) -> None:
    """`cpstore gc --keep-last 3` then `cpstore compact`, again and again, while another
    process opens the LMDB store, records one checkpoint and closes it: gc exits 0, compact
    0 or 7 ("another process has the store open", or "the store changed after compact
    verified it ... nothing was swapped"), never anything else; every
    acknowledged checkpoint the gc kept reads back, verify is clean, a last compact swaps."""
    url = str(tmp_path / "s")
    cpstore.open(url).close()
    ctx = multiprocessing.get_context("spawn")
    codes: list[int] = []
    with ctx.Pool(1) as pool:
        writing = pool.apply_async(_record_reopening, (url, 400))
        while not writing.ready() or not codes:
            got = _cli("gc", "--keep-last", "3", "--store", url)
            assert got.returncode == 0, got.stderr
            got = _cli("compact", "--store", url)
            assert got.returncode in (0, 7) and "Traceback" not in got.stderr, got.stderr
            # 7: the writer had it open, or committed after compact's verify (nothing swapped)
            refused = "open" in got.stderr or "nothing was swapped" in got.stderr
            assert got.returncode == 0 or refused, got.stderr
            codes.append(got.returncode)
        acked: list[str] = writing.get(timeout=300)
    got = _cli("compact", "--store", url)
    assert got.returncode == 0, got.stderr
    with cpstore.open(url, readonly=True) as store:
        assert store.ref("w", "main") == acked[-1]
        history = [m.id for m in store.history("w", "main")]
        assert history == acked[::-1][: len(history)] and len(history) >= 3
        for step, cid in enumerate(acked):
            try:
                with store.read(cid) as cp:
                    assert cp.state() == {"step": step, "pad": "x" * 2000}
            except NotFoundError as exc:
                assert "pruned" in str(exc) and cid not in history, (step, exc)
        assert store.verify().ok


def _gc_loop(url: str, last_run: str, last_step: int) -> int:
    """In its own process: gc --keep-last 1 sweeps until ``last_run`` has its checkpoint
    of ``last_step`` (the writer's last); checkpoints removed."""
    removed = 0
    with cpstore.open(url) as store:
        while True:
            removed += len(store.gc(keep_last=1).checkpoints)
            head = store.ref(last_run, "main")
            if head is not None and store.manifest(head).step == last_step:
                return removed


def test_cli_verify_beside_a_writer_and_a_collector_never_reports_damage(url: str) -> None:
    """`cpstore verify --json` again and again while one process records and another
    sweeps: each walk is one snapshot, so every report is ok (exit 0); a problem here
    would be damage invented by the race, the lie an auditor cannot afford."""
    cpstore.open(url).close()
    ctx = multiprocessing.get_context("spawn")
    walks = 0
    with ctx.Pool(2) as pool:
        writing = pool.apply_async(_record, (url, RUNS, STEPS))
        sweeping = pool.apply_async(_gc_loop, (url, RUNS[-1], STEPS - 1))
        while not (writing.ready() and sweeping.ready()) or walks < 2:
            got = _cli("verify", "--json", "--store", url)
            assert got.returncode == 0, got.stdout + got.stderr
            assert json.loads(got.stdout)["ok"] is True
            walks += 1
        writing.get(timeout=300)
        assert sweeping.get(timeout=300) > 0


def test_a_compact_killed_at_random_points_loses_nothing_and_the_next_one_swaps(
    tmp_path: Path,
) -> None:
    """`cpstore compact` SIGKILLed at random points (verifying, copying, checking, swapping):
    every time the store opens, verifies and reads every acknowledged checkpoint as it was;
    a leftover compact.tmp is removed by the next compact, which swaps."""
    url = str(tmp_path / "s")
    blobs: dict[str, bytes] = {}
    with cpstore.open(url) as store:
        for run in RUNS:
            rec = store.recorder(run)
            for step in range(40):
                blob = os.urandom(60_000)  # ~13 MB in all: a compact that takes a while
                blobs[rec.checkpoint(step, {"run": run, "step": step, "blob": blob})] = blob
        store.gc(keep_last=20)  # free pages, so the copy is smaller than the file
        kept = {run: [m.id for m in store.history(run, "main")] for run in RUNS}
    rng = random.Random(3232)
    killed = 0
    for _ in range(6):
        child = subprocess.Popen(
            [sys.executable, "-m", "cpstore.cli", "compact", "--store", url],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(rng.uniform(0.15, 0.7))
        child.send_signal(signal.SIGKILL)
        _, err = child.communicate(timeout=60)
        assert "Traceback" not in err, err
        killed += child.returncode == -signal.SIGKILL
        with cpstore.open(url, readonly=True) as store:
            assert store.verify().ok
            for run, ids in kept.items():
                assert [m.id for m in store.history(run, "main")] == ids
                for cid in ids:
                    with store.read(cid) as cp:
                        state: Any = cp.state()
                        assert state["run"] == run and state["blob"] == blobs[cid]
    assert killed, "every compact ended before its kill"
    got = _cli("compact", "--store", url)
    assert got.returncode == 0, got.stderr
    assert sorted(os.listdir(url)) == ["data.mdb", "lock.mdb"]
    with cpstore.open(url, readonly=True) as store:
        assert store.verify().ok
        assert {run: [m.id for m in store.history(run, "main")] for run in RUNS} == kept
