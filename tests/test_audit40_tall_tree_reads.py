"""A 64-level chunk tree (MAX_LEVEL, the tallest the writer stores) is read back by every
read path of an embedded store: get (verified and not), history, verify, verify_checkpoint,
``cpstore verify``, stats and copy; one level more is refused before anything is stored.

audit40: the bound MAX_LEVEL = 64 checked at its edge, not only well inside it
(tests/test_chunk_tree_height.py stores 17 levels and refuses thousands).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tall_tree import DATA, FORCED_64, FORCED_65, force_ends, stored_height

import cpstore
from cpstore.cli import main
from cpstore.errors import InvalidInputError
from cpstore.store.chunk_tree import MAX_LEVEL
from cpstore.store.maintenance import compact_store, copy_store
from cpstore.store.stats import store_stats


def _tallest(store: cpstore.Store, mp: pytest.MonkeyPatch) -> str:
    with mp.context() as m:
        force_ends(m, FORCED_64)
        cid = store.recorder("r").checkpoint(0, {"big": DATA, "small": 1})
    assert stored_height(store, cid, "big") == MAX_LEVEL == 64
    return cid


def test_the_tallest_tree_is_read_back_by_every_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with cpstore.open(tmp_path / "s") as store:
        cid = _tallest(store, monkeypatch)
        for verify in (True, False):
            with store.read(cid, verify=verify) as cp:
                assert cp.state() == {"big": DATA, "small": 1}
        with store.latest("r") as cp:
            assert cp.state_part("big") == DATA
        states = [e.state for e in store.history_states("r", "main")]
        assert states == [{"big": DATA, "small": 1}]
        assert store.verify_checkpoint(cid) == ()
        report = store.verify()
        assert report.ok, report.problems


def test_a_bytes_state_as_the_tallest_tree_is_read_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bytes state is cut by the chunker alone (no head): the same 64 levels."""
    with cpstore.open(tmp_path / "s") as store:
        with monkeypatch.context() as m:
            force_ends(m, FORCED_64)
            cid = store.recorder("r").checkpoint(0, DATA)
        assert stored_height(store, cid, "bytes") == MAX_LEVEL
        with store.read(cid) as cp:
            assert cp.state() == DATA
        assert store.verify_checkpoint(cid) == ()
        assert store.verify().ok


def test_the_tallest_tree_passes_the_verify_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``cpstore verify`` walks the store in a child process (no patched writer there)."""
    with cpstore.open(tmp_path / "s") as store:
        _tallest(store, monkeypatch)
    assert main(["verify", "--store", str(tmp_path / "s")]) == 0


def test_stats_count_every_object_of_the_tallest_tree_as_reached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stats walk the tree: every node, the upper spine and every frame is reached
    (none counted unreferenced) and the value counts at its whole size."""
    with cpstore.open(tmp_path / "s") as store:
        _tallest(store, monkeypatch)
        stats = store_stats(store)
    assert stats.unreferenced_bytes == 0
    assert stats.logical_bytes >= len(DATA)
    assert stats.objects >= 64 + 4  # 62+ nodes, root, upper spine, 4 frames, the part


def test_a_copy_of_a_store_holding_the_tallest_tree_verifies_and_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with cpstore.open(tmp_path / "s") as store:
        cid = _tallest(store, monkeypatch)
        report = copy_store(store, tmp_path / "copy")
    assert report.ok, report.problems
    with cpstore.open(tmp_path / "copy") as copy, copy.read(cid) as cp:
        assert cp.state_part("big") == DATA


def test_one_level_more_than_the_tallest_is_refused_and_nothing_is_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with cpstore.open(tmp_path / "s") as store:
        rec = store.recorder("r")
        with monkeypatch.context() as m:
            force_ends(m, FORCED_65)
            with pytest.raises(InvalidInputError, match="taller than any read accepts") as exc:
                rec.checkpoint(0, {"big": DATA})
        assert exc.value.got == MAX_LEVEL + 1
        assert store.ref("r") is None
        assert store.verify().ok
        cid = rec.checkpoint(0, {"big": DATA})  # the same recorder goes on as before
        with store.read(cid) as cp:
            assert cp.state() == {"big": DATA}


def test_batched_checkpoints_of_tall_trees_read_back_after_the_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Queued (batched) checkpoints carry their trees' objects into one group commit;
    a refused one between them leaves the queue intact."""
    grown = DATA + bytes(range(256)) * 4
    with cpstore.open(tmp_path / "s", durability="batched", batch_size=100) as store:
        rec = store.recorder("r")
        with monkeypatch.context() as m:
            force_ends(m, FORCED_64)
            first = rec.checkpoint(0, {"big": DATA})
        with monkeypatch.context() as m:
            force_ends(m, FORCED_65)
            with pytest.raises(InvalidInputError, match="taller than any read accepts"):
                rec.checkpoint(1, {"big": grown})
        with monkeypatch.context() as m:
            force_ends(m, FORCED_64)
            second = rec.checkpoint(1, {"big": grown})
        assert store.pending == 2
        store.flush()
        assert store.ref("r") == second
        for cid, value in ((first, DATA), (second, grown)):
            assert stored_height(store, cid, "big") == MAX_LEVEL
            with store.read(cid) as cp:
                assert cp.state_part("big") == value
        assert store.verify().ok


def test_compacting_a_store_holding_the_tallest_tree_keeps_it_readable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with cpstore.open(tmp_path / "s") as store:
        cid = _tallest(store, monkeypatch)
        store.recorder("other").checkpoint(0, {"pad": DATA[:3000]})
        store.gc(delete_run="other")
    compact_store(tmp_path / "s")
    with cpstore.open(tmp_path / "s") as store, store.read(cid) as cp:
        assert cp.state_part("big") == DATA
        assert store.verify().ok
