"""The chaos test's worker process (tests/test_chaos_mutations.py): the mix, its threads, its end.

:func:`work` opens the store in a seeded durability mode and runs
tests/chaos_worker.py's operations, picked by weight, until the deadline;
beside it a reader thread (70% of processes) and, outside batched mode, a
second writing thread (60%). A thread that does not end within a bounded
wait is logged as a defect.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
import traceback
from typing import Literal

from chaos_worker import CONTESTED, SHARED, Log, Worker, shared_cas

import cpstore
from cpstore.errors import CpstoreError, IntegrityError

OPS: list[tuple[str, int]] = [
    ("own", 30),
    ("shared", 12),
    ("fork", 8),
    ("reset", 6),
    ("release", 3),
    ("repair", 2),
    ("prune", 4),
    ("tmp", 7),
    ("delete", 5),
    ("pin", 5),
    ("unpin", 3),
    ("audit", 6),
    ("validate", 4),
    ("verify", 1),
    ("flush", 3),
    ("fork_more", 4),
    ("read_write", 2),
    ("contest", 8),
    ("validate_shared", 3),
    ("dry_run", 2),
]


def _racer(w: Worker, deadline: float, stop: threading.Event) -> None:
    """A second writing thread: shared and contested checkpoints, audits, prunes (sync: grouped)."""
    rng = random.Random(w.rng.random())
    mine = Worker.__new__(Worker)
    mine.__dict__.update(w.__dict__)
    mine.rng, mine.blobs, mine.main_pending = rng, [], []
    ops = (lambda: shared_cas(mine, 40), mine.op_contest, mine.op_audit, mine.op_prune)
    while time.monotonic() < deadline and not stop.is_set():
        with contextlib.suppress(CpstoreError):
            rng.choices(ops, (6, 3, 2, 1))[0]()
        time.sleep(rng.random() * 0.02)


def _reader(w: Worker, deadline: float, stop: threading.Event) -> None:
    """Reads beside the writes: heads, histories, pinned objects (CpstoreErrors only)."""
    rng = random.Random(w.rng.random())
    st, n = w.st, 0
    while time.monotonic() < deadline and not stop.is_set():
        n += 1
        try:
            pick = rng.randrange(6)
            if pick == 4:
                for run in st.runs(limit=20):
                    st.branches(run)
                st.retained()
                st.resolve(f"{SHARED}@main~{rng.randrange(3)}")
                st.space()
            elif pick == 5:
                head = st.ref(rng.choice((SHARED, CONTESTED, w.run)))
                if head is not None and st.verify_checkpoint(head):
                    w.log.write(
                        "defect", sync=True, op="read", tb=f"a head fails verify_checkpoint: {head}"
                    )
                if w.pins and not st.has_object(rng.choice(w.pins)):
                    w.log.write(
                        "defect", sync=True, op="read", tb="has_object says a pinned object is gone"
                    )
            elif pick == 0:
                with st.latest(SHARED) as cp:
                    cp.state()
                    cp.verify_objects()
            elif pick == 1:
                st.history_states(rng.choice((SHARED, w.run)), limit=4)
            elif pick == 2 and w.pins:
                st.get_object(rng.choice(w.pins))
            elif w.acked_main:
                with st.read(rng.choice(w.acked_main[-8:])) as cp:
                    cp.state()
                    time.sleep(
                        rng.random() * 0.01
                    )  # a read view held while others write and grow the map
        except CpstoreError as exc:
            if isinstance(exc, IntegrityError):
                w.log.write(
                    "defect",
                    sync=True,
                    op="read",
                    err=type(exc).__name__,
                    tb=traceback.format_exc()[-2000:],
                )
        except BaseException as exc:  # a raw error escaping is the defect we hunt
            w.log.write(
                "defect",
                sync=True,
                op="read",
                err=type(exc).__name__,
                tb=traceback.format_exc()[-2000:],
            )
        time.sleep(rng.random() * 0.005)
    w.log.write("reads", sync=True, n=n)


def work(
    store: str, logdir: str, worker: int, inc: int, *, seed: int, deadline: float, map_size: int
) -> None:
    """The worker process: open the store and run the mix until ``deadline`` (monotonic)."""
    rng = random.Random(f"{seed}/{worker}/{inc}")
    modes: tuple[Literal["sync", "batched", "none"], ...] = ("sync", "sync", "none", "batched")
    mode = rng.choice(modes)
    log = Log(os.path.join(logdir, f"w{worker}.log"), worker, inc)
    log.write("start", sync=True, mode=mode, seed=seed, pid=os.getpid())
    with cpstore.open(store, durability=mode, map_size=map_size, batch_size=4) as st:
        w = Worker(st, log, rng, f"w{worker}")
        stop = threading.Event()
        racer = None
        if mode != "batched" and rng.random() < 0.6:  # batched: one queue, one writer here
            racer = threading.Thread(target=_racer, args=(w, deadline, stop), daemon=True)
            racer.start()
        reader = threading.Thread(target=_reader, args=(w, deadline, stop), daemon=True)
        if rng.random() < 0.7:
            reader.start()
        names, weights = zip(*OPS, strict=True)
        while time.monotonic() < deadline:
            op = rng.choices(names, weights)[0]
            try:
                if op == "fork_more":
                    if w.forks:
                        w.op_on_fork(rng.choice(sorted(w.forks)))
                else:
                    getattr(w, f"op_{op}")()
            except CpstoreError:
                pass
        stop.set()
        if reader.ident is not None:
            reader.join(timeout=60)
            if reader.is_alive():
                log.write("defect", sync=True, op="reader", tb="the reader thread hung")
        if racer is not None:
            racer.join(timeout=60)
            if racer.is_alive():
                log.write("defect", sync=True, op="racer", tb="the racing thread hung")
        if w.main_pending:
            w.flush()
    log.write("end", sync=True)
