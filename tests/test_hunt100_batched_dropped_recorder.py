"""A batched recorder whose queued checkpoint a failed batch commit dropped (hunt100).

The recorder follows a checkpoint when it queues it. When the batch holding it fails (the
map at ``max_map_size``, a ref another process moved) the checkpoint is not stored, but the
recorder stayed on it: each later checkpoint it queued extended a checkpoint that does not
exist, so the next flush failed ``ConflictError`` ("the branch moved since this recorder
read it") and dropped its whole batch, every other recorder's checkpoints in it too, flush
after flush, for as long as that recorder was used. Now that recorder refuses at once
(``ConflictError`` naming the dropped head: open a new recorder), and the other recorders'
checkpoints commit.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures

import cpstore
from cpstore.errors import ConflictError, CpstoreError, StoreFullError


def _move_elsewhere(store: str, run: str) -> None:
    """Another process commits a checkpoint on ``run``: the queued one there conflicts."""
    code = (
        f"import cpstore\nwith cpstore.open({store!r}) as s:\n"
        f"    s.recorder({run!r}).checkpoint(9, {{'other': 1}})\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def _after_the_drop(st: cpstore.Store, stuck: cpstore.Recorder, dropped_head: str) -> None:
    """The dropped recorder refuses; another recorder's checkpoint commits; a new recorder
    on the branch continues from its stored head; the store verifies."""
    with pytest.raises(ConflictError, match="not stored") as caught:
        stuck.checkpoint(100, {"after": True})
    assert dropped_head in str(caught.value)
    other = st.recorder("bystander")
    cid = other.checkpoint(0, {"b": 1})
    st.flush()  # failed ConflictError before, dropping the bystander's checkpoint with it
    assert st.ref("bystander") == cid
    head = st.ref("a")
    again = st.recorder("a")
    assert again.head == head
    nxt = again.checkpoint(200, {"again": True})
    st.flush()
    assert st.ref("a") == nxt
    assert st.manifest(nxt).parent == head
    assert st.verify().ok


def check_conflict_drop(store: str) -> None:
    with cpstore.open(store, durability="batched") as st:
        rec = st.recorder("a")
        rec.checkpoint(0, {"a": 0})
        st.flush()
        queued = rec.checkpoint(1, {"a": 1})
        _move_elsewhere(store, "a")
        with pytest.raises(ConflictError):
            st.flush()
        assert st.ref("a") != queued
        _after_the_drop(st, rec, queued)


def test_a_recorder_whose_batch_was_dropped_by_a_conflict_refuses_and_spares_others(
    tmp_path: Path,
) -> None:
    check_conflict_drop(str(tmp_path / "s"))


def test_a_recorder_whose_batch_was_dropped_refuses_on_postgres(
    pg_url: str,  # noqa: F811 - the fixture
) -> None:
    check_conflict_drop(pg_url)


def test_a_batch_refused_at_the_maximum_map_size_is_dropped_whole_and_its_recorder_stops(
    tmp_path: Path,
) -> None:
    """The brief's case: a batched flush meets MAP_FULL, grows to ``max_map_size`` and is
    refused StoreFullError: none of the batch is stored, what was flushed before is."""
    path = str(tmp_path / "s")
    with cpstore.open(path, durability="batched", map_size=1 << 20, max_map_size=2 << 20) as st:
        rec = st.recorder("a")
        first = rec.checkpoint(0, {"a": 0})
        st.flush()
        queued = [rec.checkpoint(i, {"blob": os.urandom(32 * 1024).hex()}) for i in range(1, 60)]
        with pytest.raises(StoreFullError):
            st.flush()
        assert st.ref("a") == first  # refused whole
        assert [c for c in queued if _stored(st, c)] == []
        _after_the_drop(st, rec, queued[-1])
    with cpstore.open(path, create=False) as st:
        assert st.verify().ok


def _stored(st: cpstore.Store, cid: str) -> bool:
    try:
        st.manifest(cid)
    except CpstoreError:
        return False
    return True
