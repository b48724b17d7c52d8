"""A close whose wait for other reads runs out collects garbage once before it gives up.

A reader another thread entered and dropped inside a reference cycle keeps its read open
until the cycle is collected (its ``__del__`` hands the read over, which a close counts as
ended). Before registry96 the close gave up at once ("left open"), though nothing alive
held the read; now it runs one ``gc.collect()`` on that path and closes. A reader a thread
still holds is not garbage: the close still gives up, as before.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from left_open import read_held

import cpstore
from cpstore.errors import StoreError
from cpstore.store import lmdb_registry, lmdb_registry_state, lmdb_txns


@pytest.fixture
def no_collection(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A short close wait, and no automatic collection (only the close's own)."""
    monkeypatch.setattr(lmdb_txns, "CLOSE_WAIT_SECONDS", 0.3)
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.collect()


def _dropped_in_a_cycle(st: cpstore.Store, cid: str) -> None:
    """Another thread enters a reader of ``cid`` and drops it inside a reference cycle."""

    def reader() -> None:
        view = st.read(cid)
        view.__enter__()
        cycle: dict[str, object] = {"view": view}
        cycle["self"] = cycle

    thread = threading.Thread(target=reader)
    thread.start()
    thread.join(30)


@pytest.mark.usefixtures("no_collection")
def test_a_close_collects_a_cycle_holding_another_threads_reader(tmp_path: Path) -> None:
    """The cycle's reader is collected by the close, which then closes the environment."""
    path = str(tmp_path / "s")
    st = cpstore.open(path)
    cid = st.recorder("r").checkpoint(0, {"a": 1})
    _dropped_in_a_cycle(st, cid)
    st.close()  # before: StoreError "left open"
    assert not lmdb_registry.is_open_here(path)
    assert not lmdb_registry_state._LEFT_OPEN
    with cpstore.open(path, durability="none") as again:  # another durability: not shared
        assert again.ref("r") == cid
        assert again.verify().ok


@pytest.mark.usefixtures("no_collection")
def test_a_close_still_gives_up_beside_a_reader_a_thread_holds(tmp_path: Path) -> None:
    """A read another thread holds is no garbage: the close gives up, left open."""
    path = str(tmp_path / "s")
    st = cpstore.open(path)
    cid = st.recorder("r").checkpoint(0, {"a": 1})
    with read_held(st, cid), pytest.raises(StoreError, match="left open"):
        st.close()
    assert lmdb_registry.is_open_here(path) is False  # the read ended: the look closed it
    with cpstore.open(path) as again:
        assert again.ref("r") == cid


@pytest.mark.usefixtures("no_collection")
def test_a_close_collects_a_cycle_holding_its_own_threads_kept_slice(tmp_path: Path) -> None:
    """A zero-copy slice this thread kept past its block, then dropped in a cycle: the close
    (which gave up at once on it) collects it and closes."""
    path = str(tmp_path / "s")
    st = cpstore.open(path)
    rec = st.recorder("r")
    for i in range(8):
        rec.token("rng", f"value {i}")
    cid = rec.checkpoint(0, {"a": 1})
    rec.close()
    with st.read(cid) as cp:
        cycle: dict[str, object] = {"slice": cp.token_value_views()[0][1:]}
    cycle["self"] = cycle
    del cycle
    st.close()  # before: StoreError "left open" naming the zero-copy view
    assert not lmdb_registry_state._LEFT_OPEN
    with cpstore.open(path, durability="none") as again, again.read(cid) as cp:
        assert cp.token_count() == 8
