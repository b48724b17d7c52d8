"""The chaos test's worker process (tests/test_chaos_mutations.py): the mix, its threads, its end.

:func:`work` opens the store in a seeded durability mode and runs
tests/chaos_worker.py's and tests/chaos_roles.py's operations, picked by
weight, until the deadline; beside it a reader thread (70% of processes) and
a second writing thread (60%; in batched mode one with its own queued
checkpoints and flushes). With ``sessions`` (the compaction variant,
tests/chaos_compactor.py) it opens and closes the store again and again, so a
compaction can find it closed everywhere; an open refused meanwhile must be a
CpstoreError. A thread that does not end within a bounded wait is a defect.
"""

from __future__ import annotations

import os
import random
import threading
import time
import traceback
from typing import Literal

from chaos_compactor import deadline as the_deadline
from chaos_log import Log, log_escape, note_error
from chaos_names import resolve_by_name
from chaos_roles import Roles, batched_writer
from chaos_worker import CONTESTED, SHARED, Worker, shared_cas

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
    ("lg_put", 6),
    ("lg_write", 3),
    ("lg_maintain", 1),
    ("push", 2),
    ("pull", 3),
    ("resolve", 4),
]
ROLES = {"lg_put", "lg_write", "lg_maintain", "push", "pull"}


def _racer(w: Worker, deadline: float, stop: threading.Event) -> None:
    """A second writing thread: shared and contested checkpoints, audits, prunes (sync: grouped)."""
    rng = random.Random(w.rng.random())
    mine = Worker.__new__(Worker)
    mine.__dict__.update(w.__dict__)
    mine.rng, mine.blobs, mine.main_pending = rng, [], []
    ops = (lambda: shared_cas(mine, 40), mine.op_contest, mine.op_audit, mine.op_prune)
    while time.monotonic() < deadline and not stop.is_set():
        try:
            rng.choices(ops, (6, 3, 2, 1))[0]()
        except CpstoreError as exc:
            note_error(w.log, exc, "racer")
        except BaseException as exc:  # else the thread died with a traceback on stderr only
            log_escape(w.log, exc, "racer")
            return
        time.sleep(rng.random() * 0.02)


def _reader(w: Worker, deadline: float, stop: threading.Event) -> None:
    """Reads beside the writes: heads, histories, pinned objects (CpstoreErrors only)."""
    rng = random.Random(w.rng.random())
    st, n = w.st, 0
    while time.monotonic() < deadline and not stop.is_set():
        n += 1
        doing = "read"  # the op its defect line names (the checker judges a resolve's)
        try:
            pick = rng.randrange(6)
            if pick == 4:
                for run in st.runs(limit=20):
                    st.branches(run)
                st.retained()
                doing = "resolve"
                st.resolve(f"{SHARED}@main~{rng.randrange(3)}")
                doing = "read"
                st.space()
            elif pick == 5:
                why = head_problem(st, rng.choice((SHARED, CONTESTED, w.run)))
                if why is None and w.pins:
                    why = pin_problem(st, w.pins, rng.choice(w.pins))
                if why is not None:
                    w.log.write("defect", sync=True, op="read", tb=why)
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
            if isinstance(exc, IntegrityError):  # a resolve's may be allowed (chaos_check)
                w.log.write(
                    "defect",
                    sync=True,
                    op=doing,
                    err=type(exc).__name__,
                    tb=traceback.format_exc()[-2000:],
                )
            else:  # judged by tests/chaos_errors.py (before: any passed unseen)
                w.log.write("err", sync=True, op="read", err=type(exc).__name__,
                            msg=str(exc)[:300])  # fmt: skip
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


def head_problem(st: cpstore.Store, run: str) -> str | None:
    """What is wrong with ``run``'s head, read now: it must verify, unless it is gone
    because the head moved on and a prune (another thread or process) swept it between
    the two reads (the reader once logged that race as a defect)."""
    head = st.ref(run)
    if head is None:
        return None
    found = st.verify_checkpoint(head)
    if not found:
        return None
    if all(p.got == "missing" for p in found) and st.ref(run) != head:
        return None  # no longer the head, and swept whole: retention, not damage
    return f"a head fails verify_checkpoint: {head}: {[str(p) for p in found[:3]]}"


def pin_problem(st: cpstore.Store, pins: list[str], digest: str) -> str | None:
    """``digest`` (picked from ``pins``, the main thread's list) must be stored while it
    is pinned: the main thread takes a pin off the list before it unpins it, so one
    gone from the store and from the list was being unpinned (a race, not a loss)."""
    if st.has_object(digest) or digest not in pins:
        return None
    return f"has_object says a pinned object is gone: {digest}"


def work(
    store: str,
    logdir: str,
    worker: int,
    inc: int,
    *,
    seed: int,
    map_size: int,
    peer: str | None = None,
    sessions: bool = False,
    crash_safe: bool = False,
) -> None:
    """The worker process: open the store and run the mix until the run's deadline."""
    rng = random.Random(f"{seed}/{worker}/{inc}")
    modes: tuple[Literal["sync", "batched", "none"], ...] = ("sync", "sync", "none", "batched")
    mode = rng.choice(modes[:2] + modes[3:] if crash_safe else modes)
    log = Log(os.path.join(logdir, f"w{worker}.log"), worker, inc)
    log.write("start", sync=True, mode=mode, seed=seed, pid=os.getpid())
    deadline = the_deadline(logdir, log)
    carried: dict[str, object] = {}
    roles = Roles(inc, peer)
    while time.monotonic() < deadline:
        until = deadline
        if sessions:
            until = min(deadline, time.monotonic() + rng.uniform(0.2, 0.6))
        try:
            oid = log.op()
            log.write("b", sync=False, op="open", id=oid)
            st = cpstore.open(store, durability=mode, map_size=map_size, batch_size=4)
            log.write("a", sync=False, op="open", id=oid)
        except CpstoreError as exc:  # e.g. refused while another process compacts it
            log.write("x", sync=True, op="open", id=oid, err=type(exc).__name__, msg=str(exc)[:300])
            time.sleep(rng.uniform(0.02, 0.2))
            continue
        except BaseException as exc:
            log.write("defect", sync=True, op="open", err=type(exc).__name__,
                      tb=traceback.format_exc()[-2000:])  # fmt: skip
            raise
        try:
            w: Worker | None = None
            try:
                # Worker() reads its run's head (a recorder): on PostgreSQL it may meet the
                # server restarting (StoreConnectionError), documented, so the session ends
                # and the next one opens again; escaping, it ended the process (exit 1, no
                # "end", nothing logged).
                w = Worker(st, log, rng, f"w{worker}")
                w.__dict__.update(carried)
                roles.bind(w)
                _session(w, roles, until)
            except CpstoreError as exc:  # the last flush (logged), or a start that failed
                note_error(log, exc, "session")
            if w is not None:
                kept = ("acked_main", "forks", "retained", "tmp_runs", "pins", "blobs", "rejected")
                carried = {k: getattr(w, k) for k in (*kept, "counter")}
        except BaseException as exc:  # a raw error outside any logged call: a defect, said
            log_escape(log, exc, "session")
            raise
        finally:
            close_logged(st, log)
        if sessions:
            time.sleep(rng.uniform(0.1, 1.0))  # closed: a compaction may find every one so
    log.write("end", sync=True)


def close_logged(st: cpstore.Store, log: Log) -> None:
    """Close the store; a documented failure of its last flush is logged, not raised.

    A batched store's close flushes what is still queued (the second thread's
    checkpoints, or ones a dropped batch left behind) and raises when that commit
    fails (docs/store.md): a CpstoreError, logged like any operation's, so the
    process goes on to its ``end`` (a CI run once lost a worker's ``end`` to it).
    """
    oid = log.op()
    log.write("b", sync=False, op="close", id=oid)
    try:
        st.close()
    except CpstoreError as exc:
        log.write("x", sync=True, op="close", id=oid, err=type(exc).__name__, msg=str(exc)[:300])
        return
    except BaseException as exc:  # a raw error escaping is the defect we hunt
        log.write("defect", sync=True, op="close", err=type(exc).__name__,
                  tb=traceback.format_exc()[-2000:])  # fmt: skip
        raise
    log.write("a", sync=False, op="close", id=oid)


def _session(w: Worker, roles: Roles, until: float) -> None:
    """The mix on one open store until ``until``, its threads, then their end and a flush."""
    rng, log = w.rng, w.log
    stop = threading.Event()
    racer = None
    if rng.random() < 0.6:
        target = batched_writer if w.batched else _racer
        racer = threading.Thread(target=target, args=(w, until, stop), daemon=True)
        racer.start()
    reader = threading.Thread(target=_reader, args=(w, until, stop), daemon=True)
    if rng.random() < 0.7:
        reader.start()
    names, weights = zip(*OPS, strict=True)
    while time.monotonic() < until:
        op = rng.choices(names, weights)[0]
        try:
            if op == "fork_more":
                if w.forks:
                    w.op_on_fork(rng.choice(sorted(w.forks)))
            elif op in ROLES:
                getattr(roles, op)()
            elif op == "resolve":
                resolve_by_name(w)
            else:
                getattr(w, f"op_{op}")()
        except CpstoreError as exc:  # an IntegrityError outside call() was dropped here unseen
            note_error(log, exc, op)
    stop.set()
    if reader.ident is not None:
        reader.join(timeout=60)
        if reader.is_alive():
            log.write("defect", sync=True, op="reader", tb="the reader thread hung")
    if racer is not None:
        racer.join(timeout=60)
        if racer.is_alive():
            log.write("defect", sync=True, op="racer", tb="the racing thread hung")
    try:
        if w.main_pending:
            w.flush()
    finally:
        if roles.peer is not None:
            roles.peer.close()
            roles.peer = None
