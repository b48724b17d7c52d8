"""meta80, adversarial (review81): the tail cover's once-per-open proof of LMDB's meta
layout and the registry's close of an environment left open, under what they must take.

No defect found in either here (the fork child's hang review81 found is in
test_review81_fork_registry_lock.py): these pin what was tried. The cover's fast read
(``TailCover.last_pgno``) is compared with LMDB's own ``env.info()`` at every write txn
of 3 processes writing at once, each growing the map from 1 MiB, half of them making
their first write txn in a thread, across close/reopen, after a compact and on a store
plain py-lmdb created; the proof is swept with interrupts; the registry takes 8 threads
opening and closing one store with mixed modes while closes are left open.
"""

from __future__ import annotations

import gc
import mmap
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import lmdb
from test_begin_interrupted import _interrupting

import cpstore
from cpstore.errors import StoreError
from cpstore.store import lmdb_registry, lmdb_registry_state, lmdb_txns
from cpstore.store.maintenance import compact_store

#: A writer: every write txn's fast read of last_pgno checked against env.info() (under
#: LMDB's writer lock, where neither moves); it prints the mismatches and short files.
_WRITER = r"""
import os, sys, threading
import cpstore
from cpstore.store.lmdb_txns import EnvTxns

path, name, n, in_thread = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
bad, fast = [], [0]
cover = EnvTxns._cover_tail

def checked(self):
    got = self._tail.last_pgno()
    if got is not None:
        fast[0] += 1
        if got != self.env.info()["last_pgno"]:
            bad.append(("read", got, self.env.info()["last_pgno"]))
    cover(self)

EnvTxns._cover_tail = checked

def body():
    for rnd in range(3):  # close/reopen: each open proves again
        with cpstore.open(path, durability="none", map_size=1 << 20) as st:
            rec = st.recorder(name, branch=f"b{rnd}")
            for i in range(n):
                rec.checkpoint(i, {"blob": os.urandom(2000 + 997 * i % 40000).hex()})
            rec.close()
            info, psize = st.backend.env.env.info(), st.backend.env.env.stat()["psize"]
            size = os.path.getsize(os.path.join(path, "data.mdb"))
            if size < (info["last_pgno"] + 1) * psize:
                bad.append(("short", size, info["last_pgno"]))

if in_thread:
    t = threading.Thread(target=body)
    t.start()
    t.join()
else:
    body()
print("fast", fast[0], "bad", bad)
"""


def _covers(path: Path) -> None:
    """The data file reaches the last committed page, and the store verifies."""
    with cpstore.open(path, readonly=True) as st:
        env: Any = st.backend.env
        need = (env.env.info()["last_pgno"] + 1) * env.env.stat()["psize"]
        assert os.path.getsize(path / "data.mdb") >= need
        assert st.verify().ok


def _writers(path: Path, n: int, per: int, prefix: str = "w") -> None:
    kids = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(path), f"{prefix}{k}", str(per), str(k % 2)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k in range(n)
    ]
    for kid in kids:
        out, err = kid.communicate(timeout=300)
        assert kid.returncode == 0, err
        fast = int(out.split()[1])
        assert out.rstrip().endswith("bad []"), out
        assert fast >= 3 * per, out  # the fast read was the one used
    with cpstore.open(path, readonly=True) as st:
        for k in range(n):
            for rnd in range(3):
                assert len(st.history(f"{prefix}{k}", f"b{rnd}")) == per
    _covers(path)


def test_the_cover_reads_lmdbs_last_pgno_with_three_processes_growing_the_map(
    tmp_path: Path,
) -> None:
    """3 processes commit at once from a 1 MiB map (each grows it), two of them making
    their first write txn in a thread, each closing and reopening twice: every write
    txn's fast read is env.info()'s, no file ends short, nothing is lost."""
    _writers(tmp_path / "s", 3, 30)


def test_the_cover_after_a_compact_and_on_a_store_plain_lmdb_made(tmp_path: Path) -> None:
    """A compacted store (its file swapped) and an empty environment py-lmdb created (not
    cpstore): each writer's proof holds and its fast read agrees."""
    path = tmp_path / "s"
    _writers(path, 1, 10)
    compact_store(path)
    _writers(path, 1, 10, "after")
    plain = tmp_path / "plain"
    lmdb.open(str(plain), map_size=1 << 20, subdir=True).close()
    _writers(plain, 2, 10)


def test_a_read_only_open_never_maps_the_meta_pages(tmp_path: Path) -> None:
    """No write txn, no proof: nothing mapped, nothing asked of the file."""
    path = tmp_path / "s"
    with cpstore.open(path) as st:
        st.recorder("r").checkpoint(0, {"a": 1})
    with cpstore.open(path, readonly=True) as st:
        assert st.history("r")
        assert st.backend.env._tail.metas is None


def test_the_proof_interrupted_anywhere_is_made_again_never_given_up(tmp_path: Path) -> None:
    """A KeyboardInterrupt at each landing point of the proof (``_cover_tail``,
    ``last_pgno``, ``_map_metas``, ``_shows_layout``; tests/test_begin_interrupted.py's
    sweep): the write is not committed, the metas are left unproven (None) or proven (an
    open map), never given up for good nor a closed map; the next writes read LMDB's
    last_pgno, every acknowledged checkpoint is kept."""
    path = tmp_path / "s"
    st = cpstore.open(path, durability="none", map_size=1 << 20)
    env: Any = st.backend.env
    names = {"_cover_tail", "last_pgno", "_map_metas", "_shows_layout"}
    acked, k = 0, 0
    try:
        while True:
            k += 1
            env._tail.metas = None  # the proof again, as an open's first write txn
            trace, landed = _interrupting(k, names)
            gc.disable()
            sys.settrace(trace)
            try:
                st.recorder("r").checkpoint(acked, {"b": os.urandom(20000).hex()})
                acked += 1
            except KeyboardInterrupt:
                pass
            finally:
                sys.settrace(None)
                gc.enable()
            metas = env._tail.metas
            assert metas is None or (isinstance(metas, mmap.mmap) and not metas.closed), landed
            if not landed:
                break
        assert k > 10, k
        for _ in range(10):
            st.recorder("r").checkpoint(acked, {"b": os.urandom(20000).hex()})
            acked += 1
            assert env._tail.last_pgno() == env.env.info()["last_pgno"]
    finally:
        st.close()
    with cpstore.open(path, readonly=True) as st:
        assert len(st.history("r")) == acked
    _covers(path)


def test_eight_threads_opening_and_closing_one_store_in_mixed_modes(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """8 threads open the store with mixed modes and durabilities (refused only "another
    mode"/"another durability"), write or read, and close; one close in five is left open
    (another thread's read outlives a 10 ms wait) and closed by a later open: no other
    error, nothing left registered or taken, and the store opens with any mode after."""
    path = tmp_path / "s"
    with cpstore.open(path) as st:
        seed = st.recorder("seed").checkpoint(0, {"a": 1})
    monkeypatch.setattr(lmdb_txns, "CLOSE_WAIT_SECONDS", 0.01)
    modes: list[dict[str, Any]] = [
        {"durability": "sync"},
        {"durability": "none"},
        {"readonly": True},
        {"durability": "batched"},
    ]
    # 3 s of mixing, and on until a close was left open (a loaded machine may not reach
    # one in 3 s: tidy88 saw 3 of 4 runs fail so with six other jobs running), at most 60 s
    deadline, last = time.monotonic() + 3.0, time.monotonic() + 60.0
    unexpected: list[str] = []
    left = [0]

    def worker(k: int) -> None:
        i = 0
        while (now := time.monotonic()) < deadline or (left[0] == 0 and now < last):
            i += 1
            mode = modes[(k + i) % len(modes)]
            try:
                st = cpstore.open(path, **mode)
            except StoreError as exc:
                if "another" not in str(exc):
                    unexpected.append(repr(exc))
                continue
            helper = None
            if not mode.get("readonly") and i % 3 == 0:
                st.recorder(f"t{k}").checkpoint(0, {"i": i})
            if i % 5 == 0:
                inside = threading.Event()

                def read(st: Any = st, inside: threading.Event = inside) -> None:
                    try:
                        with st.read(seed):
                            inside.set()
                            time.sleep(0.03)
                    except StoreError:
                        inside.set()

                helper = threading.Thread(target=read)
                helper.start()
                inside.wait(10)
            try:
                st.close()
            except StoreError as exc:
                if "left open" not in str(exc):
                    unexpected.append(repr(exc))
                left[0] += 1
            if helper is not None:
                helper.join(10)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert not any(t.is_alive() for t in threads)
    assert unexpected == []
    assert not lmdb_registry.is_open_here(str(path))  # closes one left open
    assert not lmdb_registry_state._CLOSING_LEFT
    for mode in modes:
        with cpstore.open(path, **mode) as st:
            assert st.verify().ok
    assert left[0] > 0  # the left-open close was exercised
