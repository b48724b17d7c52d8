"""Closes, compacts and looks racing across threads and processes lose nothing (registry102).

Since registry102 a look at a store (``is_open_here``, compact and its reservation, an
open with another mode) waits for another thread's last close of it under way and
answers from its outcome: compact may now run at once after that close, where it was
refused "close the store in this process". Two processes each run a thread recording
checkpoints, each through its own open and close (its environment's last), and a looker
let go (an event) just before each close: it compacts the store, asks ``is_open_here``
and reads it through a read-only open, racing that close and the other process; the
writer opens again once the looker is done (an event). Every process ends in time;
nothing is refused but for an open handle or a compaction under way; compactions ran;
every checkpoint a writer was told stored is on its branch afterwards, in order, and the
store verifies. (A safety check, not a reproducer: it passes before registry102 too.)
"""

from __future__ import annotations

from pathlib import Path

from script_run import run_scripts_together

import cpstore

_CHURN = r"""
import sys, threading
import cpstore
from cpstore.errors import StoreError
from cpstore.store import lmdb_registry
from cpstore.store.maintenance import compact_store

path, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
counts = {"compacted": 0, "refused": 0, "open here": 0, "read": 0}
#: What a refusal may say here: this process or another has the store open, or compacts it.
ALLOWED = ("close the store", "another process", "compacting", "another mode")
unexpected = []
turn, looked, finished = threading.Event(), threading.Event(), []


def allowed(exc):
    if not any(words in str(exc) for words in ALLOWED):
        unexpected.append(repr(exc))


def write():
    try:
        for step in range(n):
            while True:
                try:
                    st = cpstore.open(path)
                    break
                except StoreError as exc:  # this process compacting it: open again
                    allowed(exc)
            try:
                cid = st.recorder(tag).checkpoint(step, {"step": step})
                print(f"acked {tag} {step} {cid}", flush=True)  # one write: threads interleave
                turn.set()  # the looker goes now, racing this close
            finally:
                st.close()
            looked.wait(60)
            looked.clear()
    finally:
        finished.append(True)
        turn.set()


def look():
    while True:
        turn.wait(60)
        turn.clear()
        if finished:
            break
        try:
            compact_store(path)
            counts["compacted"] += 1
        except StoreError as exc:
            allowed(exc)
            counts["refused"] += 1
        counts["open here"] += lmdb_registry.is_open_here(path)
        try:
            with cpstore.open(path, readonly=True) as st:
                st.ref(tag)
                counts["read"] += 1
        except StoreError as exc:
            allowed(exc)
        looked.set()


threads = [threading.Thread(target=write), threading.Thread(target=look)]
for t in threads:
    t.start()
for t in threads:
    t.join(120)
print("alive", sum(t.is_alive() for t in threads))
print("unexpected", unexpected)
print("compacted", counts["compacted"])
print("counts", counts, flush=True)
print("done", flush=True)
"""


def test_closes_compacts_and_looks_racing_across_processes_lose_nothing(tmp_path: Path) -> None:
    """Two processes of a writer and a compacting looker each: all end, nothing
    unexpected refused, every acknowledged checkpoint kept in order, verify clean."""
    path, n = tmp_path / "s", 60
    cpstore.open(path).close()
    outs = run_scripts_together([(_CHURN, str(path), tag, str(n)) for tag in ("p0", "p1")], 240)
    acked: dict[str, list[str]] = {}
    for code, out, err in outs:
        lines = out.splitlines()
        assert code == 0 and lines[-1] == "done", (code, out[-500:], err)
        assert "alive 0" in lines and "unexpected []" in lines, (lines[-4:], err)
        for line in lines:
            if line.startswith("acked "):
                _, run, at, cid = line.split()
                assert int(at) == len(acked.setdefault(run, []))
                acked[run].append(cid)
    assert sorted(acked) == ["p0", "p1"]
    compacted = [ln for _, out, _ in outs for ln in out.splitlines() if ln.startswith("compacted")]
    assert sum(int(ln.split()[1]) for ln in compacted) > 0, compacted  # the race was run
    with cpstore.open(path, readonly=True, create=False) as st:
        for run, cids in acked.items():
            assert len(cids) == n
            assert st.ref(run) == cids[-1]
            assert [m.step for m in st.history(run)] == list(range(n - 1, -1, -1))
            for step, cid in enumerate(cids):
                with st.read(cid) as cp:
                    assert cp.state() == {"step": step}
        assert st.verify().ok
