"""The exit flush behind another thread's unsettled batch still gives up on the writer lock.

At exit the flush's worker holds the writer lock and meets a daemon thread's batch in
flight, unsettled (its commit returned; its settling, a read-back, takes a while). Since
BatchOwners.take (limbo22) it takes nothing, commits an empty txn, waits for that batch
and flushes again: the second txn waits for the writer lock once more. The exit flush's
bound on the lock (at_exit.ExitGate) counted the worker as begun from its first txn on,
so when another process took the lock between the two txns the exit waited on it
without bound (here until the holder let go; for ever with a holder that never
does; LMDB's lock and PostgreSQL's advisory lock). Now a txn that took nothing leaves
the gate: the exit gives up after its bounded wait and names the queued checkpoint
"NOT written", which is the truth.
"""

from __future__ import annotations

import time

from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures
from python_versions import needs_thread_at_exit
from script_run import run_script

import cpstore

_SCRIPT = r"""
import subprocess, sys, threading, time
import cpstore
from cpstore.store.batch_owners import BatchOwners

path = sys.argv[1]
holder = subprocess.Popen([sys.executable, "-c", '''
import sys, time
import cpstore
st = cpstore.open(sys.argv[1])
sys.stdin.readline()

def hold(txn):
    if hasattr(txn, "begin_now"):
        txn.begin_now()  # PostgreSQL: BEGIN and the advisory writer lock
    time.sleep(40)  # LMDB: its writer lock, across processes

st.backend.write_txn(hold)
''', path], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    text=True)
time.sleep(3)  # the holder has opened the store (a writable open takes the lock too)

orig_take, orig_settled = BatchOwners.take, BatchOwners.settled
settling = threading.Event()

def take(self, *args):
    # The exit worker holds the writer lock and meets D's batch in flight: the holder
    # now waits for the lock, and takes it once the worker's empty txn lets it go.
    if threading.current_thread().name == "cpstore-exit-flush" and self._flying:
        holder.stdin.write("go\n")
        holder.stdin.flush()
        time.sleep(0.5)
    return orig_take(self, *args)

def settled(self, owners, exc):
    if threading.current_thread().name == "D" and not settling.is_set():
        settling.set()
        time.sleep(2.0)  # D's batch committed, its settling slow (as a read-back)
    return orig_settled(self, owners, exc)

BatchOwners.take, BatchOwners.settled = take, settled
st = cpstore.open(path, durability="batched", batch_size=1000)

d_ids = []

def d():
    d_ids.append(st.recorder("d").checkpoint(0, {"d": 0}))
    st.flush()

threading.Thread(target=d, name="D", daemon=True).start()
settling.wait(10)
print(st.recorder("a").checkpoint(0, {"a": 0}), d_ids[0], flush=True)
"""


@needs_thread_at_exit
def test_the_exit_flush_behind_an_unsettled_batch_gives_up_on_a_lock_taken_meanwhile(
    url: str,
) -> None:
    path = url
    began = time.monotonic()
    out = run_script(_SCRIPT, path, timeout=60)
    took = time.monotonic() - began
    assert out.returncode == 0, (out.returncode, out.stderr[-3000:])
    cid, d_cid = out.stdout.split()
    # Bounded: EXIT_WAIT (5 s), 3 s and start-up; before, until the holder let go (40 s).
    assert took < 22, (took, out.stderr[-3000:])
    assert "RuntimeWarning" in out.stderr and cid in out.stderr, out.stderr[-3000:]
    assert "NOT written" in out.stderr, out.stderr[-3000:]
    time.sleep(0.1)
    with cpstore.open(path, readonly=True, create=False) as ro:  # after the holder's end
        assert ro.ref("a") is None  # "NOT written" is the truth
        assert ro.ref("d") == d_cid
    # D's batch was committed (its settling slow): never named "NOT written" (it was).
    assert d_cid not in out.stderr, out.stderr[-3000:]
