"""audit41 guard: audit36's held txn objects (EnvTxns._txns) and the reader slots they
keep stay bounded under reads and writes from many threads and processes.

A py-lmdb read txn object keeps its reader slot in ``lock.mdb`` while it lives (reset,
not freed: py-lmdb's spare), and audit36 holds every txn object until
``_drop_unused_txns`` lets it go inside a read or under the write lock. Eight threads each
keeping up to three views open while they checkpoint and read, in three processes at once:
the objects held stay within twice what is alive (not one per txn begun), and once the
views end a process keeps a few txn objects and no more slots than those and its spare.
Passes as merged (checked, not a fix).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = r"""
import sys, threading
from cpstore.store.facade import open as open_store

st = open_store(sys.argv[1], durability=sys.argv[2])
env = st._backend.env
cid = st.recorder("r" + sys.argv[3]).checkpoint(0, {"a": 1})
st.flush()
peak, errors = [0], []

def work(t):
    try:
        rec, kept = st.recorder(f"w{sys.argv[3]}-{t}"), []
        for step in range(25):
            mine = rec.checkpoint(step, {"s": step})
            st.flush()
            read = st.read(mine)
            assert read.__enter__().state() == {"s": step}
            kept.append(read)
            if len(kept) > 3:
                kept.pop(0).__exit__(None, None, None)
            with st.read(cid) as view:
                view.state()
            peak[0] = max(peak[0], len(env._txns))
        for read in kept:
            read.__exit__(None, None, None)
    except BaseException as exc:
        errors.append(repr(exc))

threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
for th in threads:
    th.start()
for th in threads:
    th.join(120)
for _ in range(3):
    with st.read(cid) as view:
        view.state()
import os
mine = [r for r in env.env.readers().splitlines()[1:] if r.split()[:1] == [str(os.getpid())]]
print(peak[0], len(env._txns), len(mine), len(errors), errors[:1])
st.close()
"""


@pytest.mark.parametrize("durability", ["sync", "batched"])
def test_held_txns_and_reader_slots_stay_bounded(tmp_path: Path, durability: str) -> None:
    path = str(tmp_path / "s")
    subprocess.run([sys.executable, "-c", SCRIPT, path, durability, "x"], check=True, timeout=120)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SCRIPT, path, durability, str(i)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(3)
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err
        peak, left, slots, failed = (int(x) for x in out.split()[:4])
        assert failed == 0, out
        # 8 threads, each with up to 4 views and one read alive (40), and some not yet let
        # go (2 looked at per txn ended); a leak would hold one per txn begun (600+).
        assert peak <= 2 * 8 * 5, out
        assert left <= 4, out
        assert slots <= left + 1, out  # those still held, and py-lmdb's spare
