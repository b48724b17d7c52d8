"""One LMDB environment per data file per process, across threads that open and close it.

LMDB's locks on ``lock.mdb`` are POSIX locks: closing any environment of the
file drops every lock this process holds on it, the ones of another
environment of the same file included. So a second environment must never be
opened while the first one is still closing.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest

import cpstore

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads /proc/locks (Linux)"
)


def _lmdb_locks_of_this_process(path: Path) -> list[str]:
    """``/proc/locks`` lines of this process's POSIX locks on the store's ``lock.mdb``."""
    inode = os.stat(path / "lock.mdb").st_ino
    with open("/proc/locks", encoding="ascii") as f:
        return [
            ln for ln in f
            if f":{inode} " in ln and ln.split()[1] == "POSIX"
            and ln.split()[4] == str(os.getpid())
        ]


def test_a_store_opened_while_another_thread_closes_it_keeps_lmdbs_locks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An open racing the last close of the same store gets an environment holding
    LMDB's liveness and reader locks (never one whose locks the close then drops)."""
    path = tmp_path / "s"
    st = cpstore.open(path)
    cid = st.recorder("r").checkpoint(0, {"a": 1})
    env = st.backend.env
    real_close = env.close
    opened: list[cpstore.Store] = []
    opener = threading.Thread(target=lambda: opened.append(cpstore.open(path)))

    def close_while_another_thread_opens() -> None:
        opener.start()
        # Unfixed, the open completes here, beside this not yet closed environment;
        # fixed, it waits for this close (the bound only ends the wait).
        opener.join(timeout=2.0)
        real_close()

    monkeypatch.setattr(env, "close", close_while_another_thread_opens)
    st.close()
    opener.join()
    (again,) = opened
    try:
        with again.read(cid) as cp:
            assert cp.state() == {"a": 1}
        starts = sorted(int(ln.split()[6]) for ln in _lmdb_locks_of_this_process(path))
        assert 0 in starts  # LMDB's liveness lock: other processes see this one
        assert os.getpid() in starts  # the reader-pid lock: its read slots are not freed
    finally:
        again.close()
