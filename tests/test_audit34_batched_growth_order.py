"""audit34: a batched flush that must grow the map keeps its place in the queue's order.

Flushes of several threads commit the queue in its order: a flush takes the queue once it
holds the write lock (docs/durability.md, "batched"). A commit that found the map full
released that lock to grow the map and took it again to retry, and in between another
thread's flush took the checkpoints queued since and committed them first: a recorder's
next checkpoint landed before the one it extends, whose batch then failed ConflictError
("the branch moved"), and every thread with a checkpoint in it was told it was dropped,
though no other writer ever touched their runs. The map now grows, and the txn is tried
again, with the write lock held throughout.
"""

from __future__ import annotations

from pathlib import Path

from script_run import run_to_done

_SCRIPT = """
import os, random, sys, threading
import cpstore
from cpstore.errors import CpstoreError
root = sys.argv[1]
def write(st, t, errors, ids):
    rec = st.recorder(f"r{t}")
    r = random.Random(t)
    ids[t] = []
    for step in range(300):
        try:
            pad = os.urandom(r.choice([10, 3000, 30000])).hex()
            ids[t].append(rec.checkpoint(step, {"t": t, "step": step, "pad": pad}))
        except CpstoreError as exc:
            errors.append(f"thread {t} step {step}: {exc!r}"[:400])
            rec = st.recorder(f"r{t}")
for round_ in range(3):
    path = os.path.join(root, f"s{round_}")
    st = cpstore.open(path, durability="batched", batch_size=4, map_size=64 * 1024)
    errors, ids = [], {}
    threads = [threading.Thread(target=write, args=(st, t, errors, ids)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    st.close()
    assert not errors, errors[:5]
    with cpstore.open(path) as again:
        for t, got in ids.items():
            assert again.ref(f"r{t}") == got[-1]
            for step, cid in enumerate(got):
                with again.read(cid) as cp:
                    assert cp.state()["step"] == step
        report = again.verify()
        assert report.ok, report.problems
print("done", flush=True)
"""


def test_batched_flushes_of_four_threads_growing_the_map_never_conflict(tmp_path: Path) -> None:
    """Three times: four threads on their own runs, batches of 4, a 64 KiB map grown many
    times over: no CpstoreError, every returned id stored and its run's history whole."""
    run_to_done(_SCRIPT, str(tmp_path))
