"""review78: an interrupt (a signal handler's exception) landing on the return of the write
lock's acquire in ``EnvTxns.write`` left the lock held by the interrupted thread for good:
every other thread's write then waited forever (and a close gave up after its wait, leaving
the environment open). trim76 moved the acquire inline from ``_lock_writes``; 60c078b had
the same window inside ``_lock_writes``. The sweep of tests/test_begin_interrupted.py lands
a KeyboardInterrupt at each point of ``write`` and ``_lock_writes`` where CPython runs a
pending handler (a frame's start, a C call's return), and after each the lock must be free.
"""

from __future__ import annotations

import gc
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from test_begin_interrupted import _interrupting

import cpstore
from cpstore.store.lmdb_env import Env


def _another_thread_writes(env: Env) -> bool:
    done = threading.Event()

    def write() -> None:
        env.write(lambda txn: txn.put(b"review78", b"1", db=env.dbs["meta"]))
        done.set()

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    thread.join(10)
    return done.is_set()


def _sweep(env: Env, names: set[str], blocked: bool) -> list[str]:
    """Interrupt ``env.write`` at each landing in turn until it runs through; the landings
    after which the write lock stayed held (released here, so the sweep goes on)."""
    left: list[str] = []
    k = 0
    while True:
        k += 1
        trace, landed = _interrupting(k, names)
        release = threading.Event()

        def hold(release: threading.Event = release) -> None:
            with env.write_lock:
                release.wait(10)

        holder = threading.Thread(target=hold)
        if blocked:  # the lock busy first: write() waits in _lock_writes' loop
            holder.start()
            threading.Timer(0.2, release.set).start()
        gc.disable()
        sys.settrace(trace)
        try:
            env.write(lambda txn: None)
        except KeyboardInterrupt:
            pass
        finally:
            sys.settrace(None)
            gc.enable()
        if blocked:
            holder.join(10)
        if not landed:
            return left
        if env.write_lock._is_owned():  # type: ignore[attr-defined]
            left.append(landed[0])
            while env.write_lock._is_owned():  # type: ignore[attr-defined]
                env.write_lock.release()
        assert _another_thread_writes(env), landed[0]


@pytest.mark.parametrize("blocked", [False, True], ids=["free", "busy"])
def test_an_interrupt_anywhere_in_takings_the_write_lock_leaves_it_free(
    tmp_path: Path, blocked: bool
) -> None:
    st = cpstore.open(tmp_path / "s", durability="none")
    try:
        st.recorder("r").checkpoint(0, {"a": 1})
        env: Any = st.backend.env
        assert _sweep(env, {"write", "_lock_writes"}, blocked) == []
        assert _another_thread_writes(env)
    finally:
        st.close()
