"""audit34: closing a store while other threads of the process write it never kills the process.

A ``Store`` is thread-safe (docs/durability.md, "Concurrency"). Closing the last handle
closes LMDB's environment, which frees it; a thread inside an LMDB call that released the
GIL (a write txn's begin waiting for LMDB's writer lock, its commit's fsync) then used
freed memory, and the process died of SIGSEGV or glibc's "double free or corruption"
(sync, none; batched met a raw LMDB error from the map growth, and its close failed on a
ConflictError the growth's order inversion made: tests/test_audit34_batched_growth_order.py).
The close now waits until no other thread of the process is inside a txn of the environment;
their next calls are refused with a CpstoreError.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from script_run import run_to_done

_SCRIPT = """
import os, random, shutil, sys, threading, time
import cpstore
from cpstore.errors import CpstoreError
root, mode, trials = sys.argv[1], sys.argv[2], int(sys.argv[3])
rnd = random.Random(34)
for trial in range(trials):
    path = os.path.join(root, f"s{trial}")
    st = cpstore.open(path, durability=mode, map_size=64 * 1024)
    acked, odd = [], []
    def write(t):
        rec = st.recorder(f"r{t}")
        r = random.Random(trial * 10 + t)
        for step in range(100000):
            try:
                pad = os.urandom(r.choice([10, 3000, 30000])).hex()
                acked.append(rec.checkpoint(step, {"p": pad}))
            except CpstoreError:
                return
            except BaseException as exc:
                odd.append(repr(exc))
                return
    threads = [threading.Thread(target=write, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    time.sleep(rnd.uniform(0.02, 0.3))
    st.close()
    for th in threads:
        th.join()
    assert not odd, odd  # only CpstoreErrors once the store is closed
    if mode != "batched":  # batched: a queued id is no promise of storage
        with cpstore.open(path) as again:
            for cid in acked:
                with again.read(cid) as cp:
                    cp.state()
    shutil.rmtree(path)
print("done", flush=True)
"""


@pytest.mark.parametrize("mode", ["sync", "none", "batched"])
def test_closing_while_threads_write_never_crashes_the_process(tmp_path: Path, mode: str) -> None:
    """40 times: four threads checkpoint, the main thread closes the store under them."""
    run_to_done(_SCRIPT, str(tmp_path), mode, "40")
