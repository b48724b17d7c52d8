"""push / pull carry 64-level chunk trees whole, between embedded and PostgreSQL stores
both ways, in batches smaller than one tree: the destination reads and verifies them.

audit40: transfer finds a checkpoint's objects by walking its trees (verify.children ->
tree_objects); a level it missed would land a checkpoint whose objects are not there.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures
from tall_tree import DATA, FORCED_64, force_ends, stored_height

import cpstore
from cpstore.cli import EXIT_OK, main
from cpstore.store.chunk_tree import MAX_LEVEL
from cpstore.store.facade import Store
from cpstore.store.transfer import transfer

GROWN = DATA + bytes(range(256)) * 4


def _record(store: Store) -> list[str]:
    """Two checkpoints, each with a 64-level tree; the second shares the first's chunks."""
    rec = store.recorder("r")
    cids = []
    for step, value in enumerate((DATA, GROWN)):
        with pytest.MonkeyPatch.context() as m:
            force_ends(m, FORCED_64)
            cids.append(rec.checkpoint(step, {"big": value, "step": step}))
    return cids


def _intact(store: Store, cids: list[str]) -> None:
    for cid, value in zip(cids, (DATA, GROWN), strict=True):
        assert stored_height(store, cid, "big") == MAX_LEVEL
        with store.read(cid) as cp:
            assert cp.state_part("big") == value
        assert store.verify_checkpoint(cid) == ()
    report = store.verify()
    assert report.ok, report.problems


@pytest.mark.parametrize("there", ["lmdb", "pg"])
def test_tall_trees_are_pushed_and_pulled_back_whole(
    there: str, tmp_path: Path, pg_url: str
) -> None:
    """lmdb -> (lmdb | pg) -> a fresh lmdb store, 5 objects a batch: every hop reads
    and verifies both trees, and a second push sends nothing."""
    dest = str(tmp_path / "dest") if there == "lmdb" else pg_url
    with (
        cpstore.open(tmp_path / "src") as src,
        cpstore.open(dest) as mid,
        cpstore.open(tmp_path / "back") as back,
    ):
        cids = _record(src)
        pushed = transfer(src.backend, mid.backend, batch_objects=5)
        assert pushed.checkpoints == 2
        assert pushed.objects > 2 * MAX_LEVEL  # nodes of both trees, their frames, parts
        assert mid.ref("r") == cids[-1]
        _intact(mid, cids)
        again = transfer(src.backend, mid.backend, batch_objects=5)
        assert (again.objects, again.checkpoints) == (0, 0)
        pulled = transfer(mid.backend, back.backend, batch_objects=5)
        assert (pulled.checkpoints, pulled.objects) == (2, pushed.objects)
        _intact(back, cids)


def test_the_push_and_pull_commands_carry_tall_trees(tmp_path: Path, pg_url: str) -> None:
    """``cpstore push`` to PostgreSQL and ``cpstore pull`` back into a new embedded store."""
    with cpstore.open(tmp_path / "src") as src:
        cids = _record(src)
    assert main(["push", pg_url, "--store", str(tmp_path / "src")]) == EXIT_OK
    assert main(["pull", pg_url, "--run", "r", "--store", str(tmp_path / "back")]) == EXIT_OK
    with cpstore.open(tmp_path / "back") as back:
        assert back.ref("r") == cids[-1]
        _intact(back, cids)
