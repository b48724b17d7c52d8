"""review90: a read block's holder whose finalizer runs before its block's exit.

intr89 hands a read over as lost when its holder (``_Read``, ``CheckpointView``) is freed
with its txn still set (``__del__`` -> ``EnvTxns.lost_read``): its exit never ran. But a
read block in a generator left suspended in a reference cycle is collected by the cycle
GC, which calls every finalizer of the cycle in an order PEP 442 leaves undefined: the
holder's ``__del__`` first (recorded as lost), then the generator's close, which runs the
block's exit and ends that very read (entry removed). The record stayed: the thread's next
read raised ValueError (``_end_lost`` removed an entry no longer there), or, inside an open
read, took that read's entry: another thread's resize then remapped under a live read."""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Generator
from pathlib import Path
from threading import get_ident
from typing import Any

import pytest

import cpstore
from cpstore.store.lmdb_backend import LmdbBackend
from cpstore.store.lmdb_env import Env


def _env(st: Any) -> Env:
    backend = st._backend
    assert isinstance(backend, LmdbBackend)
    return backend.env


def _blocks(st: Any, cid: str) -> dict[str, Callable[[], Generator[Any, None, None]]]:
    """A read block suspended in a generator, and how to reach its holder."""

    def read_txn_block() -> Generator[Any, None, None]:
        holder = st._backend.read_txn()
        with holder as txn:
            yield holder
            txn.get(b"x")

    def checkpoint_view() -> Generator[Any, None, None]:
        with st.read(cid) as cp:
            yield cp
            cp.state()

    return {"_Read": read_txn_block, "CheckpointView": checkpoint_view}


def _finalized_first(st: Any, cid: str, kind: str) -> None:
    """What a cycle's collection may do: the holder's finalizer, then the generator's
    close (the block's exit). Called as the GC calls them, in the order it may pick."""
    gen = _blocks(st, cid)[kind]()
    holder = next(gen)
    holder.__del__()  # the holder's tp_finalize: its txn is still set
    gen.close()  # the generator's tp_finalize: GeneratorExit at the yield, the exit runs


@pytest.mark.parametrize("kind", ["_Read", "CheckpointView"])
def test_a_read_ended_by_its_exit_after_its_finalizer_is_not_left_lost(
    tmp_path: Path, kind: str
) -> None:
    st = cpstore.open(tmp_path / "s")
    cid = st.recorder("r").checkpoint(0, {"a": 1})
    env = _env(st)
    _finalized_first(st, cid, kind)
    # The finalizer handed the read over and forgot it, so the exit left it to this
    # thread's next read: one note, the entry still there, not counted as held.
    assert [who for who, _ in env._lost] == [get_ident()]
    assert env._active.count(get_ident()) == 1
    assert not env.holds_read()
    with st.read(cid) as cp:  # review90's "before": ValueError from _end_lost
        assert cp.state() == {"a": 1}
    assert get_ident() not in env._active
    assert list(env._lost) == []
    st.close()


@pytest.mark.parametrize("kind", ["_Read", "CheckpointView"])
def test_a_collection_on_another_thread_never_ends_the_owners_read_twice(
    tmp_path: Path, kind: str
) -> None:
    """The cycle's finalizers run on the collecting thread B, and the owner A may run
    between them: B's holder finalizer hands A's read over, A's next read ends it, then
    B's generator close runs the block's exit. Before (review90's first fix), that exit
    ended the read again and removed one of A's entries: the one of A's read now open,
    which was then not counted (holds_read False; a resize would remap under it)."""
    st = cpstore.open(tmp_path / "s")
    cid = st.recorder("r").checkpoint(0, {"a": 1})
    env = _env(st)
    gen = _blocks(st, cid)[kind]()
    holder = next(gen)
    worker = threading.Thread(target=holder.__del__)  # B: the holder's finalizer
    worker.start()
    worker.join(60)
    assert [who for who, _ in env._lost] == [get_ident()]
    with st._backend.read_txn() as txn:  # A: its next read ends the lost one
        assert list(env._lost) == []
        assert env._active.count(get_ident()) == 1
        closer = threading.Thread(target=gen.close)  # B: the generator's finalizer
        closer.start()
        closer.join(60)
        assert env._active.count(get_ident()) == 1  # before: 0, this read's entry gone
        assert env.holds_read()
        txn.get(b"x")
    assert get_ident() not in env._active
    st.close()


@pytest.mark.parametrize("kind", ["_Read", "CheckpointView"])
def test_another_threads_resize_waits_for_a_read_open_past_such_a_collection(
    tmp_path: Path, kind: str
) -> None:
    """An open read, then such a collection and a nested read: the open read stays counted,
    so another thread's resize waits for it (bounded here: refused) and never remaps under
    it; before, the nested read's begin took the open read's entry for the lost one."""
    st = cpstore.open(tmp_path / "s", map_size=1 << 20, max_map_size=1 << 26)
    cid = st.recorder("r").checkpoint(0, {"a": 1})
    env = _env(st)
    size = env.env.info()["map_size"]
    got: list[str] = []

    def resize() -> None:
        try:
            env._resize(size * 2)
            got.append("resized")
        except cpstore.StoreError as exc:
            got.append(type(exc).__name__)

    with st._backend.read_txn() as txn:
        _finalized_first(st, cid, kind)
        with st._backend.read_txn() as nested:
            nested.get(b"x")
        assert env.holds_read()  # before: False, the open read's entry gone
        env.resize_wait = 0.5
        thread = threading.Thread(target=resize)
        thread.start()
        thread.join(60)
        assert not thread.is_alive()
        txn.get(b"x")
    env.resize_wait = None
    assert got == ["StoreError"]  # before: "resized", under this thread's open read
    assert env.env.info()["map_size"] == size
    st.close()


def test_a_real_collection_in_that_order_leaves_nothing_lost(tmp_path: Path) -> None:
    """The same through the cycle GC: gc.freeze/unfreeze puts the holder ahead of its
    generator in the collected list (CPython finalizes in that list's order)."""
    st = cpstore.open(tmp_path / "s")
    cid = st.recorder("r").checkpoint(0, {"a": 1})
    env = _env(st)

    class Cycle:
        pass

    box = Cycle()
    gen = _blocks(st, cid)["_Read"]()
    box.gen, box.me = gen, box  # type: ignore[attr-defined]
    gc.collect()
    gc.freeze()  # the generator and the box: permanent, merged back after the holder
    try:
        next(gen)
        gc.collect()
    finally:
        gc.unfreeze()
    del box, gen
    gc.collect()
    assert [who for who, _ in env._lost] == [get_ident()]  # left to this thread's next read
    with st._backend.read_txn() as txn:  # review90's "before": ValueError
        txn.get(b"x")
        assert env._active.count(get_ident()) == 1 and list(env._lost) == []
    assert get_ident() not in env._active
    st.close()
