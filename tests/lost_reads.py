"""Test helper for the lost-read tests (txns96, review98): a store with one checkpoint
of tokens, and the case of a live raw thread whose released read another thread's read
must leave to it."""

from __future__ import annotations

import _thread
import gc
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cpstore

__all__ = ["a_live_raw_threads_lost_read_is_left_to_it", "token_store"]


def token_store(path: Path) -> tuple[Any, str]:
    """A ``none`` store at ``path`` (left open) and the id of its one checkpoint, whose
    token log has four values (a slice of one keeps its read open)."""
    st: Any = cpstore.open(path, durability="none")
    rec = st.recorder("r")
    for i in range(4):
        rec.token("rng", f"value {i}")
    cid = str(rec.checkpoint(0, {"a": 1}))
    rec.close()
    return st, cid


def a_live_raw_threads_lost_read_is_left_to_it(path: Path, ident: Callable[[], int]) -> None:
    """A raw ``_thread`` thread (it names itself with ``ident``: ``threading.get_ident``
    leaves it out of threading's registry, ``threading.current_thread`` makes it a
    ``_DummyThread`` there) keeps a slice and waits; the caller drops the slice and
    reads: the released read stays the waiting thread's (lost, listed) until that
    thread's own next read ends it; then nothing is left and the store closes."""
    st, cid = token_store(path)
    env = st._backend.env
    held: list[memoryview] = []
    kept, go, done = threading.Event(), threading.Event(), threading.Event()
    who: list[int] = []

    def keep() -> None:
        who.append(ident())
        with st.read(cid) as cp:
            held.append(cp.token_value_views()[0][1:])
        kept.set()
        go.wait(30)
        with st.read(cid):  # its own next read ends its lost one
            pass
        done.set()

    _thread.start_new_thread(keep, ())
    assert kept.wait(30)
    held.clear()
    gc.collect()
    with st.read(cid):
        pass
    assert [w for w, _ in env._lost] == who and list(env._active) == who
    go.set()
    assert done.wait(30)
    assert list(env._lost) == [] and list(env._active) == []
    st.close()
    assert env.closed
