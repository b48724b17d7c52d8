"""Batched mode's trust doubts of the last audit, each reproduced before it was fixed.

1. a store garbage-collected inside a write txn of the same store (its finalizer's flush
   nested a write txn on one thread); 2. a new thread reusing a dead thread's ident handed
   that thread's drop error; 3. the exit flush waiting without bound for LMDB's writer lock
   another process holds; 4. an interrupt landing mid-way in a flush.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures

import cpstore
from cpstore.errors import ConflictError


def _move_elsewhere(store: str) -> None:
    """Another process commits a checkpoint on run ``a``: a queued one extending the old head
    now fails its compare-and-set."""
    code = (
        f"import cpstore\nwith cpstore.open({store!r}) as s:\n"
        "    s.recorder('a').checkpoint(9, {'y': 9})\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def check_a_thread_reusing_a_dead_threads_ident_is_not_handed_its_drop(store: str) -> None:
    """A thread queues and dies; a flush drops its checkpoint; a new thread given the dead
    thread's ident flushes: it owes nothing, so its flush returns (it raised the dead
    thread's ConflictError, a false "not stored", when owners were thread idents)."""
    with cpstore.open(store, durability="batched", batch_size=64) as st:
        st.recorder("a").checkpoint(0, {"x": 0})
        st.flush()
        ra, dead = st.recorder("a"), []

        def queue_and_die() -> None:
            ra.checkpoint(1, {"x": 1})
            dead.append(threading.get_ident())

        t = threading.Thread(target=queue_and_die)
        t.start()
        t.join(timeout=120)
        _move_elsewhere(store)
        with pytest.raises(ConflictError):
            st.flush()  # drops the dead thread's checkpoint: its error waits for that thread
        got: list[Any] = []

        def flush_if_reused() -> None:
            if threading.get_ident() == dead[0]:
                try:
                    st.flush()
                    got.append("ok")
                except Exception as exc:  # the false drop
                    got.append(exc)

        for _ in range(500):  # glibc hands the last joined thread's stack (its ident) on
            t = threading.Thread(target=flush_if_reused)
            t.start()
            t.join(timeout=120)
            if got:
                break
        if not got:
            pytest.skip("no new thread was given the dead thread's ident")
        assert got == ["ok"], f"a new thread was handed a dead thread's drop: {got}"


def test_a_thread_reusing_a_dead_threads_ident_is_not_handed_its_drop(tmp_path: Path) -> None:
    """LMDB: a new thread given a dead thread's ident is not told that thread's drop."""
    check_a_thread_reusing_a_dead_threads_ident_is_not_handed_its_drop(str(tmp_path / "s"))


def test_a_thread_reusing_a_dead_threads_ident_is_not_handed_its_drop_on_postgres(
    pg_url: str,  # noqa: F811 - the fixture
) -> None:
    """PostgreSQL: a new thread given a dead thread's ident is not told that thread's drop."""
    check_a_thread_reusing_a_dead_threads_ident_is_not_handed_its_drop(pg_url)
