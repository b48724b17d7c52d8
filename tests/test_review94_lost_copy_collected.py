"""review94: a collection run by the copy of the lost reads' deque made the copy raise.

``EnvTxns`` copies its reader entries and lost reads (``_active``, ``_lost``) with
``tuple(deque)``, taken for one C call under the GIL. ``tuple()`` takes the deque's
iterator, then allocates the tuple: a collection run by that allocation runs finalizers,
and a holder's (``lost_read``: an append) or any thread given the GIL meanwhile (a read's
entry) changed the deque, so the copy raised ``RuntimeError: deque mutated during
iteration``: out of a read's ``_end_lost``, a close's or resize's ``_reads_left``.
``list()`` allocates itself before it takes the iterator, and fills itself without an
allocation the collector counts.
"""

from __future__ import annotations

import gc
import threading
from pathlib import Path
from typing import Any

import pytest

import cpstore
from cpstore.store.lmdb_backend import LmdbBackend
from cpstore.store.lmdb_env import Env


class _Link:
    """A cycle whose finalizer appends to a deque and leaves the next such cycle as garbage,
    ``left`` times: each collection (one per tracked allocation at threshold 1) runs one."""

    def __init__(self, into: Any, item: Any, left: int) -> None:
        self.into, self.item, self.left = into, item, left
        self.me = self

    def __del__(self) -> None:
        self.into.append(self.item)
        if self.left:
            _Link(self.into, self.item, self.left - 1)


@pytest.mark.parametrize("which", ["_end_lost", "_reads_left"])
def test_a_collection_inside_the_copy_does_not_break_it(tmp_path: Path, which: str) -> None:
    st = cpstore.open(tmp_path / "s")
    backend = st._backend
    assert isinstance(backend, LmdbBackend)
    env: Env = backend.env
    # A live idle thread's ident, not this one's: its items change no thread's counts (a
    # gone thread's, since txns96, are removed with its reader entries).
    idle = threading.Event()
    idler = threading.Thread(target=idle.wait, args=(60,))
    idler.start()
    stranger = idler.ident
    assert stranger is not None
    env._lost.append((stranger, None))  # a lost read another thread already let go of
    into = env._lost if which == "_end_lost" else env._active
    thresholds = gc.get_threshold()
    gc.collect()
    try:
        gc.disable()
        _Link(into, (stranger, None) if which == "_end_lost" else stranger, 200)
        gc.set_threshold(1)
        gc.enable()
        kept: list[list[object]] = []
        for _ in range(4):  # each at another count of allocations since the last collection
            if which == "_end_lost":
                env._end_lost()  # before: RuntimeError, deque mutated during iteration
            else:
                assert env._reads_left(None)  # the stranger's entries: not lost ones
            kept.append([])
    finally:
        gc.set_threshold(*thresholds)
        gc.enable()
        gc.collect()
    env._lost.clear()
    while stranger in env._active:
        env._active.remove(stranger)
    idle.set()
    idler.join()
    st.close()
