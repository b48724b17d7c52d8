"""Audit 22 of commit.TxnChecked (a txn applying several checkpoints checks each part's
location once): attacks on the record it keeps for one txn attempt.

A retried txn (map growth releases LMDB's writer lock between attempts: another writer
may change the store) must check again; a group whose txn was refused must re-apply its
writes with nothing kept from the refused attempt; an object a batch writes twice, or
finds stored, must never take the hint of another append; a fork in a batch whose
parent is not stored is refused; other processes' deletes between batches (delete_run,
prune, gc) leave every acknowledged checkpoint whole with the hints its index gives.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import lmdb
import pytest
from stored import damage
from test_put_hint_guard import _ROW_DAMAGES, _damage_row

import cpstore
from cpstore.errors import ConflictError, IntegrityError
from cpstore.store.content import objects_of, records_of
from cpstore.store.facade import Store
from cpstore.store.group_commit import _Slot
from cpstore.store.model import CheckpointWrite

_PARTS = 10


def _states(steps: int, tag: str = "", width: int = 30) -> list[dict[str, str]]:
    """``steps`` states of 10 parts, one part new per step."""
    state = {f"p{i}": f"value {i} {tag}" * width for i in range(_PARTS)}
    out = []
    for step in range(steps):
        state[f"p{step % _PARTS}"] = f"step {step} {tag}" * width
        out.append(dict(state))
    return out


def _hints_match_index(store: Store, ids: list[str]) -> None:
    """Every record's stored hint block is what its parts' index rows give now."""
    records = records_of(store.backend.dbs)
    objects = objects_of(store.backend.dbs)
    with store.backend.env.env.begin(buffers=True) as txn:
        for cid in ids:
            raw = bytes.fromhex(cid)
            with store.read(cid) as view:
                parts = [bytes(d) for d in view.manifest.raw["state"]["parts"].values()]
            _, hints = records.hinted(txn, raw)
            assert bytes(hints) == objects.locations(txn, parts)[4:], cid


def _captured(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[CheckpointWrite]:
    """The backend's commits from now on are collected, not applied (undo to apply)."""
    ops: list[CheckpointWrite] = []
    monkeypatch.setattr(store.backend, "commit", ops.append)
    return ops


def test_a_batch_retried_after_map_growth_reads_again_a_location_damaged_between_attempts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first attempt of a flush checks an inherited part's location, then the map is
    full; between the attempts (writer lock released: another process may write) the
    part's index row is deleted. The retry must read it again and refuse the batch."""
    store = cpstore.open(tmp_path / "s", durability="batched", batch_size=1000)
    with store:
        rec = store.recorder("r")
        states = _states(14)
        head = ""
        for step, s in enumerate(states[:12]):
            head = rec.checkpoint(step, s)
        store.flush()
        with store.read(head) as view:
            victim = bytes(view.manifest.raw["state"]["parts"]["p5"])
        for step, s in enumerate(states[12:], start=12):
            rec.checkpoint(step, s)  # both inherit p5 (the victim)
        backend = store.backend
        real_apply = backend._apply
        attempts: list[int] = []

        def apply_then_full(txn: Any, ops: Any) -> None:
            real_apply(txn, ops)
            attempts.append(len(ops))
            if len(attempts) == 1:
                raise lmdb.MapFullError("audit22: the map is full")

        env = backend.env
        real_grow = env.grow

        def grow_and_hurt() -> None:
            damage(store, lambda txn, dbs: txn.delete(victim, db=dbs["oloc"]))
            real_grow()

        monkeypatch.setattr(backend, "_apply", apply_then_full)
        monkeypatch.setattr(env, "grow", grow_and_hurt)
        with pytest.raises(IntegrityError):
            store.flush()
        assert attempts == [2]  # the retry refused before it finished
        assert store.ref("r") == head


def test_a_group_refused_for_one_conflict_reapplies_the_others_alone_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sync group [a1 writes parts, c conflicts, a2 inherits a1's parts and forks from
    it]: the group txn is refused; a1 and a2 land alone (a2's parent and parts read in
    its own txn), c gets its ConflictError, hints are the index's, verify is clean."""
    with cpstore.open(tmp_path / "s", durability="sync") as store:
        c_first, c_late = store.recorder("c"), store.recorder("c")
        c_head = c_first.checkpoint(0, {"x": "c"})
        ops = _captured(store, monkeypatch)
        a = store.recorder("a")
        a1 = a.checkpoint(0, _states(1, "a")[0])
        c_late.checkpoint(0, {"x": "stale"})  # expects no head: c moved
        a2 = a.checkpoint(1, _states(2, "a")[1])
        monkeypatch.undo()
        assert len(ops) == 3
        slots = [_Slot(op) for op in ops]
        store.backend.group._run(slots)
        assert all(s.done for s in slots)
        assert slots[0].error is None and slots[2].error is None
        assert isinstance(slots[1].error, ConflictError)
        assert store.ref("a") == a2 and store.ref("c") == c_head
        _hints_match_index(store, [a1, a2])
        with store.read(a2) as view:
            assert view.state() == _states(2, "a")[1]
        assert store.verify().ok


def test_an_object_written_again_in_a_batch_keeps_its_first_location_as_its_hint(
    tmp_path: Path,
) -> None:
    """Two runs in one flush write the same parts (the second finds them stored: nothing
    appended), each after objects of its own: every record's hints are the index's."""
    with cpstore.open(tmp_path / "s", durability="batched", batch_size=1000) as store:
        recs = {run: store.recorder(run) for run in ("a", "b")}
        ids = []
        for step in range(4):
            for run, rec in recs.items():
                own = {f"own {run}": f"only {run} {step} " * 20}  # appended before the shared
                ids.append(rec.checkpoint(step, own | _states(step + 1, "shared")[step]))
        assert store.pending == 8
        store.flush()
        _hints_match_index(store, ids)
        assert store.verify().ok


def test_a_fork_in_a_batch_whose_parent_is_not_stored_is_refused_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch [a checkpoint, a fork whose parent is no stored record]: the parent check
    is not skipped for a record the txn did not add; the flush raises ConflictError."""
    with cpstore.open(tmp_path / "s", durability="batched", batch_size=1000) as store:
        rec = store.recorder("r")
        head = rec.checkpoint(0, {"x": "0"})
        store.flush()
        ops = _captured(store, monkeypatch)
        rec.checkpoint(1, {"x": "1"})
        store.recorder("r", branch="f", parent=head).checkpoint(1, {"x": "f"})
        monkeypatch.undo()
        ops[1].parent = bytes(16)  # a parent never stored (its history swept)
        for op in ops:
            store.backend.commit(op)
        with pytest.raises(ConflictError):
            store.flush()
        assert store.ref("r") == head and store.ref("r", "f") is None


_SWEEPER = """
import sys, cpstore
path, rounds = sys.argv[1], int(sys.argv[2])
print("start", flush=True)
for i in range(rounds):
    with cpstore.open(path, durability="batched", batch_size=5) as s:
        rec = s.recorder("scratch")
        state = {f"p{j}": f"value {j} " * 30 for j in range(10)}  # the writer's parts
        for step in range(6):
            k = (7 * i + step) % 60
            state[f"p{k % 10}"] = f"step {k} " * 30
            rec.checkpoint(step, dict(state))
        s.flush()
        s.prune(keep_last=1, run_id="scratch")
        s.gc(delete_run="scratch")
print("swept", rounds)
"""


def test_batches_beside_another_process_writing_and_sweeping_shared_parts_land_whole(
    tmp_path: Path,
) -> None:
    """One process records in batches (forks among them) while another writes the same
    part digests, prunes and deletes its run with gc: every acknowledged checkpoint
    reads back whole, its hints are the index's, and verify is clean."""
    path = str(tmp_path / "s")
    cpstore.open(path).close()
    sweeper = subprocess.Popen(
        [sys.executable, "-c", _SWEEPER, path, "12"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    done: dict[str, tuple[str, dict[str, str]]] = {}
    try:
        assert sweeper.stdout is not None
        assert sweeper.stdout.readline() == b"start\n"
        with cpstore.open(path, durability="batched", batch_size=6) as store:
            for round_ in range(40):  # while the sweeper runs (at most 40 rounds)
                rec = store.recorder("w", branch=f"r{round_}")
                for step, state in enumerate(_states(60)):
                    cid = rec.checkpoint(step, state)
                    done[cid] = ("w", state)
                    if step % 7 == 3:
                        store.flush()  # a fork's parent must be stored; the fork: next batch
                        fork = store.recorder("w", branch=f"f{round_}.{step}", parent=cid)
                        forked = dict(state, p0=f"fork {step} " * 30)
                        done[fork.checkpoint(step + 1, forked)] = ("f", forked)
                store.flush()
                if sweeper.poll() is not None:
                    break
        out, err = sweeper.communicate(timeout=240)
        assert sweeper.returncode == 0, err.decode()
        assert out.decode().strip() == "swept 12"
    finally:
        if sweeper.poll() is None:
            sweeper.kill()
            sweeper.wait()
    with cpstore.open(path) as store:
        for cid, (_, state) in done.items():
            with store.read(cid) as view:
                assert view.state() == state
        _hints_match_index(store, list(done))
        assert store.verify().ok


@pytest.mark.parametrize("how", _ROW_DAMAGES)
def test_an_inherited_part_whose_row_is_damaged_refuses_a_batch_of_three(
    tmp_path: Path, how: str
) -> None:
    """hint_guard's row damages (its tests flush one checkpoint per txn) in a batch of
    three that all inherit the victim: refused whole, the branch stays at the head."""
    with cpstore.open(tmp_path / "s", durability="batched", batch_size=1000) as store:
        rec = store.recorder("r")
        states = _states(15)
        head = ""
        for step, s in enumerate(states[:12]):
            head = rec.checkpoint(step, s)
        store.flush()
        with store.read(head) as view:
            parts = [bytes(d) for d in view.manifest.raw["state"]["parts"].values()]
        keys = (parts[5], parts[7], bytes.fromhex(head))
        damage(store, lambda txn, dbs: _damage_row(txn, dbs, keys, how))
        for step, s in enumerate(states[12:], start=12):  # p2, p3, p4 change: p5 inherited
            rec.checkpoint(step, s)
        assert store.pending == 3
        with pytest.raises(IntegrityError):
            store.flush()
        assert store.ref("r") == head


def test_sync_groups_of_threads_sharing_parts_store_what_each_acknowledged(
    tmp_path: Path,
) -> None:
    """Four threads record (sync: group commits) runs with the same part digests, two of
    them racing on one branch: every acknowledged checkpoint reads back whole with the
    index's hints, only the racing pair meets ConflictError, verify is clean."""
    acked: dict[str, dict[str, str]] = {}
    conflicts: dict[str, int] = {}
    errors: list[BaseException] = []
    with cpstore.open(tmp_path / "s", durability="sync") as store:
        gate = threading.Barrier(4)
        # The racing pair draws its steps from one counter: a writer that re-opens at the
        # other's newer head must not go below that head's step (the recorder refuses
        # steps going backwards; each thread counting its own steps made this test flaky).
        race_steps = itertools.count()
        lock = threading.Lock()

        def record(run: str) -> None:
            try:
                rec = store.recorder(run.split(".", maxsplit=1)[0])
                gate.wait()
                for i, state in enumerate(_states(40)):
                    if run.startswith("race."):
                        with lock:
                            step = next(race_steps)
                    else:
                        step = i
                    try:
                        acked[rec.checkpoint(step, state)] = state
                    except ConflictError:
                        conflicts[run] = conflicts.get(run, 0) + 1
                        rec = store.recorder(run.split(".", maxsplit=1)[0])  # from the new head
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [
            threading.Thread(target=record, args=(run,)) for run in ("a", "b", "race.1", "race.2")
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert set(conflicts) <= {"race.1", "race.2"}
        for cid, state in acked.items():
            with store.read(cid) as view:
                assert view.state() == state
        _hints_match_index(store, list(acked))
        assert store.verify().ok


@pytest.mark.parametrize("how", ["row names an object's entry", "entry of another kind"])
def test_a_parent_record_damaged_between_batches_refuses_the_next_batch(
    tmp_path: Path, how: str
) -> None:
    """The head's record location is damaged after its batch committed: the next batch
    (the head is its first checkpoint's parent; the second's parent is the first, added
    by that txn) is refused whole with IntegrityError, the branch stays."""
    with cpstore.open(tmp_path / "s", durability="batched", batch_size=1000) as store:
        rec = store.recorder("r")
        states = _states(14)
        head = ""
        for step, s in enumerate(states[:12]):
            head = rec.checkpoint(step, s)
        store.flush()
        with store.read(head) as view:
            part = bytes(view.manifest.raw["state"]["parts"]["p1"])
        cid = bytes.fromhex(head)

        saved: list[tuple[str, bytes, bytes]] = []

        def hurt(txn: Any, dbs: Any) -> None:
            seq = bytes(txn.get(cid, db=dbs["cloc"]))
            saved.extend([("cloc", cid, seq), ("heap", seq, bytes(txn.get(seq, db=dbs["heap"])))])
            if how == "row names an object's entry":
                txn.put(cid, bytes(txn.get(part, db=dbs["oloc"])), db=dbs["cloc"])
            else:
                seq = bytes(txn.get(cid, db=dbs["cloc"]))
                entry = bytes(txn.get(seq, db=dbs["heap"]))
                txn.put(seq, b"o" + entry[1:], db=dbs["heap"])

        damage(store, hurt)
        for step, s in enumerate(states[12:], start=12):
            rec.checkpoint(step, s)
        assert store.pending == 2
        with pytest.raises(IntegrityError):
            store.flush()
        damage(store, lambda txn, dbs: [txn.put(k, v, db=dbs[t]) for t, k, v in saved])
        assert store.ref("r") == head  # (undamaged again: the head's read checks its record)
