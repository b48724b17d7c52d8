"""Retention: prune and delete_run sweep only what nothing live references."""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import cpstore
from cpstore.errors import InvalidInputError, NotFoundError
from cpstore.native.binding import digest
from cpstore.store import audit, audit_read
from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store
from cpstore.store.model import CHUNK_SIZE
from cpstore.store.objects import chunk_index


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(tmp_path / "s") as st:
        yield st


def _run(store: Store, run: str, steps: int, *, shared: bytes = b"shared") -> list[str]:
    rec = store.recorder(run)
    ids = []
    for step in range(steps):
        rec.observe(step, "clock", b"%s-%d" % (run.encode(), step), pinned_at=1.0)
        ids.append(rec.checkpoint(step, {"shared": shared, "step": step}, seal_ledger=False))
    return ids


class TestPrune:
    def test_prune_keeps_the_newest_checkpoints_and_tombstones_the_rest(self, store: Store) -> None:
        """Pruned ids read as "pruned"; kept ones read whole; verify passes."""
        ids = _run(store, "run", 6)
        assert store.prune(keep_last=2) == 4
        assert [m.id for m in store.history("run")] == ids[:-3:-1]
        with pytest.raises(NotFoundError, match="pruned"), store.read(ids[0]):
            pass
        with store.read(ids[-1]) as cp:
            state = cp.state()
            assert isinstance(state, dict) and state["step"] == 5
            assert len(cp.observations()) == 6  # cumulative log kept whole
        assert store.verify().ok

    def test_prune_of_one_run_leaves_other_runs_whole(self, store: Store) -> None:
        """run_id limits the prune to one run's branches."""
        _run(store, "a", 4)
        _run(store, "b", 4)
        store.prune(keep_last=1, run_id="a")
        assert len(store.history("a")) == 1 and len(store.history("b")) == 4

    def test_keep_last_must_be_positive(self, store: Store) -> None:
        """Pruning a head away is refused."""
        with pytest.raises(InvalidInputError):
            store.prune(keep_last=0)


class TestMarkingByRole:
    """Bytes that are a leaf in one role and a log or chunk index in another."""

    def test_observations_log_equal_to_a_state_part_keeps_its_payloads(self, store: Store) -> None:
        """A head whose state part encodes like its observations log keeps the payloads."""
        rec = store.recorder("r")
        rec.observe(1, "src", b"payload-P", pinned_at=1.0)
        rec.checkpoint(1, {"mode": "idle"})
        rec.observe(2, "src", b"payload-Q", pinned_at=2.0)
        log = [[1, "src", digest(b"payload-P"), 1.0], [2, "src", digest(b"payload-Q"), 2.0]]
        head = rec.checkpoint(2, {"obs": log})
        rec.close()
        assert store.prune(keep_last=1) == 1
        assert store.verify().ok
        with store.read(head) as cp:
            assert cp.payload(1, "src") == b"payload-P"

    def test_effects_log_equal_to_a_state_part_keeps_its_payloads(self, store: Store) -> None:
        """A head whose state part encodes like its (unsealed) effects log keeps the payloads."""
        rec = store.recorder("r")
        rec.effect("bank", b"transfer 10")
        rec.checkpoint(1, b"a", seal_ledger=False)
        rec.effect("bank", b"transfer 20")
        log = [[0, "bank", digest(b"transfer 10")], [1, "bank", digest(b"transfer 20")]]
        head = rec.checkpoint(2, {"effects": log}, seal_ledger=False)
        rec.close(discard_effects=True)
        assert store.prune(keep_last=1) == 1
        assert store.verify().ok
        with store.read(head) as cp:
            assert cp.effect_payload(0) == b"transfer 10"

    def test_chunk_index_equal_to_a_state_part_keeps_its_chunks(self, store: Store) -> None:
        """A live chunked state keeps its chunks when the head has a part encoded like its index."""
        big = bytes(range(256)) * (CHUNK_SIZE // 128 + 1)
        chunks, _ = chunk_index(big)
        index_value = [len(big), [digest(c) for c in chunks]]
        rec = store.recorder("r")
        rec.checkpoint(1, big + b"tail")  # another index over the same first chunks
        live = rec.checkpoint(2, big)
        rec.checkpoint(3, {"index": index_value})  # marked first, as a plain part
        rec.close()
        assert store.prune(keep_last=2) == 1
        assert store.verify().ok
        with store.read(live) as cp:
            assert cp.state() == big


class TestDeleteRun:
    def test_delete_run_removes_its_refs_and_unshared_objects(self, store: Store) -> None:
        """Objects shared with a live run survive; the deleted run's own go."""
        _run(store, "a", 3)
        _run(store, "b", 3)
        before = store.verify().counts["objects"]
        assert store.delete_run("a") == 3
        assert store.runs() == ["b"]
        after = store.verify()
        assert after.ok and after.counts["objects"] < before
        with store.read(store.ref("b") or "") as cp:
            assert cp.state_part("shared") == b"shared"

    def test_sealed_ledgers_and_audit_records_are_never_deleted(self, store: Store) -> None:
        """Deleting a run keeps its sealed ledger and its effect payloads, and the audit log."""
        rec = store.recorder("a")
        rec.effect("bank", b"transfer 10")
        cid = rec.checkpoint(1, b"s")
        ledger = store.manifest(cid).effects_digest or ""
        store.append_audit("decision", {"checkpoint": cid})
        store.delete_run("a")
        assert store.has_object(ledger)
        assert len(list(store.audit_records())) == 1
        assert store.verify().ok

    def test_objects_put_directly_are_not_garbage(self, store: Store) -> None:
        """The sweep only considers objects a swept checkpoint named."""
        key = store.put_object(b"caller's blob")
        _run(store, "a", 2)
        store.delete_run("a")
        assert store.get_object(key) == b"caller's blob"


class TestPinnedObjects:
    """put_object pins its object until unpin_object."""

    def test_put_object_survives_prune_of_a_checkpoint_naming_the_same_bytes(
        self, store: Store
    ) -> None:
        """put_object pins: a swept checkpoint with the same bytes does not take the object."""
        key = store.put_object(b"shared config v1")
        with store.backend.read_txn() as txn:  # the pin's on-disk key (docs/store.md)
            assert txn.get(b"pinned/" + key, db=store.backend.db("meta")) is not None
        rec = store.recorder("r")
        rec.transcript(b"shared config v1")
        rec.checkpoint(1, b"a")
        rec.transcript(b"other")
        rec.checkpoint(2, b"b")
        rec.close()
        assert store.prune(keep_last=1) == 1
        assert store.get_object(key) == b"shared config v1"
        assert store.verify().ok

    def test_unpinned_object_is_swept_with_a_checkpoint_naming_it(self, store: Store) -> None:
        """unpin_object hands the object back to retention; a second unpin says False."""
        key = store.put_object(b"shared config v1")
        rec = store.recorder("r")
        rec.transcript(b"shared config v1")
        rec.checkpoint(1, b"a")
        rec.transcript(b"other")
        rec.checkpoint(2, b"b")
        rec.close()
        assert store.unpin_object(key) is True
        assert store.unpin_object(key.hex()) is False
        store.prune(keep_last=1)
        assert not store.has_object(key)
        assert store.verify().ok


def _record_and_put(path: str, seconds: float) -> int:
    """Record transcripts and put_object the same bytes; return how many were put."""
    with open_store(path) as st:
        rec = st.recorder("r")
        deadline = time.monotonic() + seconds
        i = 0
        while time.monotonic() < deadline:
            rec.transcript(b"blob-%d" % i)
            rec.checkpoint(i, b"s")
            st.put_object(b"blob-%d" % i)
            i += 1
        rec.close()
    return i


def _prune_loop(path: str, seconds: float) -> None:
    with open_store(path) as st:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            st.prune(keep_last=1)
            time.sleep(0.05)


class TestPinsBesideAPruner:
    def test_put_objects_survive_a_pruner_in_another_process(self, tmp_path: Path) -> None:
        """put_object beside a pruning process: every pinned object survives; verify clean."""
        path = str(tmp_path / "s")
        open_store(path).close()
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(2) as pool:
            writer = pool.apply_async(_record_and_put, (path, 4.0))
            pruner = pool.apply_async(_prune_loop, (path, 4.0))
            count = writer.get(60)
            pruner.get(60)
        assert count > 10
        with open_store(path) as st:
            st.prune(keep_last=1)
            for i in range(count):
                assert st.get_object(digest(b"blob-%d" % i)) == b"blob-%d" % i
            assert st.verify().ok


class TestDecidedCheckpoints:
    def test_a_sweep_decodes_only_the_records_naming_removed_checkpoints(
        self, store: Store, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Pruning beside a longer log decodes one record per decided checkpoint (the index's
        witness), not the log, and lists exactly the decided ones, in the report and the gc
        audit record."""
        ids = _run(store, "run", 12)
        for i in (1, 4, 7):  # decisions naming ids[i] (recorded) and ids[i + 1] (replayed)
            cpstore.validate(ids[i], ids[i + 1], store=store)
        for i in range(30):
            store.append_audit("note", {"i": i, "checkpoint_id": ids[0]})  # not a decision
        decoded: list[int] = []
        real = audit_read._decode

        def counted(index: int, raw: Any, where: str) -> Any:
            decoded.append(index)
            return real(index, raw, where)

        for module in (audit, audit_read):  # where records are read, and caught up
            monkeypatch.setattr(module, "_decode", counted)
        report = store.gc(keep_last=1, run_id="run")
        named = {ids[i] for i in (1, 2, 4, 5, 7, 8)}
        assert len(decoded) == len(named)  # the log holds 33 records
        monkeypatch.undo()
        assert set(report.checkpoints) == set(ids[:-1])
        assert set(report.decided) == named
        [record] = [r.body for r in store.audit_records(kind="gc")]
        assert sorted(record["decided"]) == sorted(named)
