"""Batched mode's trust doubts of the last audit, each reproduced before it was fixed.

1. a store garbage-collected inside a write txn of the same store (its finalizer's flush
   nested a write txn on one thread); 2. a new thread reusing a dead thread's ident handed
   that thread's drop error; 3. the exit flush waiting without bound for LMDB's writer lock
   another process holds; 4. an interrupt landing mid-way in a flush.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures
from python_versions import needs_thread_at_exit
from script_run import run_script

import cpstore
from cpstore.errors import ConflictError


def _move_elsewhere(store: str) -> None:
    """Another process commits a checkpoint on run ``a``: a queued one extending the old head
    now fails its compare-and-set."""
    code = (
        f"import cpstore\nwith cpstore.open({store!r}) as s:\n"
        "    s.recorder('a').checkpoint(9, {'y': 9})\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def check_a_thread_reusing_a_dead_threads_ident_is_not_handed_its_drop(store: str) -> None:
    """A thread queues and dies; a flush drops its checkpoint; a new thread given the dead
    thread's ident flushes: it owes nothing, so its flush returns (it raised the dead
    thread's ConflictError, a false "not stored", when owners were thread idents)."""
    with cpstore.open(store, durability="batched", batch_size=64) as st:
        st.recorder("a").checkpoint(0, {"x": 0})
        st.flush()
        ra, dead = st.recorder("a"), []

        def queue_and_die() -> None:
            ra.checkpoint(1, {"x": 1})
            dead.append(threading.get_ident())

        t = threading.Thread(target=queue_and_die)
        t.start()
        t.join(timeout=120)
        _move_elsewhere(store)
        with pytest.raises(ConflictError):
            st.flush()  # drops the dead thread's checkpoint: its error waits for that thread
        got: list[Any] = []

        def flush_if_reused() -> None:
            if threading.get_ident() == dead[0]:
                try:
                    st.flush()
                    got.append("ok")
                except Exception as exc:  # the false drop
                    got.append(exc)

        for _ in range(500):  # glibc hands the last joined thread's stack (its ident) on
            t = threading.Thread(target=flush_if_reused)
            t.start()
            t.join(timeout=120)
            if got:
                break
        if not got:
            pytest.skip("no new thread was given the dead thread's ident")
        assert got == ["ok"], f"a new thread was handed a dead thread's drop: {got}"


def test_a_thread_reusing_a_dead_threads_ident_is_not_handed_its_drop(tmp_path: Path) -> None:
    """LMDB: a new thread given a dead thread's ident is not told that thread's drop."""
    check_a_thread_reusing_a_dead_threads_ident_is_not_handed_its_drop(str(tmp_path / "s"))


def test_a_thread_reusing_a_dead_threads_ident_is_not_handed_its_drop_on_postgres(
    pg_url: str,  # noqa: F811 - the fixture
) -> None:
    """PostgreSQL: a new thread given a dead thread's ident is not told that thread's drop."""
    check_a_thread_reusing_a_dead_threads_ident_is_not_handed_its_drop(pg_url)


#: A batched store in a reference cycle holds a queued checkpoint; the collector runs inside
#: a write txn of another handle of the same store (append_audit_checked's ``prepare`` runs
#: in its write txn). Prints the queued id, what the finalizer raised (or "-"), and the
#: branch head once every helper flush ended.
_COLLECTED_IN_A_WRITE = """
import gc, sys, threading, warnings
import cpstore
warnings.simplefilter("ignore", ResourceWarning)
path = sys.argv[1]
unraisable = []
sys.unraisablehook = lambda u: unraisable.append(repr(u.exc_value))
other = cpstore.open(path)
gc.disable()
lost = cpstore.open(path, durability="batched")
cid = lost.recorder("r").checkpoint(0, {"x": 1})
cycle = [lost]
cycle.append(cycle)
del lost, cycle

def prepare(view):
    list(view.audit_records())  # the write txn has begun (PostgreSQL: its writer lock held)
    gc.collect()  # the batched store's finalizer runs here, inside other's write txn
    return {"k": 1}

other.append_audit_checked("probe", prepare)
for t in threading.enumerate():
    if t.name == "cpstore-collected-flush":
        t.join(120)
print(cid, unraisable[0] if unraisable else "-", other.ref("r"), flush=True)
"""


def test_a_store_collected_inside_a_write_of_the_same_store_flushes_after_it(
    tmp_path: Path,
) -> None:
    """The finalizer of a batched store collected inside a write txn of the same store never
    nests a write txn (LMDB refused it: the queue was lost, shown only as an ignored
    exception): a helper thread commits the queue once the write ends."""
    done = run_script(_COLLECTED_IN_A_WRITE, str(tmp_path / "s"))
    assert done.returncode == 0, done.stderr[-3000:]
    cid, raised, head = done.stdout.split()
    assert raised == "-", f"the finalizer's flush failed: {raised}"
    assert head == cid, "the collected store's queued checkpoint was lost"


def test_a_store_collected_inside_a_write_of_the_same_store_flushes_after_it_on_postgres(
    pg_url: str,  # noqa: F811 - the fixture
) -> None:
    """PostgreSQL: the same never waits for ever on its own writer lock (a nested write txn
    waited for the advisory lock this thread's other connection holds)."""
    try:
        done = run_script(_COLLECTED_IN_A_WRITE, pg_url, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the finalizer's flush deadlocked on this thread's own writer lock")
    assert done.returncode == 0, done.stderr[-3000:]
    cid, raised, head = done.stdout.split()
    assert raised == "-", f"the finalizer's flush failed: {raised}"
    assert head == cid, "the collected store's queued checkpoint was lost"


#: Another thread holds a write txn of the store and waits for the collecting thread (here an
#: event it sets after the collection; in a program, any lock the collecting thread holds).
_COLLECTED_WHILE_ANOTHER_THREAD_WRITES = """
import gc, sys, threading, warnings
import cpstore
warnings.simplefilter("ignore", ResourceWarning)
path = sys.argv[1]
other = cpstore.open(path)
gc.disable()
lost = cpstore.open(path, durability="batched")
cid = lost.recorder("r").checkpoint(0, {"x": 1})
cycle = [lost]
cycle.append(cycle)
del lost, cycle
inside, collected = threading.Event(), threading.Event()

waited_out = []

def prepare(view):
    list(view.audit_records())
    inside.set()
    waited_out.append(not collected.wait(20))  # True: the collector waited for this write
    return {"k": 1}

writer = threading.Thread(target=other.append_audit_checked, args=("probe", prepare))
writer.start()
assert inside.wait(60)
gc.collect()  # the finalizer must not wait for the writer, which waits for this thread
collected.set()
writer.join(60)
for t in threading.enumerate():
    if t.name == "cpstore-collected-flush":
        t.join(120)
print(cid, other.ref("r"), waited_out[0], flush=True)
"""


def test_a_store_collected_while_another_thread_writes_never_waits_for_it(
    tmp_path: Path,
) -> None:
    """The finalizer never waits for another thread's write txn (that thread may wait for
    the collecting thread: a deadlock before); the queue is committed after it."""
    try:
        done = run_script(_COLLECTED_WHILE_ANOTHER_THREAD_WRITES, str(tmp_path / "s"), timeout=100)
    except subprocess.TimeoutExpired:
        pytest.fail("the finalizer's flush waited for a writer waiting for it")
    assert done.returncode == 0, done.stderr[-3000:]
    cid, head, waited_out = done.stdout.split()
    assert waited_out == "False", "the finalizer's flush waited for a writer waiting for it"
    assert head == cid


def test_a_recorder_keeps_its_store_so_its_queue_commits_at_exit(tmp_path: Path) -> None:
    """A recorder of a batched store the caller dropped at once: what it queued commits at
    exit (the store died at once and the exit hook, tracking stores, lost it silently)."""
    code = (
        "import sys, cpstore\n"
        "rec = cpstore.open(sys.argv[1], durability='batched').recorder('r')\n"
        "print(rec.checkpoint(0, {'x': 1}))\n"
    )
    done = run_script(code, str(tmp_path / "s"))
    assert done.returncode == 0, done.stderr[-3000:]
    with cpstore.open(tmp_path / "s") as st:
        assert st.ref("r") == done.stdout.strip()


#: Holds the store's writer lock (LMDB's, or PostgreSQL's advisory lock) until stdin closes.
_HOLD_WRITER_LOCK = """
import sys
import cpstore
st = cpstore.open(sys.argv[1])

def hold(txn):
    if hasattr(txn, "begin_now"):
        txn.begin_now()  # PostgreSQL: BEGIN and the advisory writer lock
    print("held", flush=True)
    sys.stdin.read()

st.backend.write_txn(hold)
"""

#: Queues one checkpoint in batched mode, waits for stdin to close, exits normally (the
#: exit hook flushes). Opened first: a writable open takes the writer lock itself.
_QUEUE_AND_EXIT = """
import sys
import cpstore
st = cpstore.open(sys.argv[1], durability="batched")
print(st.recorder("r").checkpoint(0, {"x": 1}), flush=True)
sys.stdin.read()
"""


def _popen(code: str, store: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code, store],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def check_the_exit_flush_gives_up_on_a_writer_lock_another_process_holds(store: str) -> None:
    """A process exits with a queue while another process holds the writer lock for ever:
    it exits after the bounded wait, naming the queued id "NOT written" (it hung until the
    lock was released), and indeed nothing of it is stored."""
    cpstore.open(store).close()
    writer = _popen(_QUEUE_AND_EXIT, store)
    holder: subprocess.Popen[str] | None = None
    try:
        assert writer.stdout is not None
        cid = writer.stdout.readline().strip()
        holder = _popen(_HOLD_WRITER_LOCK, store)
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held", holder.communicate(timeout=60)
        try:  # closes its stdin: it exits now, the writer lock held by the holder
            _, err = writer.communicate(timeout=100)
        except subprocess.TimeoutExpired:
            writer.kill()
            writer.communicate(timeout=60)
            pytest.fail("the exit flush waited without bound for another process's lock")
    finally:
        if holder is not None:
            holder.kill()
            holder.communicate(timeout=60)
        if writer.poll() is None:
            writer.kill()
            writer.communicate(timeout=60)
    assert writer.returncode == 0, err[-3000:]
    assert "RuntimeWarning" in err and cid in err, err[-3000:]
    assert "were NOT written at interpreter exit" in err
    assert "writer lock" in err
    with cpstore.open(store) as st:
        assert st.ref("r") is None  # "NOT written" is the truth
        assert st.verify().ok


@needs_thread_at_exit
def test_the_exit_flush_gives_up_on_a_writer_lock_another_process_holds(tmp_path: Path) -> None:
    """LMDB: the exit flush waits at most ~5 s for a writer lock another process holds."""
    check_the_exit_flush_gives_up_on_a_writer_lock_another_process_holds(str(tmp_path / "s"))


@needs_thread_at_exit
def test_the_exit_flush_gives_up_on_a_writer_lock_another_process_holds_on_postgres(
    pg_url: str,  # noqa: F811 - the fixture
) -> None:
    """PostgreSQL: the same for the store's advisory writer lock."""
    check_the_exit_flush_gives_up_on_a_writer_lock_another_process_holds(pg_url)
