"""Store layout 5, adversarial: what the heap (content.py) must hold under damage, seq
reuse, mixed layouts and another process's upgrade (audit6's findings and checks)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from stored import damage, to_layout_4

import cpstore
import cpstore.store.recorder as recorder_module
from cpstore.errors import ConflictError, IntegrityError, NotFoundError, StoreError
from cpstore.store.branches import head_of
from cpstore.store.content import records_of
from cpstore.store.facade import Store
from cpstore.store.transfer import transfer


def _record(st: Store, run: str, steps: int, start: int = 0) -> list[str]:
    rec = st.recorder(run)
    return [rec.checkpoint(i, {"a": f"{run} {i} " * 40, "b": i}) for i in range(start, steps)]


def _b(state: object) -> object:
    """Part "b" of a parts state."""
    assert isinstance(state, dict)
    return state["b"]


_WRITE = (
    "import sys, cpstore\n"
    "with cpstore.open(sys.argv[1]) as st:\n"
    "    rec = st.recorder('old')\n"
    "    print(rec.checkpoint(9, {'a': 'old new ' * 40, 'b': 9}))\n"
)


def _write_in_another_process(path: Path) -> str:
    """Run ``_WRITE`` (a writable open: it upgrades the store) in a child; its checkpoint id."""
    return subprocess.run(
        [sys.executable, "-c", _WRITE, str(path)],
        check=True,
        timeout=60,
        capture_output=True,
        text=True,
    ).stdout.strip()


class TestAppendRefused:
    def test_a_put_whose_heap_append_is_refused_is_not_acknowledged(self, tmp_path: Path) -> None:
        """A stray heap key sorting after every seq makes MDB_APPEND refuse the entry: the put
        raises IntegrityError and writes nothing, instead of an index row naming no entry."""
        with cpstore.open(tmp_path / "s") as st:
            _record(st, "r", 1)
            damage(st, lambda txn, dbs: txn.put(b"\x00\x05", b"stray", db=dbs["heap"]))
            with pytest.raises(IntegrityError, match="heap"):
                st.put_object(b"a new object " * 20)
            with pytest.raises(IntegrityError, match="heap"):
                _record(st, "r", 2, start=1)
            with st.backend.read_txn() as txn:  # nothing of either put landed
                assert txn.stat(st.backend.db("oloc"))["entries"] == 2
                assert txn.stat(st.backend.db("cloc"))["entries"] == 1
            assert any("heap/0005" in p.where for p in st.verify().problems)


class TestReadOnlyAcrossUpgrade:
    def test_a_nested_read_across_another_process_upgrade_never_misreports(
        self, tmp_path: Path
    ) -> None:
        """A read-only layout-4 handle whose thread holds a read while another process
        upgrades and writes: a nested read raises StoreError (end the outer read), never
        NotFoundError for the acknowledged checkpoint nor a false IntegrityError or verify
        problem; once the outer read ends, everything reads."""
        path = tmp_path / "s"
        with cpstore.open(path) as st:
            old = _record(st, "old", 3)
        to_layout_4(path)
        with cpstore.open(path, readonly=True) as ro:
            with ro.read(old[0]) as outer:
                new = _write_in_another_process(path)
                attempts: list[Any] = [
                    lambda: ro.ref("old"),
                    lambda: ro.read(new).__enter__(),
                    lambda: ro.latest("old").__enter__(),
                    ro.verify,
                ]
                for attempt in attempts:
                    with pytest.raises(StoreError, match="upgraded") as info:
                        attempt()
                    assert not isinstance(info.value, (IntegrityError, NotFoundError))
                assert outer.state_part("b") == 0  # the outer read's snapshot reads on
            assert ro.ref("old") == new
            with ro.read(new) as cp:
                assert cp.state_part("b") == 9
            report = ro.verify()
            assert report.ok, report.problems


class TestCommitFindsObjects:
    def test_a_commit_naming_an_object_whose_heap_entry_is_gone_is_refused(
        self, tmp_path: Path
    ) -> None:
        """An inherited part whose oloc row names a missing heap entry: the next checkpoint is
        refused with IntegrityError naming the location, not acknowledged unreadable (as a
        layout-4 store refuses one whose object row is gone)."""
        with cpstore.open(tmp_path / "s") as st:
            rec = st.recorder("r")
            first = rec.checkpoint(0, {"a": "A" * 300, "b": 0})
            with st.read(first) as cp:
                part = bytes(cp.manifest.raw["state"]["parts"]["a"])

            def drop(txn: Any, dbs: Any) -> None:
                txn.delete(bytes(txn.get(part, db=dbs["oloc"])), db=dbs["heap"])

            damage(st, drop)
            with pytest.raises(IntegrityError, match="not stored") as info:
                rec.checkpoint(1, {"a": "A" * 300, "b": 1})
            assert f"oloc/{part.hex()}" in str(info.value.where)
            assert st.ref("r") == first  # nothing acknowledged

    def test_a_commit_whose_parent_record_location_is_gone_is_refused(self, tmp_path: Path) -> None:
        """The parent's cloc row names a missing heap entry: the child is refused with
        IntegrityError naming the location (the parent check follows the location as the
        must-exist check does), and the branch does not move."""
        with cpstore.open(tmp_path / "s") as st:
            rec = st.recorder("r")
            first = rec.checkpoint(0, {"a": 0})
            parent = bytes.fromhex(first)

            def drop(txn: Any, dbs: Any) -> None:
                txn.delete(bytes(txn.get(parent, db=dbs["cloc"])), db=dbs["heap"])

            damage(st, drop)
            with pytest.raises(IntegrityError) as info:
                rec.checkpoint(1, {"a": 1})
            assert f"cloc/{first}" in str(info.value.where)
            with st.backend.read_txn() as txn:  # nothing acknowledged: still one record
                assert records_of(st.backend.dbs).count(txn) == 1

    def test_a_push_onto_a_destination_whose_object_location_is_damaged_is_refused(
        self, tmp_path: Path
    ) -> None:
        """The destination's oloc row names a missing heap entry for an object the pushed
        branch needs: the push raises IntegrityError, no ref lands on an unreadable state."""
        src, dst = tmp_path / "src", tmp_path / "dst"
        with cpstore.open(src) as st:
            rec = st.recorder("r")
            head = rec.checkpoint(0, {"a": "A" * 300, "b": 0})
        with cpstore.open(src) as st, st.read(head) as cp:
            part = bytes(cp.manifest.raw["state"]["parts"]["a"])
            data = bytes(st.get_object(part))
        with cpstore.open(dst) as st:
            st.put_object(data)

            def drop(txn: Any, dbs: Any) -> None:
                txn.delete(bytes(txn.get(part, db=dbs["oloc"])), db=dbs["heap"])

            damage(st, drop)
        with cpstore.open(src) as st, cpstore.open(dst) as d:
            with pytest.raises(IntegrityError) as info:  # its seq may be taken again meanwhile
                transfer(st.backend, d.backend)
            assert f"oloc/{part.hex()}" in str(info.value.where)
            assert d.ref("r") is None

    def test_a_view_made_before_another_process_upgrades_reads_heap_parts_once_entered(
        self, tmp_path: Path
    ) -> None:
        """A latest() view of a read-only layout-4 handle, made before another process
        upgrades and writes, is entered after: it reads the new head's parts from the heap
        (it said "object not in the store" for an acknowledged checkpoint)."""
        path = tmp_path / "s"
        with cpstore.open(path) as st:
            _record(st, "old", 2)
        to_layout_4(path)
        with cpstore.open(path, readonly=True) as ro:
            view = ro.latest("old")
            new = _write_in_another_process(path)
            with view as cp:
                assert cp.id == new
                assert cp.state() == {"a": "old new " * 40, "b": 9}


_CHURN = """
import sys, threading, cpstore
path, round_ = sys.argv[1], int(sys.argv[2])
lock = threading.Lock()
def say(line):
    with lock:
        sys.stdout.write(line + "\\n")
        sys.stdout.flush()
with cpstore.open(path) as st:
    def keep(t):
        rec = st.recorder(f"keep{t}")
        i = 0
        while True:
            cid = rec.checkpoint(round_ * 10**6 + i, {"a": f"keep {t} {i} " * 30, "r": round_})
            say(f"ack {cid}")
            i += 1
    for t in range(2):
        threading.Thread(target=keep, args=(t,), daemon=True).start()
    n = 0
    while True:
        rec = st.recorder(f"tmp{round_}_{n}")
        for i in range(3):
            rec.checkpoint(i, {"a": f"tmp {n} {i} " * 30, "b": i})
        st.gc(delete_run=f"tmp{round_}_{n}")  # frees the heap's tail: later puts take those seqs
        if n % 3 == 2:
            st.prune(keep_last=2, run_id="keep0")
        say(f"gc {n}")
        n += 1
"""


class TestKilled:
    def test_sigkill_during_puts_gc_prune_and_upgrade_loses_nothing_acknowledged(
        self, tmp_path: Path
    ) -> None:
        """A writer process (two recording threads, a gc/prune loop freeing and reusing heap
        seqs) is killed -9 at different points, the first time while upgrading a layout-4
        store: verify stays clean and every acknowledged head reads, verified and not."""
        path = tmp_path / "s"
        with cpstore.open(path) as st:
            _record(st, "old", 3)
        to_layout_4(path)
        acked: list[str] = []
        for round_, stop_after in enumerate((0, 7, 23, 41)):
            proc = subprocess.Popen(
                [sys.executable, "-c", _CHURN, str(path), str(round_)],
                stdout=subprocess.PIPE,
                text=True,
            )
            assert proc.stdout is not None
            seen = 0
            while seen < stop_after:
                line = proc.stdout.readline()
                assert line, "the writer died on its own"
                seen += 1
                if line.startswith("ack "):
                    acked.append(line.split()[1])
            proc.kill()
            proc.wait(timeout=60)
            proc.stdout.close()
            with cpstore.open(path, readonly=True) as ro:
                report = ro.verify()
                assert report.ok, report.problems
                for run in ("keep0", "keep1"):
                    head = ro.ref(run)
                    if head is None:
                        continue
                    for verify in (True, False):
                        with ro.read(head, verify=verify) as cp:
                            assert cp.state_part("r") <= round_
                    assert ro.history_states(run, limit=2)
        with cpstore.open(path, readonly=True) as ro:
            kept = 0
            for cid in acked:  # prune may remove keep0's older ones, never keep1's
                try:
                    with ro.read(cid) as cp:
                        assert isinstance(cp.state(), dict)
                        kept += 1
                except NotFoundError as exc:
                    assert exc.what == "checkpoint was pruned"
            assert kept > 0


_WRITER = """
import json, sys, threading, cpstore
path, mode, name = sys.argv[1], sys.argv[2], sys.argv[3]
acked, failed = [], []
with cpstore.open(path, durability="sync" if mode == "gc" else mode, batch_size=5) as st:
    if mode == "gc":
        for n in range(12):  # record, then delete: frees the heap's tail for the others
            rec = st.recorder(f"{name}{n}")
            for i in range(3):
                rec.checkpoint(i, {"a": f"tmp {n} {i} " * 40, "b": i})
            st.gc(delete_run=f"{name}{n}")
    else:
        def write(t):
            try:
                rec = st.recorder(f"{name}t{t}")
                for i in range(25):
                    acked.append(rec.checkpoint(i, {"a": f"{name} {t} {i} " * 20, "b": i}))
                    st.put_object(f"{name} {t} {i} obj".encode())
            except BaseException as exc:  # a thread's error must fail the process
                failed.append(repr(exc))
        threads = [threading.Thread(target=write, args=(t,)) for t in range(2)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        st.flush()
if failed:
    sys.exit("a writer thread failed: " + "; ".join(failed))
print(json.dumps(acked))
"""


class TestConcurrentAppends:
    def test_processes_and_threads_appending_beside_a_tail_freeing_gc_lose_nothing(
        self, tmp_path: Path
    ) -> None:
        """Sync (group commit) and batched writer processes, two threads each, append while a
        third process records and gc's runs (reusing the tail's seqs): every acknowledged
        checkpoint reads its own state and every index row names its own heap entry."""
        path = tmp_path / "s"
        with cpstore.open(path) as st:
            _record(st, "seed", 1)
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", _WRITER, str(path), mode, name],
                stdout=subprocess.PIPE,
                text=True,
            )
            for mode, name in (("sync", "s"), ("batched", "b"), ("gc", "g"))
        ]
        acked: list[str] = []
        for proc in procs:
            out, _ = proc.communicate(timeout=300)
            assert proc.returncode == 0
            acked += json.loads(out)
        assert len(acked) == 100
        with cpstore.open(path, readonly=True) as ro:
            report = ro.verify()
            assert report.ok, report.problems
            assert report.counts["checkpoints"] == 101
            for cid in acked:
                for verify in (True, False):
                    with ro.read(cid, verify=verify) as cp:
                        state = cp.state()
                        assert isinstance(state, dict)
                        assert state["a"].split()[2] == str(state["b"])


class TestRecorderHeadRace:
    def test_a_recorder_whose_head_is_moved_and_swept_while_it_loads_gets_conflict(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Between reading the branch head and loading it, another writer resets the ref away,
        releases and sweeps the old head: store.recorder() raises ConflictError (the branch
        moved; retry), not NotFoundError "checkpoint was pruned" for a branch whose head is
        stored (seen as a flake of test_put_path_audit's ABA test)."""
        with cpstore.open(tmp_path / "s") as st:
            ids = _record(st, "w", 4)
            real = head_of
            fired: list[bool] = []

            def head_then_sweep(store: Any, run_id: str, branch: str) -> str | None:
                head = real(store, run_id, branch)
                if not fired:  # the other writer's move and sweep land right after the read
                    fired.append(True)
                    st.reset_ref("w", "main", ids[1], expected_old=head, operator="t", reason="t")
                    st.release_retained(ids[3], operator="t", reason="t")
                    st.prune(keep_last=1)
                return head

            monkeypatch.setattr(recorder_module, "head_of", head_then_sweep)
            with pytest.raises(ConflictError, match="moved"):
                st.recorder("w")
            rec = st.recorder("w")  # a retry extends the new head
            assert rec.head == ids[1]


class TestHintsAcrossHistory:
    def test_history_states_with_every_records_hints_naming_other_live_parts(
        self, tmp_path: Path
    ) -> None:
        """Every record's hints reversed (each names another live part's entry, a valid
        object of another digest) after a gc reused the tail's seqs: history_states (its
        per-walk memo included) and state() return each checkpoint's own values."""
        with cpstore.open(tmp_path / "s") as st:
            ids = _record(st, "r", 5)
            _record(st, "gone", 3)
            st.gc(delete_run="gone")
            ids += _record(st, "r", 8, start=5)  # these take the freed seqs
            want = st.history_states("r")

            def reverse(txn: Any, dbs: Any) -> None:
                for cid in ids:
                    loc = bytes(txn.get(bytes.fromhex(cid), db=dbs["cloc"]))
                    entry = bytearray(txn.get(loc, db=dbs["heap"]))
                    count = int.from_bytes(entry[18:22], "big")
                    hints = [entry[22 + 4 * i : 26 + 4 * i] for i in range(count)]
                    entry[22 : 22 + 4 * count] = b"".join(reversed(hints))
                    txn.put(loc, bytes(entry), db=dbs["heap"])

            damage(st, reverse)
            got = st.history_states("r")
            assert [e.state for e in got] == [e.state for e in want]
            assert [_b(e.state) for e in got] == list(range(7, -1, -1))
            for i, cid in enumerate(ids):
                with st.read(cid) as cp:
                    assert _b(cp.state()) == i
            assert st.verify().ok


def check_flushes_commit_in_queue_order(st: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a batched store: a flush takes the queue, another thread queues the next
    checkpoint of the same recorder and flushes before the first flush's txn begins.
    Both land, in order, nothing is left queued, and the other thread raised nothing
    (the second used to commit first and drop its batch on a ConflictError nobody
    caused). Shared with tests/test_pg_batched_flush.py."""
    backend = st.backend
    rec = st.recorder("r")
    first = rec.checkpoint(0, {"a": 0})
    real = type(backend).write_txn
    second: list[str] = []
    errors: list[BaseException] = []

    def late_write_txn(self: Any, fn: Any) -> Any:
        if not second:  # the other thread queues and flushes in between

            def queue_and_flush() -> None:
                try:
                    second.append(rec.checkpoint(1, {"a": 1}))
                    st.flush()
                except BaseException as exc:  # reported below
                    errors.append(exc)

            worker = threading.Thread(target=queue_and_flush)
            worker.start()
            worker.join(timeout=60)
        return real(self, fn)

    monkeypatch.setattr(type(backend), "write_txn", late_write_txn)
    st.flush()
    monkeypatch.undo()
    assert errors == []
    assert st.pending == 0
    assert st.ref("r") == second[0]
    assert [m.id for m in st.history("r")] == [second[0], first]


class TestBatchedFlushOrder:
    def test_two_threads_flushing_batched_queues_commit_them_in_queue_order(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Batched mode on LMDB: two threads' flushes commit their batches in queue order."""
        with cpstore.open(tmp_path / "s", durability="batched", batch_size=100) as st:
            check_flushes_commit_in_queue_order(st, monkeypatch)
