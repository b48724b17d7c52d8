"""A process SIGKILLed mid-maintenance (prune keep_latest, delete_thread, copy_thread), at
each point between its txns, LMDB and PostgreSQL: afterwards verify is clean, every read
is one whole checkpoint with its own writes, nothing acknowledged is lost (the thread's
newest stays under a prune; the source under a copy), a delete is whole once its drop
txn committed, and the same call run again finishes what the killed one left.

The child (``review88_workers.kill_at``) kills itself at the n-th pass of a point, so
each placement is exact, not a timer's guess.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import review88_workers as w
from pg_cluster import backend_url  # noqa: F401 - fixture

from cpstore.langgraph import CpstoreSaver, _maintain

_NS = ("", "sub")


def _thread(url: str, thread: str, n: int = 5) -> dict[str, list[str]]:
    """``n`` steps of ``thread`` in each of two namespaces: their ids."""
    ids: dict[str, list[str]] = {}
    with CpstoreSaver.from_conn_string(url) as saver:
        for ns in _NS:
            parent = None
            for i in range(n):
                parent = w.put_step(saver, thread, parent, i, ns)
                ids.setdefault(ns, []).append(parent)
    return ids


def _killed(url: str, what: str, thread: str, point: str, n: int) -> None:
    """Run ``what`` in a child killed at the ``n``-th pass of ``point``; it must die so."""
    done = subprocess.run(
        [sys.executable, str(Path(w.__file__)), url, what, thread, point, str(n)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == -signal.SIGKILL, (done.returncode, done.stderr[-2000:])


def _steps(saver: CpstoreSaver, thread: str, ns: str) -> list[int]:
    steps = []
    for tup in saver.list(w.cfg(thread, ns=ns)):
        steps.append(w.check_tuple(tup))
        assert list(tup.pending_writes) == [(f"task{steps[-1]}", "x", f"w{steps[-1]}")]
        again = saver.get_tuple(tup.config)
        assert again is not None and w.check_tuple(again) == steps[-1]
    return sorted(steps)


_PRUNE_POINTS = [
    ("cpstore.langgraph._maintain._reclaim", True, 1),  # after the prune txn
    ("cpstore.langgraph._maintain._copy_one", False, 1),  # after the first re-record
    ("cpstore.langgraph._maintain._copy_one", False, 2),  # after both re-records
    ("cpstore.langgraph._maintain.reset_ref", False, 1),  # a reset, its hold not released
    ("cpstore.langgraph._maintain.reset_ref", False, 2),
    ("cpstore.langgraph._maintain.sweep", True, 1),  # every reset done, before the sweep
]


@pytest.mark.parametrize(("point", "before", "n"), _PRUNE_POINTS)
def test_keep_latest_killed_mid_way(url: str, point: str, before: bool, n: int) -> None:
    """Killed at each point of keep_latest: each namespace's newest reads with its writes,
    every listed step whole, verify clean; the loop goes on from the newest; a prune run
    again leaves each namespace's newest alone."""
    ids = _thread(url, "t")
    _killed(url, "prune", "t", ("^" if before else "") + point, n)
    with CpstoreSaver.from_conn_string(url) as saver:
        report = saver.store.verify()
        assert report.ok, report
        for ns in _NS:
            steps = _steps(saver, "t", ns)
            assert steps[-1] == 4 and set(steps) <= set(range(5))
            newest = saver.get_tuple(w.cfg("t", ns=ns))
            assert (
                newest is not None
                and newest.config["configurable"]["checkpoint_id"] == (ids[ns][-1])
            )
        w.put_step(saver, "t", ids[""][-1], 5)
        saver.prune(["t"])
        assert _steps(saver, "t", "") == [5]
        assert _steps(saver, "t", "sub") == [4]
        report = saver.store.verify()
        assert report.ok, report
        # the prune run again finished the killed one's work: no hold of it is left,
        # and the store keeps the two kept checkpoints alone (before: a reset's hold
        # outlived the kill and kept the old lineage for good)
        assert saver.store.retained() == {}
        assert report.counts["checkpoints"] == 2


@pytest.mark.parametrize("n", [1, 2])
def test_delete_thread_after_a_keep_latest_killed_between_reset_and_release(
    url: str, n: int
) -> None:
    """A keep_latest killed after its n-th reset, before that reset's hold was released:
    delete_thread then leaves nothing of the thread stored (before: the hold kept the
    old head and its lineage, the deleted thread's values, with no run naming them)."""
    _thread(url, "t")
    _killed(url, "prune", "t", "cpstore.langgraph._maintain.reset_ref", n)
    with CpstoreSaver.from_conn_string(url) as saver:
        saver.delete_thread("t")
        assert saver.store.retained() == {}
        report = saver.store.verify()
        assert report.ok, report
        assert report.counts["checkpoints"] == 0
        assert report.counts["objects"] == 0


@pytest.mark.parametrize(
    ("point", "before"),
    [("cpstore.store.retention.delete_run", True), ("cpstore.store.retention.delete_run", False)],
)
def test_delete_thread_killed_mid_way(url: str, point: str, before: bool) -> None:
    """Killed after the drop txn (before or after the first run's sweep): the thread reads
    as deleted, verify clean; a put to it starts it afresh; a delete run again is whole."""
    _thread(url, "t")
    _killed(url, "delete", "t", ("^" if before else "") + point, 1)
    with CpstoreSaver.from_conn_string(url) as saver:
        report = saver.store.verify()
        assert report.ok, report
        for ns in _NS:
            assert saver.get_tuple(w.cfg("t", ns=ns)) is None
            assert _steps(saver, "t", ns) == []
        w.put_step(saver, "t", None, 7)
        assert _steps(saver, "t", "") == [7]
        saver.delete_thread("t")
        assert _steps(saver, "t", "") == []
        report = saver.store.verify()
        assert report.ok, report


@pytest.mark.parametrize("n", [1, 4, 7])
def test_copy_thread_killed_mid_way(url: str, n: int) -> None:
    """Killed after the n-th checkpoint copied: the source is untouched, the target
    holds whole checkpoints (values and writes), parents before children in each
    namespace; a copy run again completes it; verify clean."""
    _thread(url, "t")
    _killed(url, "copy", "t", "cpstore.langgraph._copy_delete._copy_one", n)
    with CpstoreSaver.from_conn_string(url) as saver:
        report = saver.store.verify()
        assert report.ok, report
        got = 0
        for ns in _NS:
            assert _steps(saver, "t", ns) == list(range(5))
            steps = _steps(saver, "t-copy", ns)
            assert steps == list(range(len(steps)))  # a prefix: parents first
            got += len(steps)
        assert got == n
        saver.copy_thread("t", "t-copy")
        for ns in _NS:
            assert _steps(saver, "t-copy", ns) == list(range(5))
        report = saver.store.verify()
        assert report.ok, report


_OTHER = (
    "import sys\nfrom cpstore.langgraph import CpstoreSaver\n"
    "with CpstoreSaver.from_conn_string(sys.argv[1]) as s:\n"
    "    s.prune(['t']) if sys.argv[2] == 'prune' else s.delete_thread('t')\n"
)


@pytest.mark.parametrize("other", ["prune", "delete"])
def test_a_prune_whose_hold_another_process_released_finishes(
    url: str, other: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between a keep_latest's reset and its release, another process prunes (or
    deletes) the thread and releases that hold as one a prune left: the first prune
    passes over its gone hold and finishes (its sweep), nothing held is left."""
    ids = _thread(url, "t")
    real = _maintain.reset_ref  # type: ignore[attr-defined]
    calls: list[int] = []

    def reset_then_other(*args: Any, **kwargs: Any) -> Any:
        done = real(*args, **kwargs)
        if not calls:
            calls.append(1)
            subprocess.run([sys.executable, "-c", _OTHER, url, other], check=True, timeout=120)
        return done

    monkeypatch.setattr(_maintain, "reset_ref", reset_then_other)
    with CpstoreSaver.from_conn_string(url) as saver:
        saver.prune(["t"])
        assert calls
        assert saver.store.retained() == {}
        report = saver.store.verify()
        assert report.ok, report
        for ns in _NS:
            steps = _steps(saver, "t", ns)
            if other == "prune":
                assert steps == [4]
                tup = saver.get_tuple(w.cfg("t", ns=ns))
                assert tup is not None
                assert tup.config["configurable"]["checkpoint_id"] == ids[ns][-1]
            else:
                assert steps == []
        if other == "delete":
            assert report.counts["checkpoints"] == 0


@pytest.mark.parametrize("then", ["prune", "delete"])
def test_a_long_id_threads_left_hold_is_released_too(url: str, then: str) -> None:
    """A thread whose id is past a run name (a hashed run, its prune reason a digest):
    the hold a killed keep_latest left is released by the next prune or delete alike."""
    thread = "long-" + "x" * 300
    _thread(url, thread, 3)
    _killed(url, "prune", thread, "cpstore.langgraph._maintain.reset_ref", 1)
    with CpstoreSaver.from_conn_string(url) as saver:
        assert saver.store.retained()  # the killed prune's hold
        if then == "prune":
            saver.prune([thread])
            for ns in _NS:
                assert _steps(saver, thread, ns) == [2]
        else:
            saver.delete_thread(thread)
            for ns in _NS:
                assert _steps(saver, thread, ns) == []
        assert saver.store.retained() == {}
        report = saver.store.verify()
        assert report.ok, report
        assert report.counts["checkpoints"] == (2 if then == "prune" else 0)
