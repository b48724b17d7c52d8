"""Group commit (sync durability): concurrent threads' checkpoints share one txn and fsync."""

from __future__ import annotations

import multiprocessing
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from cpstore.errors import ConflictError, StoreError
from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store
from cpstore.store.group_commit import GroupCommit, _Slot


class _Gate:
    """A commit_many that holds its first group until told, recording every group."""

    def __init__(self, fail: set[str] | None = None) -> None:
        self.groups: list[list[str]] = []
        self.stored: list[str] = []
        self.release = threading.Event()
        self.entered = threading.Event()
        self.fail = fail or set()

    def __call__(self, writes: Sequence[str]) -> None:
        self.groups.append(list(writes))
        if len(self.groups) == 1:
            self.entered.set()
            self.release.wait(10)
        bad = [w for w in writes if w in self.fail]
        if bad:
            raise ValueError(f"refused {bad[0]}")
        self.stored.extend(writes)


def _committer(
    gc: GroupCommit[str], outcome: dict[str, str], *, message: bool = False
) -> Callable[[str], None]:
    """A thread target committing one write and recording "ok" or its exception's type
    (with its message when ``message``) in ``outcome``."""

    def one(name: str) -> None:
        try:
            gc.commit(name)
            outcome[name] = "ok"
        except BaseException as exc:
            outcome[name] = f"{type(exc).__name__}: {exc}" if message else type(exc).__name__

    return one


def _queue_behind_leader(gc: GroupCommit[str], gate: _Gate, names: list[str]) -> dict[str, str]:
    """Leader commits 'lead'; ``names`` queue while it holds; returns name -> outcome."""
    outcome: dict[str, str] = {}
    one = _committer(gc, outcome, message=True)

    lead = threading.Thread(target=one, args=("lead",))
    lead.start()
    assert gate.entered.wait(10)
    others = [threading.Thread(target=one, args=(n,)) for n in names]
    for t in others:
        t.start()
    _wait_for(lambda: len(gc._queue) >= len(names))
    gate.release.set()
    for t in [lead, *others]:
        t.join(10)
    return outcome


class TestGrouping:
    def test_writes_queued_behind_a_leader_commit_in_one_group(self) -> None:
        """Three writes that queue while a group commits go in the next group, together."""
        gate = _Gate()
        gc = GroupCommit[str](gate)
        outcome = _queue_behind_leader(gc, gate, ["a", "b", "c"])
        assert outcome == {"lead": "ok", "a": "ok", "b": "ok", "c": "ok"}
        assert gate.groups[0] == ["lead"]
        assert sorted(gate.groups[1]) == ["a", "b", "c"]
        assert (gc.groups, gc.writes) == (2, 4)

    def test_a_failing_write_fails_alone_and_the_rest_commit(self) -> None:
        """One refused write in a group: the group is retried write by write; only it fails."""
        gate = _Gate(fail={"b"})
        gc = GroupCommit[str](gate)
        outcome = _queue_behind_leader(gc, gate, ["a", "b", "c"])
        assert outcome["b"] == "ValueError: refused b"
        assert {k: v for k, v in outcome.items() if k != "b"} == {
            "lead": "ok",
            "a": "ok",
            "c": "ok",
        }
        assert sorted(gate.stored) == ["a", "c", "lead"]
        assert gc.writes == 3

    def test_an_interrupted_leader_leaves_no_follower_waiting(self) -> None:
        """KeyboardInterrupt in the leader: it re-raises; followers get StoreError, not a hang."""
        calls: list[list[str]] = []
        entered, release = threading.Event(), threading.Event()

        def commit_many(writes: Sequence[str]) -> None:
            calls.append(list(writes))
            if len(calls) == 1:
                entered.set()
                release.wait(10)
            elif "boom" in writes:
                raise KeyboardInterrupt

        gc = GroupCommit[str](commit_many)
        outcome: dict[str, str] = {}
        one = _committer(gc, outcome)

        first = threading.Thread(target=one, args=("first",))
        first.start()
        assert entered.wait(10)
        # "boom" queues first so it leads the second group (and is interrupted in it).
        boom = threading.Thread(target=one, args=("boom",))
        boom.start()
        _wait_for(lambda: len(gc._queue) >= 1)
        other = threading.Thread(target=one, args=("other",))
        other.start()
        _wait_for(lambda: len(gc._queue) >= 2)
        release.set()
        for t in (first, boom, other):
            t.join(10)
            assert not t.is_alive()
        assert outcome["first"] == "ok"
        assert sorted([outcome["boom"], outcome["other"]]) == ["KeyboardInterrupt", "StoreError"]

    def test_a_writer_interrupted_while_timing_the_queue_leaves_no_writer_waiting(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Ctrl-C while the first queued writer waits for others: its write is not stored,
        and a later writer commits."""
        gate = _Gate()
        gate.release.set()
        gc = GroupCommit[str](gate)
        gc._last_size, gc._last_seconds = 3, 10.0
        go = threading.Event()
        go.set()
        _interrupt_timed_wait_of(monkeypatch, "x", go)
        with pytest.raises(KeyboardInterrupt):
            gc.commit("x")
        assert gc._queue == [] and gc._timer is None
        gc._last_seconds = 0.0  # "y" times the queue alone and gives up at once
        later = threading.Thread(target=gc.commit, args=("y",), daemon=True)
        later.start()
        later.join(10)
        assert not later.is_alive()  # no writer waits for one that is gone
        assert gate.stored == ["y"]  # "x" was never handed to a group

    def test_an_interrupted_first_writer_hands_the_queue_to_the_next(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The writer timing the queue is interrupted: the writer queued behind it is woken,
        times the queue itself and commits; the interrupted write is not stored."""
        gate = _Gate()
        gate.release.set()
        gc = GroupCommit[str](gate)
        gc._last_size, gc._last_seconds = 5, 0.05
        monkeypatch.setattr("cpstore.store.group_commit.MAX_GATHER_SECONDS", 0.05)
        go = threading.Event()
        _interrupt_timed_wait_of(monkeypatch, "x", go)
        outcome: dict[str, str] = {}
        one = _committer(gc, outcome)

        first = threading.Thread(target=one, args=("x",))
        first.start()
        _wait_for(lambda: gc._timer is not None)
        second = threading.Thread(target=one, args=("y",))
        second.start()
        _wait_for(lambda: len(gc._queue) >= 2)
        go.set()  # x's timed wait raises now; y sleeps without a deadline until woken
        for t in (first, second):
            t.join(10)
            assert not t.is_alive()
        assert outcome == {"x": "KeyboardInterrupt", "y": "ok"}
        assert gate.stored == ["y"]

    def test_an_interrupt_between_taking_and_committing_puts_the_group_back(self) -> None:
        """A group taken but never handed to commit_many goes back to the queue in order,
        and the next writer in it commits it."""
        gate = _Gate()
        gate.release.set()
        gc = GroupCommit[str](gate)
        a, b, c = _Slot("a"), _Slot("b"), _Slot("c")
        gc._queue = [a, b, c]
        taken = gc._take()
        gc._abandon(b, taken)  # b's thread took the group and was interrupted
        assert gc._queue == [a, c] and not gc._committing
        assert a.wake.acquire(timeout=0)  # a was woken to take or time the queue
        assert not c.wake.acquire(timeout=0)  # only the first


def _interrupt_timed_wait_of(
    monkeypatch: pytest.MonkeyPatch, write: str, go: threading.Event
) -> None:
    """The slot of ``write`` gets a wake lock whose timed wait raises KeyboardInterrupt
    (what Ctrl-C raises in the main thread) once ``go`` is set."""
    real = _Slot.__init__

    class Interrupting:
        def __init__(self) -> None:
            self.lock = threading.Lock()
            self.lock.acquire()

        def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
            if timeout != -1:
                go.wait(30)
                raise KeyboardInterrupt
            return self.lock.acquire()

        def release(self) -> None:
            self.lock.release()

    def init(slot: _Slot[str], w: str) -> None:
        real(slot, w)
        if w == write:
            slot.wake = Interrupting()  # type: ignore[assignment]

    monkeypatch.setattr(_Slot, "__init__", init)


def _wait_for(cond: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not cond():
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.001)


class TestWakeUps:
    def test_writes_that_queue_wake_no_waiting_writer(self) -> None:
        """Arrivals behind a committing group wake nobody; the group's end wakes only the
        first queued writer, which commits the queue in its own thread."""
        gate = _Gate()
        gc = GroupCommit[str](gate)
        committers: dict[str, str] = {}
        real = gate.__call__

        def commit_many(writes: Sequence[str]) -> None:
            committers[writes[0]] = threading.current_thread().name
            real(writes)

        gc._commit_many = commit_many
        lead = threading.Thread(target=gc.commit, args=("lead",), name="lead")
        lead.start()
        assert gate.entered.wait(10)
        names = ["a", "b", "c"]
        others = [threading.Thread(target=gc.commit, args=(n,), name=n) for n in names]
        for k, t in enumerate(others, 1):
            t.start()
            _wait_for(lambda k=k: len(gc._queue) == k)  # type: ignore[misc]
        assert [s.write for s in gc._queue] == names
        assert not any(s.signalled for s in gc._queue)  # nobody woken by an arrival
        gate.release.set()
        for t in [lead, *others]:
            t.join(10)
            assert not t.is_alive()
        assert gate.groups == [["lead"], names]
        assert committers == {"lead": "lead", "a": "a"}  # the first queued took the queue

    def test_the_write_that_completes_a_group_commits_it_in_its_own_thread(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """With the last group's size reached, the completing writer commits at once: the
        writer timing the queue is not woken to do it."""
        monkeypatch.setattr("cpstore.store.group_commit.MAX_GATHER_SECONDS", 30.0)
        gate = _Gate()
        gate.release.set()
        gate.groups.append([])  # no first group to hold
        gc = GroupCommit[str](gate)
        gc._last_size, gc._last_seconds = 3, 30.0
        committer: list[str] = []
        real = gate.__call__

        def commit_many(writes: Sequence[str]) -> None:
            committer.append(threading.current_thread().name)
            real(writes)

        gc._commit_many = commit_many
        threads = []
        for k, n in enumerate("xyz", 1):
            t = threading.Thread(target=gc.commit, args=(n,), name=n)
            t.start()
            threads.append(t)
            if n != "z":
                _wait_for(lambda k=k: len(gc._queue) == k)  # type: ignore[misc]
        for t in threads:
            t.join(10)  # a timer woken only at its 30 s deadline would fail this
            assert not t.is_alive()
        assert gate.groups[1:] == [["x", "y", "z"]]
        assert committer == ["z"]

    def test_many_writers_with_failing_writes_each_get_their_own_outcome(self) -> None:
        """8 threads x 150 writes, every 7th refused, group sizes varying: every call
        returns, a refused write fails alone, every other write is stored exactly once."""
        stored: list[str] = []
        lock = threading.Lock()

        def commit_many(writes: Sequence[str]) -> None:
            if any(w.endswith("!") for w in writes):
                raise ValueError("refused")
            time.sleep(0.0002 * (len(writes) % 3))  # an fsync of varying length
            with lock:
                stored.extend(writes)

        gc = GroupCommit[str](commit_many)
        outcome: dict[str, str] = {}

        def writer(i: int) -> None:
            for k in range(150):
                w = f"{i}.{k}" + ("!" if k % 7 == 3 else "")
                try:
                    gc.commit(w)
                    outcome[w] = "ok"
                except ValueError:
                    outcome[w] = "refused"

        threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
            assert not t.is_alive(), "a writer never returned"
        assert len(outcome) == 8 * 150
        assert all((v == "refused") == k.endswith("!") for k, v in outcome.items())
        assert sorted(stored) == sorted(k for k, v in outcome.items() if v == "ok")
        assert gc.writes == len(stored) and gc._queue == [] and not gc._committing


class TestGathering:
    def _group_of_three(self, gc: GroupCommit[str], gate: _Gate) -> None:
        _queue_behind_leader(gc, gate, ["a", "b"])  # groups: [lead], [a, b]
        gc._last_size, gc._last_seconds = 3, 10.0

    def test_a_new_leader_waits_for_as_many_writes_as_its_last_group(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """After a group of 3, the next leader holds its txn until two more writes queue."""
        monkeypatch.setattr("cpstore.store.group_commit.MAX_GATHER_SECONDS", 30.0)
        gate = _Gate()
        gc = GroupCommit[str](gate)
        self._group_of_three(gc, gate)
        done: list[str] = []

        def commit(name: str) -> None:
            gc.commit(name)
            done.append(name)

        first = threading.Thread(target=commit, args=("x",))
        first.start()
        _wait_for(lambda: gc._timer is not None or bool(done))
        time.sleep(0.05)  # a leader that did not gather would commit "x" alone now
        assert not done and len(gate.groups) == 2  # gathering, not committing
        others = [threading.Thread(target=commit, args=(n,)) for n in "yz"]
        for t in others:
            t.start()
        for t in [first, *others]:
            t.join(10)
        assert sorted(gate.groups[2]) == ["x", "y", "z"]
        assert sorted(done) == ["x", "y", "z"]

    def test_writes_queued_during_a_commit_count_toward_the_next_group(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """One writer commits while three queue: the next group waits for four (the
        returning writer too), not three, so a late writer is not left out for good."""
        monkeypatch.setattr("cpstore.store.group_commit.MAX_GATHER_SECONDS", 30.0)
        gate = _Gate()
        gc = GroupCommit[str](gate)
        lead = threading.Thread(target=gc.commit, args=("lead",))
        lead.start()
        assert gate.entered.wait(10)
        others = [threading.Thread(target=gc.commit, args=(n,)) for n in "abc"]
        for k, t in enumerate(others, 1):
            t.start()
            _wait_for(lambda k=k: len(gc._queue) == k)  # type: ignore[misc]
        time.sleep(0.5)  # the first group takes >= 0.5 s: so long may the next one gather
        gate.release.set()
        lead.join(10)
        _wait_for(lambda: gc._timer is not None)
        time.sleep(0.05)  # a target of the last group's size (1) commits a, b, c now
        assert gate.groups == [["lead"]]
        back = threading.Thread(target=gc.commit, args=("d",))
        back.start()
        for t in [*others, back]:
            t.join(10)
            assert not t.is_alive()
        assert gate.groups == [["lead"], ["a", "b", "c", "d"]]

    def test_a_gathering_leader_gives_up_after_the_cap(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Writers that never come cost the leader at most the cap; it then commits alone."""
        monkeypatch.setattr("cpstore.store.group_commit.MAX_GATHER_SECONDS", 0.05)
        gate = _Gate()
        gc = GroupCommit[str](gate)
        self._group_of_three(gc, gate)
        t = threading.Thread(target=gc.commit, args=("alone",))
        t.start()
        t.join(10)
        assert not t.is_alive()
        assert gate.groups[2] == ["alone"]
        assert gc._last_size == 1  # so the next lone writer does not wait at all


def _record(path: Path, run: str, steps: int, ids: dict[str, list[str]]) -> None:
    with open_store(path) as st:
        rec = st.recorder(run)
        ids[run] = [rec.checkpoint(i, {"i": i, "run": run, "pad": "x" * 500}) for i in range(steps)]


def _race_two_recorders(st: Store) -> list[str]:
    recs = [st.recorder("run") for _ in range(2)]
    outcome: list[str] = []
    barrier = threading.Barrier(2)

    def go(i: int) -> None:
        barrier.wait()
        try:
            outcome.append(recs[i].checkpoint(1, {"v": i, "t": time.time()}))
        except ConflictError:
            outcome.append("conflict")

    threads = [threading.Thread(target=go, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    return outcome


class TestStoreThreads:
    def test_concurrent_thread_writers_all_land_in_order(self, tmp_path: Path) -> None:
        """Eight threads in sync mode: every branch's history is exactly its acknowledged ids."""
        path = tmp_path / "s"
        ids: dict[str, list[str]] = {}
        with open_store(path) as st:
            threads = [
                threading.Thread(target=_record, args=(path, f"r{i}", 30, ids)) for i in range(8)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            for run, got in ids.items():
                assert [m.id for m in st.history(run)] == got[::-1]
            assert len(ids) == 8
            report = st.verify()
            assert report.ok, report.problems

    def test_racing_recorders_on_one_branch_one_wins_per_head(self, tmp_path: Path) -> None:
        """Two recorders from one head in two threads: one checkpoint lands, the other conflicts."""
        with open_store(tmp_path / "s") as st:
            base = st.recorder("run").checkpoint(0, {"v": 0})
            for _ in range(20):
                outcome = _race_two_recorders(st)
                assert outcome.count("conflict") == 1, outcome
                assert st.ref("run") == next(o for o in outcome if o != "conflict")
            assert st.history("run")[-1].id == base
            assert st.verify().ok


CHILD = r"""
import sys, threading
from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store
path, tag = sys.argv[1], sys.argv[2]
st = open_store(path)
lock = threading.Lock()
def write(t):
    rec = st.recorder(f"{tag}-{t}")
    for step in range(100000):
        cid = rec.checkpoint(step, {"step": step, "pad": "y" * 800})
        with lock:
            print(cid, flush=True)
for t in range(4):
    threading.Thread(target=write, args=(t,), daemon=True).start()
threading.Event().wait()
"""


def _proc_writer(path: str, run: str, steps: int) -> list[str]:
    ids: dict[str, list[str]] = {}
    threads = [
        threading.Thread(target=_record, args=(Path(path), f"{run}-{t}", steps, ids))
        for t in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return [cid for name in sorted(ids) for cid in ids[name]]


def killed_writers_acknowledged(script: str, path: Path, delays: Sequence[float]) -> list[str]:
    """Run the writer ``script`` (argv: ``path``, "k<i>") once per delay, SIGKILLed that
    many seconds after it started writing (less the ~0.3 s an idle machine takes to start
    it); the ids the children printed (acknowledged), checked not empty.

    The clock starts at the child's first acknowledged id, not at its spawn: on a loaded
    machine the import alone once outlasted every delay, and no child wrote anything.
    """
    acknowledged: list[str] = []
    for i, delay in enumerate(delays):
        child = subprocess.Popen(
            [sys.executable, "-c", script, str(path), f"k{i}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        ready, _, _ = select.select([child.stdout], [], [], 120)
        first = child.stdout.readline() if ready else ""
        if not first:  # it died, or never wrote within 2 minutes: say why
            child.kill()
            out, err = child.communicate()
            raise AssertionError(f"writer child k{i} wrote nothing: {err[-2000:]}")
        time.sleep(max(0.02, delay - 0.3))
        child.send_signal(signal.SIGKILL)
        out, err = child.communicate()
        assert child.returncode == -signal.SIGKILL, err
        acknowledged += first.split() + out.split()
    assert acknowledged, "no child acknowledged a checkpoint before being killed"
    return acknowledged


class TestStoreProcesses:
    def test_processes_of_grouping_threads_all_land(self, tmp_path: Path) -> None:
        """Four processes of three writer threads each: every acknowledged checkpoint is stored."""
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(4) as pool:
            jobs = [(str(tmp_path / "s"), f"p{i}", 15) for i in range(4)]
            results = pool.starmap(_proc_writer, jobs)
        with open_store(tmp_path / "s") as st:
            for ids in results:
                assert len(ids) == 45
                for cid in ids:
                    with st.read(cid) as cp:
                        cp.state()
            assert len(st.runs()) == 12
            report = st.verify()
            assert report.ok, report.problems

    @pytest.mark.parametrize("kills", [6])
    def test_sigkill_of_grouping_writers_loses_nothing_acknowledged(
        self, tmp_path: Path, kills: int
    ) -> None:
        """Processes of four grouping writer threads killed mid-write: every printed id is whole."""
        path = tmp_path / "s"
        acknowledged = killed_writers_acknowledged(
            CHILD, path, [0.4 + 0.07 * i for i in range(kills)]
        )
        with open_store(path) as st:
            report = st.verify()
            assert report.ok, report.problems
            for cid in acknowledged:
                with st.read(cid) as cp:
                    state = cp.state()
                    assert isinstance(state, dict) and state["pad"] == "y" * 800


class TestReadHeldDuringGroup:
    def test_a_writer_holding_a_read_while_the_map_grows_gets_an_error_not_a_deadlock(
        self, tmp_path: Path
    ) -> None:
        """A thread that commits inside a read block never waits on a group a resize blocks.

        The grower waits for that read; a leader waits for the grower's write
        lock; were the reader queued behind the leader, no one would move.
        """
        with open_store(tmp_path / "s") as st:
            lead_rec, read_rec = st.recorder("lead"), st.recorder("reader")
            head = read_rec.checkpoint(0, {"v": 0})
            lead_rec.checkpoint(0, {"v": 0})
            reading, go = threading.Event(), threading.Event()
            outcome: dict[str, str] = {}

            def reader() -> None:
                with st.read(head):
                    reading.set()
                    go.wait(30)
                    try:
                        read_rec.checkpoint(1, {"v": 1})
                        outcome["reader"] = "ok"
                    except StoreError as exc:
                        outcome["reader"] = exc.what

            def leader() -> None:
                lead_rec.checkpoint(1, {"v": 1})
                outcome["leader"] = "ok"

            r = threading.Thread(target=reader, daemon=True)
            r.start()
            assert reading.wait(30)
            grower = threading.Thread(target=st.backend.env.grow, daemon=True)
            grower.start()
            _wait_for(lambda: bool(st.backend.env._resizing))
            lead = threading.Thread(target=leader, daemon=True)
            lead.start()
            _wait_for(lambda: bool(st.backend.group._committing))
            go.set()
            for t in (r, grower, lead):
                t.join(60)
                assert not t.is_alive(), "deadlock: a thread never returned"
            assert outcome["leader"] == "ok"
            assert "holds an open read view" in outcome["reader"]
            assert st.ref("lead") is not None and st.verify().ok

    def test_a_commit_inside_a_read_block_is_stored_without_joining_a_group(
        self, tmp_path: Path
    ) -> None:
        """A checkpoint written while its thread holds a read is committed alone, and stored."""
        with open_store(tmp_path / "s") as st:
            rec = st.recorder("run")
            first = rec.checkpoint(0, {"v": 0})
            writes = st.backend.group.writes
            with st.read(first):
                second = rec.checkpoint(1, {"v": 1})
            assert st.backend.group.writes == writes
            assert st.ref("run") == second
