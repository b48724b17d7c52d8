"""Batched mode with two writing threads: a flush acknowledges only what is committed.

Found while adding a second batched writer thread to the chaos test
(tests/chaos_roles.py, ``batched_writer``): one handle's queue holds every
thread's checkpoints and a flush takes all of it, so thread B's ``flush()``
found the queue empty (thread A's flush had taken B's checkpoints) and returned
at once, before A's commit was durable, and also when A's commit failed and
dropped B's checkpoints: B acknowledged checkpoints the store never held. Now
B's flush waits for the commit holding its checkpoints and raises when it
dropped them (cpstore/store/batch_owners.py).
"""

from __future__ import annotations

import contextlib
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures

import cpstore
from cpstore.errors import ConflictError, CpstoreError
from cpstore.store.lmdb_backend import LmdbBackend


def _move_elsewhere(store: str) -> None:
    """Another process commits a checkpoint on run ``a``: a queued one extending the old head
    now fails its compare-and-set."""
    code = (
        f"import cpstore\nwith cpstore.open({store!r}) as s:\n"
        "    s.recorder('a').checkpoint(9, {'y': 9})\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


class JobThread:
    """One long-lived thread running what it is given, in order (a flush is per thread: the
    thread that queued a checkpoint must be the one that flushes it)."""

    def __init__(self) -> None:
        self._jobs: queue.Queue[Any] = queue.Queue()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            fn, out = job
            try:
                out.put(fn())
            except CpstoreError as exc:
                out.put(exc)

    def start(self, fn: Any) -> queue.Queue[Any]:
        """Run ``fn`` on this thread; its result (or CpstoreError) arrives in the queue."""
        out: queue.Queue[Any] = queue.Queue()
        self._jobs.put((fn, out))
        return out

    def run(self, fn: Any, timeout: float = 120) -> Any:
        """Run ``fn`` on this thread and wait for it (queue.Empty after ``timeout``)."""
        return self.start(fn).get(timeout=timeout)

    def stop(self) -> None:
        self._jobs.put(None)
        self._thread.join(timeout=120)


def check_a_dropped_batch_is_reported_to_every_thread_in_it(store: str) -> None:
    """B queues, A's flush (holding B's checkpoint) fails: B's flush raises, never returns ok."""
    with cpstore.open(store, durability="batched", batch_size=64) as st:
        st.recorder("a").checkpoint(0, {"x": 0})
        st.flush()
        ra, rb, b = st.recorder("a"), st.recorder("b"), JobThread()
        queued_b = b.run(lambda: rb.checkpoint(1, {"b": 1}))
        ra.checkpoint(2, {"x": 2})
        _move_elsewhere(store)
        with pytest.raises(ConflictError):
            st.flush()
        got = b.run(st.flush)
        assert st.ref("b") != queued_b  # dropped with A's batch
        assert isinstance(got, ConflictError), f"B's flush acknowledged a dropped checkpoint: {got}"
        assert "another thread's batch commit" in got.what
        assert b.run(st.flush) is None  # told once; nothing of B's is owed now
        b.stop()


class TestBatchedTwoThreads:
    def test_a_flush_raises_when_another_threads_failed_commit_dropped_its_checkpoints(
        self, tmp_path: Path
    ) -> None:
        """LMDB: B's flush after A's failed flush dropped B's queued checkpoint raises."""
        check_a_dropped_batch_is_reported_to_every_thread_in_it(str(tmp_path / "s"))

    def test_the_same_on_postgres(self, pg_url: str) -> None:  # noqa: F811 - the fixture
        """PostgreSQL: B's flush after A's failed flush dropped B's queued checkpoint raises."""
        check_a_dropped_batch_is_reported_to_every_thread_in_it(pg_url)

    def test_a_flush_waits_for_the_commit_another_thread_took_its_checkpoints_into(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """B's flush does not return while A's commit holding B's checkpoint is under way."""
        with cpstore.open(tmp_path / "s", durability="batched", batch_size=64) as st:
            rb, b = st.recorder("b"), JobThread()
            cid = b.run(lambda: rb.checkpoint(1, {"b": 1}))
            inside, go = threading.Event(), threading.Event()
            real = LmdbBackend._apply

            def slow(self: LmdbBackend, txn: object, op: object) -> None:
                inside.set()
                assert go.wait(timeout=120)
                real(self, txn, op)  # type: ignore[arg-type]

            monkeypatch.setattr(LmdbBackend, "_apply", slow)
            a = threading.Thread(target=st.flush)
            a.start()
            assert inside.wait(timeout=120)  # A took the batch, B's checkpoint in it

            def flush_then_read() -> str | None:
                st.flush()
                return st.ref("b")

            flushed = b.start(flush_then_read)
            try:
                with contextlib.suppress(queue.Empty):
                    early = flushed.get(timeout=0.5)
                    pytest.fail(f"B's flush returned before the commit holding its write: {early}")
            finally:
                go.set()
            a.join(timeout=120)
            assert flushed.get(timeout=120) == cid
            b.stop()


#: Thread B queues checkpoints, opens a read view and flushes inside it, while thread A's
#: flush (holding B's checkpoints) grows the map: the growth waits for B's read to end.
_FLUSH_IN_READ_WHILE_GROWING = """
import os, sys, threading, time
import cpstore
st = cpstore.open(sys.argv[1], durability="batched", batch_size=10_000, map_size=64 * 1024)
base = st.recorder("base").checkpoint(0, {"x": 0})
st.flush()
env, rb = st.backend.env, st.recorder("b")
start = env.env.info()["map_size"]
ready, go, got = threading.Event(), threading.Event(), []
last = []
def b():
    last[:] = [rb.checkpoint(k, {"pad": os.urandom(1500).hex()}) for k in range(40)]
    with st.read(base):
        ready.set()
        go.wait()
        try:
            st.flush()
            got.append("returned")
        except cpstore.CpstoreError as exc:
            got.append(type(exc).__name__)
tb = threading.Thread(target=b, daemon=True)
tb.start()
assert ready.wait(120)
ta = threading.Thread(target=st.flush, daemon=True)
ta.start()
t0 = time.monotonic()
while not env._resizing and time.monotonic() - t0 < 120:
    time.sleep(0.005)
go.set()
tb.join(60)
ta.join(60)
if tb.is_alive() or ta.is_alive():
    print("HANG", flush=True)
    os._exit(3)
grew = env.env.info()["map_size"] > start
print(got[0], grew, st.ref("b") == last[-1], flush=True)
st.close()
"""


def test_a_flush_inside_a_read_view_raises_instead_of_waiting_on_a_growth_waiting_for_it(
    tmp_path: Path,
) -> None:
    """B's flush inside store.read(), its checkpoints in A's commit that grows the map (which
    waits for B's read): B gets OutcomeUnknownError, not a deadlock; A's commit then lands."""
    done = subprocess.run(
        [sys.executable, "-c", _FLUSH_IN_READ_WHILE_GROWING, str(tmp_path / "s")],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"deadlocked or failed: {done.stdout} {done.stderr[-2000:]}"
    assert done.stdout.split() == ["OutcomeUnknownError", "True", "True"]


def check_an_interrupted_flush_never_acknowledges_another_threads_checkpoints(
    store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An interrupt landing in A's flush on taking the batch, or after its commit: B's flush
    then stores its checkpoint or says it may not be stored; never ok for a lost one, never
    "not stored" for a stored one."""
    with cpstore.open(store, durability="batched", batch_size=64) as st:
        backend: Any = st.backend
        rb, b = st.recorder("b"), JobThread()

        def interrupt(*args: object) -> None:
            raise KeyboardInterrupt

        # 1. On entering the owners' bookkeeping (where an async exception lands).
        cid = b.run(lambda: rb.checkpoint(1, {"b": 1}))
        with monkeypatch.context() as m:
            m.setattr(backend._owners, "taken", interrupt)
            with pytest.raises(KeyboardInterrupt):
                st.flush()
        got = b.run(st.flush)
        assert got is None and st.ref("b") == cid, f"B acknowledged a lost checkpoint: {got}"

        # 2. After the commit landed, before the flush returned.
        cid = b.run(lambda: rb.checkpoint(2, {"b": 2}))
        real = backend.write_txn

        def committed_then_interrupted(fn: Any) -> None:
            real(fn)
            raise KeyboardInterrupt

        with monkeypatch.context() as m:
            m.setattr(backend, "write_txn", committed_then_interrupted)
            with pytest.raises(KeyboardInterrupt):
                st.flush()
        got = b.run(st.flush)
        assert st.ref("b") == cid  # it landed
        assert got is None or type(got).__name__ == "OutcomeUnknownError", (
            f"B was told a stored checkpoint is not stored: {got}"
        )
        b.stop()


def test_an_interrupted_flush_never_acknowledges_a_lost_checkpoint_of_another_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LMDB: an interrupt in A's flush never makes B's flush lie about B's checkpoint."""
    check_an_interrupted_flush_never_acknowledges_another_threads_checkpoints(
        str(tmp_path / "s"), monkeypatch
    )


def test_an_interrupted_flush_never_acknowledges_a_lost_checkpoint_on_postgres(
    pg_url: str,  # noqa: F811 - the fixture
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PostgreSQL: an interrupt in A's flush never makes B's flush lie about B's checkpoint."""
    check_an_interrupted_flush_never_acknowledges_another_threads_checkpoints(pg_url, monkeypatch)


#: The main thread queues checkpoints and ends while a daemon flusher thread's commit holds
#: them (a background flusher): the exit hook finds the queue empty.
_EXIT_WHILE_A_DAEMON_COMMITS = """
import sys, threading, time
import cpstore
from cpstore.store.lmdb_backend import LmdbBackend
from cpstore.store.pg_backend import PgBackend
st = cpstore.open(sys.argv[1], durability="batched", batch_size=10_000)
backend = type(st.backend)
inside = threading.Event()
real = backend._apply if backend is LmdbBackend else backend._apply_all
def slow(self, txn, op):
    inside.set()
    time.sleep(2)  # the daemon's commit is under way when the main thread ends
    real(self, txn, op)
setattr(backend, "_apply" if backend is LmdbBackend else "_apply_all", slow)
rec = st.recorder("main")
print(" ".join(rec.checkpoint(k, {"k": k}) for k in range(3)), flush=True)
threading.Thread(target=st.flush, daemon=True).start()
assert inside.wait(120)
"""


def check_exit_waits_for_or_names_checkpoints_in_a_daemon_threads_commit(store: str) -> None:
    """Each checkpoint the main thread queued is stored or named by the exit warning."""
    done = subprocess.run(
        [sys.executable, "-c", _EXIT_WHILE_A_DAEMON_COMMITS, store],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    ids = done.stdout.split()
    assert len(ids) == 3
    with cpstore.open(store) as st:
        stored = st.ref("main") == ids[-1]
    named = "RuntimeWarning" in done.stderr and all(i in done.stderr for i in ids)
    assert stored or named, f"lost at exit without a word: {done.stderr[-2000:]}"


def test_exit_waits_for_or_names_checkpoints_in_a_daemon_threads_commit(tmp_path: Path) -> None:
    """LMDB: a daemon flusher's commit of the main thread's checkpoints is awaited or named."""
    check_exit_waits_for_or_names_checkpoints_in_a_daemon_threads_commit(str(tmp_path / "s"))


def test_exit_waits_for_or_names_checkpoints_in_a_daemon_commit_on_postgres(
    pg_url: str,  # noqa: F811 - the fixture
) -> None:
    """PostgreSQL: a daemon flusher's commit of the main thread's checkpoints is awaited or
    named."""
    check_exit_waits_for_or_names_checkpoints_in_a_daemon_threads_commit(pg_url)


#: The main thread's checkpoints are in thread A's commit when the process forks; the child
#: (where no thread will ever settle that commit) calls flush() on its copy of the handle.
_FLUSH_IN_A_FORK_CHILD = """
import os, sys, threading
import cpstore
from cpstore.errors import ForkError
from cpstore.store.lmdb_backend import LmdbBackend
st = cpstore.open(sys.argv[1], durability="batched", batch_size=10_000)
backend = type(st.backend)
name = "_apply" if backend is LmdbBackend else "_apply_all"
inside, go = threading.Event(), threading.Event()
real = getattr(backend, name)
def held(self, txn, op):
    inside.set()
    assert go.wait(120)
    real(self, txn, op)
setattr(backend, name, held)
st.recorder("main").checkpoint(1, {"k": 1})
a = threading.Thread(target=st.flush)
a.start()
assert inside.wait(120)
pid = os.fork()
if pid == 0:
    import signal
    signal.alarm(60)  # a hung child ends (no output) instead of outliving the test
    try:
        st.flush()
        print("child flush returned", flush=True)
    except ForkError:
        print("ForkError", flush=True)
    os._exit(0)
go.set()
a.join(120)
_, status = os.waitpid(pid, 0)
st.close()
"""


def check_a_flush_in_a_fork_child_raises_fork_error(store: str) -> None:
    """A fork child's flush of the parent's handle raises ForkError; it never waits for the
    parent's commit, which no thread of the child settles."""
    done = subprocess.run(
        [sys.executable, "-c", _FLUSH_IN_A_FORK_CHILD, store],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["ForkError"], done.stdout


def test_a_flush_in_a_fork_child_raises_fork_error(tmp_path: Path) -> None:
    """LMDB: a fork child's flush raises ForkError while the parent's commit holds its
    checkpoints (it hung)."""
    check_a_flush_in_a_fork_child_raises_fork_error(str(tmp_path / "s"))


def test_a_flush_in_a_fork_child_raises_fork_error_on_postgres(
    pg_url: str,  # noqa: F811 - the fixture
) -> None:
    """PostgreSQL: a fork child's flush raises ForkError while the parent's commit holds its
    checkpoints (it hung)."""
    check_a_flush_in_a_fork_child_raises_fork_error(pg_url)


def check_an_interrupt_settling_a_batch_never_leaves_another_thread_waiting(
    store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An interrupt landing as A's flush settles its committed batch: B's flush of the
    checkpoint that batch held still returns (it is stored), and does not wait forever."""
    with cpstore.open(store, durability="batched", batch_size=64) as st:
        backend: Any = st.backend
        owners = backend._owners
        rb, b = st.recorder("b"), JobThread()
        cid = b.run(lambda: rb.checkpoint(1, {"b": 1}))
        real = owners.settled
        calls: list[object] = []

        def interrupted_once(*args: Any) -> None:
            calls.append(args)
            if len(calls) == 1:
                raise KeyboardInterrupt  # lands on entering the function: nothing settled
            real(*args)

        monkeypatch.setattr(owners, "settled", interrupted_once)
        with pytest.raises(KeyboardInterrupt):
            st.flush()
        monkeypatch.undo()
        got = b.start(st.flush)
        try:
            result = got.get(timeout=60)
        except queue.Empty:
            with owners._cond:  # release B for the rest of the run, then fail
                owners._flying.clear()
                owners._cond.notify_all()
            pytest.fail("B's flush waits forever for a batch nobody settles")
        assert result is None and st.ref("b") == cid
        b.stop()


def test_an_interrupt_settling_a_batch_never_leaves_another_thread_waiting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LMDB: an interrupt as A settles its committed batch leaves no thread waiting forever."""
    check_an_interrupt_settling_a_batch_never_leaves_another_thread_waiting(
        str(tmp_path / "s"), monkeypatch
    )


def test_an_interrupt_settling_a_batch_never_leaves_another_thread_waiting_on_postgres(
    pg_url: str,  # noqa: F811 - the fixture
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PostgreSQL: an interrupt as A settles its committed batch leaves no thread waiting."""
    check_an_interrupt_settling_a_batch_never_leaves_another_thread_waiting(pg_url, monkeypatch)
