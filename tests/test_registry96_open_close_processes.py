"""Opens and closes of one store racing across threads and processes while another process
writes it, with a signal handler opening and closing a second store inside them.

Two processes each run two threads that open and close the store in a loop (sync and
batched handles, a read each time), their main thread taking a ``SIGALRM`` every 2 ms
whose handler opens and closes another store: it lands inside the loop's opens and closes
(refused there with ``ReentrantOpenError``, never a wait for its own thread). A third
process records checkpoints, printing each id once acknowledged. Every process ends in
time, and every acknowledged checkpoint is on the branch afterwards, the store verified."""

from __future__ import annotations

from pathlib import Path

from script_run import run_scripts_together

import cpstore

_CHURN = r"""
import signal, sys, threading, time
import cpstore
from cpstore.errors import StoreError

path, other, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
counts = {"ok": 0, "refused": 0, "left": 0}


def handler(signum, frame):
    if counts.get("busy"):  # an alarm inside the handler's own open: not nested further
        return
    counts["busy"] = 1
    try:
        cpstore.open(other).close()
        counts["ok"] += 1
    except StoreError as exc:  # by name: the class is new (the test runs before it too)
        if type(exc).__name__ != "ReentrantOpenError":
            raise
        counts["refused"] += 1
    finally:
        counts["busy"] = 0


def churn(durability):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        st = cpstore.open(path, durability=durability)
        try:
            head = st.ref("r")
            if head is not None:
                with st.read(head) as cp:
                    cp.state()
        finally:
            try:
                st.close()
            except StoreError as exc:  # left open beside another thread's read: allowed
                if "left open" not in str(exc):
                    raise
                counts["left"] += 1


cpstore.open(other).close()
signal.signal(signal.SIGALRM, handler)
signal.setitimer(signal.ITIMER_REAL, 0.002, 0.002)
worker = threading.Thread(target=churn, args=("batched",))
worker.start()
churn("sync")
signal.setitimer(signal.ITIMER_REAL, 0, 0)
worker.join()
print("counts", counts["ok"], counts["refused"], counts["left"], flush=True)
print("done", flush=True)
"""

_WRITER = r"""
import sys
import cpstore
path, n = sys.argv[1], int(sys.argv[2])
for step in range(n):
    with cpstore.open(path) as st:  # an open and close of its own each time
        print("acked", st.recorder("r").checkpoint(step, {"step": step}), flush=True)
print("done", flush=True)
"""


def test_racing_opens_and_closes_across_processes_lose_nothing_and_never_hang(
    tmp_path: Path,
) -> None:
    """Two churning processes (handlers landing in their opens and closes) and a writer:
    all end, and every checkpoint the writer was told stored is on the branch."""
    path, others = tmp_path / "s", [tmp_path / "b0", tmp_path / "b1"]
    cpstore.open(path).close()
    runs = [(_CHURN, str(path), str(b), "3") for b in others]
    outs = run_scripts_together([*runs, (_WRITER, str(path), "150")], 90)
    for code, out, err in outs:
        assert code == 0 and out.splitlines()[-1] == "done", (code, out[-500:], err)
    churned = [out.splitlines()[-2].split() for _, out, _ in outs[:2]]
    assert all(int(ok) + int(refused) > 0 for _, ok, refused, _ in churned), churned
    acked = [ln.split()[1] for ln in outs[2][1].splitlines() if ln.startswith("acked ")]
    assert len(acked) == 150
    with cpstore.open(path, readonly=True, create=False) as st:
        assert st.ref("r") == acked[-1]
        assert [m.step for m in st.history("r")] == list(range(149, -1, -1))
        for step, cid in enumerate(acked):
            with st.read(cid) as cp:
                assert cp.state() == {"step": step}
        assert st.verify().ok
