"""audit28: root puts of hashed LangGraph threads racing in separate processes, on both
backends. The run a root put records on is sought in its planning read txn
(``_write.root_run``); each worker below stops inside that seek (the read txn open, on
PostgreSQL its snapshot held) until the others reach theirs, or until another process
has changed the thread's entries, so the races are met every run, not by timing."""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

from lg_collide import placed, put_at, scheme1, scheme1_names, values
from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures

import cpstore.store as cpstore_store
from cpstore.langgraph import CpstoreSaver, _write
from cpstore.langgraph._codec import run_for

T = "T" * 198  # a new hashed thread
L = "L" * 198  # a thread an older release put on its scheme-1 run
OLD = scheme1("lg:#", L)
_WAIT = 120.0  # seconds a worker waits for the others before the test fails


@contextmanager
def _older_release() -> Iterator[None]:
    with scheme1_names(), mock.patch.object(_write, "root_run", lambda t, m, tid: run_for(tid)):
        yield


@contextmanager
def _stop_in_first_seek(wait: Any) -> Iterator[None]:
    """Within: the first ``root_run`` of this process calls ``wait()`` once it has read
    the index, before its read txn ends."""
    real = _write.root_run
    fired: list[bool] = []

    def seek(txn: Any, meta: Any, thread_id: str) -> str:
        run = real(txn, meta, thread_id)
        if not fired:
            fired.append(True)
            wait()
        return run

    with mock.patch.object(_write, "root_run", seek):
        yield


def _root_put(url: str, barrier: Any, thread: str, ns: str, cid: str) -> None:
    store = cpstore_store.open(url)
    try:
        with _stop_in_first_seek(lambda: barrier.wait(_WAIT)):
            put_at(CpstoreSaver(store), thread, None, cid, f"{ns}{cid}", ns=ns)
    finally:
        store.close()


def _run(jobs: list[tuple[Any, tuple[Any, ...]]]) -> None:
    """Run each ``(target, args)`` in its own spawned process; all must exit 0 (one that
    hangs is killed, and fails the test)."""
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=target, args=args) for target, args in jobs]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join(_WAIT * 2)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    assert [p.exitcode for p in procs] == [0] * len(procs)


def test_first_root_puts_of_one_new_thread_in_three_processes_share_its_run(url: str) -> None:
    """All three see no entry and pick the thread's scheme-2 run; the one that commits
    first takes ``main``, the others lose the compare-and-set, plan again and fork."""
    barrier = multiprocessing.get_context("spawn").Barrier(3)
    _run([(_root_put, (url, barrier, T, "", cid)) for cid in ("1", "2", "3")])
    store = cpstore_store.open(url)
    try:
        got = placed(store, T)
        assert {run for run, _ in got.values()} == {run_for(T)} and len(got) == 3
        branches = sorted(branch for _, branch in got.values())
        assert branches[0] == "main" and len(set(branches)) == 3  # two forks
        assert sorted(values(CpstoreSaver(store), T)) == ["1", "2", "3"]
        assert store.verify().ok
    finally:
        store.close()


def test_root_puts_of_an_old_thread_and_a_new_one_racing_keep_their_runs(url: str) -> None:
    """L is on its scheme-1 run; two processes put roots of new namespaces of L while a
    third puts thread T's first checkpoint, all seeking at once."""
    store = cpstore_store.open(url)
    with _older_release():
        put_at(CpstoreSaver(store), L, None, "0", "l0")
    store.close()
    barrier = multiprocessing.get_context("spawn").Barrier(3)
    jobs = [(url, barrier, L, "x", "0"), (url, barrier, L, "y", "0"), (url, barrier, T, "", "1")]
    _run([(_root_put, job) for job in jobs])
    store = cpstore_store.open(url)
    try:
        assert {run for run, _ in placed(store, L).values()} == {OLD}
        assert set(placed(store, T).values()) == {(run_for(T), "main")}
        assert store.branches(run_for(L)) == {} and store.verify().ok
    finally:
        store.close()


def _planned_put(url: str, planned: Any, go: Any) -> None:
    store = cpstore_store.open(url)
    try:

        def wait() -> None:
            planned.set()
            assert go.wait(_WAIT)

        with _stop_in_first_seek(wait):
            put_at(CpstoreSaver(store), L, None, "0", "x0", ns="x")
    finally:
        store.close()


def _delete_and_put(url: str, planned: Any, go: Any) -> None:
    store = cpstore_store.open(url)
    try:
        assert planned.wait(_WAIT)
        saver = CpstoreSaver(store)
        saver.delete_thread(L)
        put_at(saver, L, None, "5", "r5")
        go.set()
    finally:
        store.close()


def test_a_root_put_whose_seek_another_process_outdated_loses_nothing(url: str) -> None:
    """One process has read L's scheme-1 run for a root put (its read txn still open);
    another deletes L and puts L's new first checkpoint (scheme-2 run); the first then
    writes on the run it planned. L spans both runs, and every acknowledged checkpoint
    reads, prunes and deletes whole."""
    store = cpstore_store.open(url)
    with _older_release():
        put_at(CpstoreSaver(store), L, None, "0", "l0")
    store.close()
    ctx = multiprocessing.get_context("spawn")
    planned, go = ctx.Event(), ctx.Event()
    _run([(_planned_put, (url, planned, go)), (_delete_and_put, (url, planned, go))])
    store = cpstore_store.open(url)
    try:
        saver = CpstoreSaver(store)
        assert placed(store, L) == {("", "5"): (run_for(L), "main"), ("x", "0"): (OLD, "ns:x")}
        assert sorted(values(saver, L, None)) == ["r5", "x0"] and store.verify().ok
        saver.prune([L])
        assert sorted(values(saver, L, None)) == ["r5", "x0"] and store.verify().ok
        saver.delete_thread(L)
        assert store.branches(OLD) == {} and store.branches(run_for(L)) == {}
        assert store.verify().ok
    finally:
        store.close()
