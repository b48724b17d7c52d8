"""Concurrency: many processes and threads on one store; fork() is refused."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cpstore.errors import ConflictError, ForkError, StoreError
from cpstore.store.facade import open as open_store


def child_raises(fn: Callable[[], object], expected: type[BaseException] = ForkError) -> bool:
    """Fork; the child runs ``fn`` and exits 0 only when it raises ``expected`` (1 when it
    returns, 2 on any other exception, never running on into the parent's code). The
    parent waits for it: whether the child raised ``expected``."""
    pid = os.fork()
    if pid == 0:  # child
        code = 2
        try:
            fn()
            code = 1
        except expected:
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def _writer(path: str, run: str, steps: int) -> list[str]:
    with open_store(path) as st:
        rec = st.recorder(run)
        out = [rec.checkpoint(i, {"i": i, "run": run}) for i in range(steps)]
        for i in range(3):
            st.append_audit("note", {"run": run, "i": i})
        return out


class TestProcesses:
    def test_concurrent_writer_processes_all_land(self, tmp_path: Path) -> None:
        """Four processes writing at once: every checkpoint is there, the audit chain holds."""
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(4) as pool:
            results = pool.starmap(_writer, [(str(tmp_path / "s"), f"r{i}", 25) for i in range(4)])
        with open_store(tmp_path / "s") as st:
            for i, ids in enumerate(results):
                assert [m.id for m in st.history(f"r{i}")] == ids[::-1]
            report = st.verify()
            assert report.ok, report.problems
            assert report.counts["audit"] == 12

    def test_use_after_fork_is_refused(self, tmp_path: Path) -> None:
        """A child that touches its parent's store gets ForkError; the parent is unharmed."""
        with open_store(tmp_path / "s") as st:
            key = st.put_object(b"parent")
            assert child_raises(lambda: st.get_object(key))
            assert st.get_object(key) == b"parent"

    def test_reopening_in_a_forked_child_is_a_fork_error(self, tmp_path: Path) -> None:
        """py-lmdb cannot reopen inherited files: open() in the child says so clearly."""
        with open_store(tmp_path / "s"):
            assert child_raises(lambda: open_store(tmp_path / "s"))


class TestThreads:
    def test_readers_run_while_a_writer_writes_and_the_map_grows(self, tmp_path: Path) -> None:
        """Reader threads never see a partial checkpoint, even across map growth."""
        errors: list[BaseException] = []
        with open_store(tmp_path / "s", map_size=1 << 20) as st:
            first = st.recorder("run").checkpoint(0, {"blob": b"x" * 1000})
            stop = threading.Event()

            def reader() -> None:
                try:
                    while not stop.is_set():
                        head = st.ref("run") or first
                        with st.read(head) as cp:
                            state = cp.state()
                            assert isinstance(state, dict) and len(state["blob"]) >= 1000
                except BaseException as exc:  # surfaced below
                    errors.append(exc)

            threads = [threading.Thread(target=reader) for _ in range(3)]
            for t in threads:
                t.start()
            rec = st.recorder("run", parent=first)
            for i in range(1, 40):
                rec.checkpoint(i, {"blob": os.urandom(50_000)})
            stop.set()
            for t in threads:
                t.join()
            assert st.backend.env.env.info()["map_size"] > 1 << 20
        assert not errors, errors

    def test_a_write_that_fails_returns_while_readers_read_without_pause(
        self, tmp_path: Path
    ) -> None:
        """A refused write (its txn aborted) comes back while three threads read nonstop.

        py-lmdb 2.0 to 3.0 make an aborting write txn wait until no read of
        the environment is in flight, which under steady reads never happens;
        pyproject.toml keeps lmdb below 2 for this. The writer runs in a
        thread so a hang fails the test instead of stalling the suite.
        """
        with open_store(tmp_path / "s") as st:
            head = st.recorder("run").checkpoint(0, {"blob": b"x" * 1000})
            stop = threading.Event()
            reads = [0, 0, 0]

            def reader(slot: int) -> None:
                while not stop.is_set():
                    with st.read(head) as cp:
                        cp.state()
                    reads[slot] += 1

            refused: list[BaseException] = []

            def writer() -> None:
                for _ in range(20):
                    try:  # the CAS fails inside the write txn, which is aborted
                        st.set_ref("run", "main", head, expected_old="0" * 32)
                    except ConflictError as exc:
                        refused.append(exc)

            threads = [threading.Thread(target=reader, args=(i,), daemon=True) for i in range(3)]
            for t in threads:
                t.start()
            w = threading.Thread(target=writer, daemon=True)
            w.start()
            w.join(60)
            stop.set()
            for t in threads:
                t.join(60)
            assert not w.is_alive(), "the aborting writer never returned"
            assert len(refused) == 20
            assert all(reads), reads

    def _resize_in_background(self, st: Any) -> threading.Thread:
        """Start growing the map in another thread; return once it waits for readers."""
        grower = threading.Thread(target=st.backend.env.grow, daemon=True)
        grower.start()
        for _ in range(2000):
            if st.backend.env._resizing:
                return grower
            threading.Event().wait(0.005)
        raise AssertionError("the resize never started")

    @staticmethod
    def _finishes(fn: Any, deadlock: str) -> None:
        """Run ``fn`` in a daemon thread; a hang fails the test instead of the suite."""
        t = threading.Thread(target=fn, daemon=True)
        t.start()
        t.join(60)
        assert not t.is_alive(), deadlock

    def test_a_reader_that_writes_while_the_map_grows_gets_an_error_not_a_deadlock(
        self, tmp_path: Path
    ) -> None:
        """A thread in a read block that writes during another thread's resize: StoreError.

        The resize waits for that read to end and holds the write lock, so
        waiting for the lock would never end; the error lets the block end.
        """
        with open_store(tmp_path / "s") as st:
            cid = st.recorder("run").checkpoint(0, {"a": 1})
            size = st.backend.env.env.info()["map_size"]
            outcome: list[object] = []

            def reader_that_writes() -> None:
                try:
                    with st.read(cid):
                        grower = self._resize_in_background(st)
                        st.put_object(b"written inside a read block")
                    outcome.append("wrote")
                except StoreError as exc:
                    outcome.append(exc)
                grower.join(30)
                outcome.append(grower.is_alive())

            self._finishes(reader_that_writes, "deadlock: reader and resize wait on each other")
            assert isinstance(outcome[0], StoreError) and "holds an open read" in str(outcome[0])
            assert outcome[1] is False  # the resize finished once the block ended
            assert st.backend.env.env.info()["map_size"] == 2 * size
            st.put_object(b"after")  # and writes work again

    def test_a_nested_read_while_the_map_grows_does_not_deadlock(self, tmp_path: Path) -> None:
        """A thread holding a read opens another during a resize: it proceeds, then both end."""
        with open_store(tmp_path / "s") as st:
            cid = st.recorder("run").checkpoint(0, {"a": 1})
            states: list[object] = []

            def nested_reader() -> None:
                with st.read(cid) as outer:
                    grower = self._resize_in_background(st)
                    with st.read(cid) as inner:
                        states.append(inner.state())
                    states.append(outer.state())
                grower.join(30)
                states.append(grower.is_alive())

            self._finishes(nested_reader, "deadlock: nested read waits for a resize waiting for it")
            assert states == [{"a": 1}, {"a": 1}, False]

    def test_two_handles_in_one_process_share_the_environment(self, tmp_path: Path) -> None:
        """open() twice on one path works (one LMDB env per process)."""
        with open_store(tmp_path / "s") as a, open_store(tmp_path / "s") as b:
            key = a.put_object(b"shared")
            assert b.get_object(key) == b"shared"
        with pytest.raises(Exception):  # noqa: B017 - any error: the handle is closed
            a.get_object(key)


def _grow_map(path: str, seconds: float, ready: Any) -> int:
    """Write big objects until ``seconds`` pass; returns how often the map grew."""
    with open_store(path, map_size=1 << 20) as st:
        ready.set()
        start, grown, last = time.monotonic(), 0, st.backend.env.env.info()["map_size"]
        i = 0
        while time.monotonic() - start < seconds:
            st.put_object(os.urandom(64) + bytes(256 * 1024) + i.to_bytes(8, "little"))
            i += 1
            size = st.backend.env.env.info()["map_size"]
            grown += size != last
            last = size
        return grown


def _open_read_close(path: str, seconds: float, readonly: bool) -> list[str]:
    """Open, read and close in a loop; returns the failures (as tracebacks)."""
    failures: list[str] = []
    start, rounds = time.monotonic(), 0
    while time.monotonic() - start < seconds:
        rounds += 1
        try:
            with open_store(path, readonly=readonly, map_size=1 << 20) as st:
                st.runs()
                with st.backend.read_txn() as txn:
                    txn.stat(st.backend.db("objects"))
        except StoreError:
            failures.append(traceback.format_exc())
    return failures if rounds > 1 else ["the loop never ran"]


def _read_fast_paths(path: str, seconds: float, readonly: bool) -> list[str]:
    """One open handle: latest, read and history_states in a loop; returns the failures."""
    failures: list[str] = []
    start, rounds = time.monotonic(), 0
    with open_store(path, readonly=readonly, map_size=1 << 20) as st:
        first = st.history("run")[-1].id
        while time.monotonic() - start < seconds:
            rounds += 1
            try:
                with st.latest("run") as cp:
                    assert cp.state() == {"i": 0, "items": [0, {"a": "x" * 500}], "t": "t"}
                with st.read(first) as cp:
                    assert cp.state_part("items") == [0, {"a": "x" * 500}]
                (entry,) = st.history_states("run")
                assert entry.state == {"i": 0, "items": [0, {"a": "x" * 500}], "t": "t"}
            except (StoreError, AssertionError):
                failures.append(traceback.format_exc())
    return failures if rounds > 1 else ["the loop never ran"]


class TestMapGrowthAcrossProcesses:
    @pytest.mark.parametrize("readonly", [False, True], ids=["read-write", "read-only"])
    def test_opening_while_another_process_grows_the_map_never_fails(
        self, tmp_path: Path, readonly: bool
    ) -> None:
        """~8 s of open/read/close beside a process that keeps growing the map: no failure."""
        path = str(tmp_path / "s")
        with open_store(path, map_size=1 << 20):
            pass
        ctx = multiprocessing.get_context("spawn")
        ready = ctx.Manager().Event()
        with ctx.Pool(2) as pool:
            grower = pool.apply_async(_grow_map, (path, 8.0, ready))
            ready.wait(30)
            opener = pool.apply_async(_open_read_close, (path, 7.0, readonly))
            failures = opener.get(60)
            grown = grower.get(60)
        assert grown >= 3, "the map never grew: the test proves nothing"
        assert not failures, f"{len(failures)} failed opens; the first:\n{failures[0]}"

    @pytest.mark.parametrize("readonly", [False, True], ids=["read-write", "read-only"])
    def test_fast_reads_on_an_open_handle_adopt_growth_by_another_process(
        self, tmp_path: Path, readonly: bool
    ) -> None:
        """latest/read/history_states on a handle held open while another process grows the map."""
        path = str(tmp_path / "s")
        with open_store(path, map_size=1 << 20) as st:
            st.recorder("run").checkpoint(0, {"i": 0, "items": [0, {"a": "x" * 500}], "t": "t"})
        ctx = multiprocessing.get_context("spawn")
        ready = ctx.Manager().Event()
        with ctx.Pool(2) as pool:
            grower = pool.apply_async(_grow_map, (path, 6.0, ready))
            ready.wait(30)
            reader = pool.apply_async(_read_fast_paths, (path, 5.0, readonly))
            failures = reader.get(60)
            grown = grower.get(60)
        assert grown >= 3, "the map never grew: the test proves nothing"
        assert not failures, f"{len(failures)} failed reads; the first:\n{failures[0]}"
