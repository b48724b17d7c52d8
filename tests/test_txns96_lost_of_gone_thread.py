"""txns96: a lost read whose thread is gone is ended by any thread's next read.

A slice kept past its block keeps its read open (slices93); released, the read is handed
over as lost, and its entry was removed only by its own thread's next read (another
thread's removal would change the counts a running thread's frames compare). A worker
thread that returned slices to its caller and ended never read again: each such read
stayed listed (lost, and counted in the reader entries) for the process's life, and
every later read of any thread took the gate and walked them all. Now a read removes the
entries of a thread that is gone, and still leaves a live (idle) thread's to it.
"""

from __future__ import annotations

import gc
import threading
from pathlib import Path

from lost_reads import a_live_raw_threads_lost_read_is_left_to_it, token_store


def test_reads_released_after_their_threads_ended_leave_no_entry(tmp_path: Path) -> None:
    """Ten threads each keep a slice and end; the caller drops the slices and reads: no
    lost read and no reader entry is left, and the store closes."""
    st, cid = token_store(tmp_path / "s")
    env = st._backend.env
    held: list[memoryview] = []

    def keep() -> None:
        with st.read(cid) as cp:
            held.append(cp.token_value_views()[0][1:])

    for _ in range(10):
        t = threading.Thread(target=keep)
        t.start()
        t.join()
    assert len(env.kept) == 10
    held.clear()
    gc.collect()
    with st.read(cid) as cp:
        assert cp.state() == {"a": 1}
    assert list(env._lost) == [] and list(env._active) == []
    st.close()
    assert env.closed


def test_a_live_idle_threads_lost_read_is_left_to_it(tmp_path: Path) -> None:
    """A raw ``_thread`` thread (not in threading's registry) keeps a slice and waits; its
    read, released by the caller, stays its own (aborted, listed) until it reads again,
    which ends it; the caller's read never removes a live thread's entry."""
    a_live_raw_threads_lost_read_is_left_to_it(tmp_path / "s", threading.get_ident)
