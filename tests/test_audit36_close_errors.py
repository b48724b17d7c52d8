"""audit36: a thread using a store another thread closes is told the store is closing/closed.

audit34 made the last handle's close hold the write lock, hold back new reads and wait
(at most 5 s) for other threads' reads, the way a map resize does. A thread holding a
read that then wrote met the resize's refusal, ``ReadHeldDuringResizeError`` ("the map
must change size ..."), whose advice (end the read and try again) is wrong for a store
being closed; a thread already past the handle's closed check met LMDB's own "Attempt to
operate on closed/deleted/dropped object" as ``StoreError("LMDB failed")``. Both now get
the ``StoreError`` a use after close gets ("the store is closed"; "... is closing" while
the close waits), with what/where/expected/got.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from cpstore.errors import ReadHeldDuringResizeError, StoreClosedError, StoreError
from cpstore.store.facade import open as open_store
from cpstore.store.lmdb_backend import Durability, LmdbBackend
from cpstore.store.lmdb_env import Env


def _env(st: object) -> Env:
    backend = st._backend  # type: ignore[attr-defined]
    assert isinstance(backend, LmdbBackend)
    return backend.env


def _wait_for(flag: threading.Event, what: str) -> None:
    if not flag.wait(120):  # a hang guard only: the test asserts order, never time
        raise AssertionError(f"never happened: {what}")


def _assert_closing_error(exc: BaseException | None, path: Path) -> None:
    assert isinstance(exc, StoreError), repr(exc)
    assert not isinstance(exc, ReadHeldDuringResizeError), repr(exc)
    assert type(exc) is StoreClosedError, repr(exc)  # what a use after close raises
    assert exc.what.startswith("the store is clos"), exc.what
    assert exc.where is not None and str(path) in exc.where
    assert exc.expected is not None and exc.got is not None, exc


def _stack_of(thread: threading.Thread) -> list[str]:
    frame = sys._current_frames().get(thread.ident or 0)
    names = []
    while frame is not None:
        names.append(frame.f_code.co_name)
        frame = frame.f_back
    return names


@pytest.mark.parametrize("mode", ["sync", "none", "batched"])
def test_a_thread_holding_a_read_that_writes_while_the_store_closes_is_told_so(
    tmp_path: Path, mode: Durability
) -> None:
    """Thread R holds a read and writes; its write waits for the write lock (the main
    thread holds it), then the main thread closes the store, whose close waits for R's
    read: R's write was refused ReadHeldDuringResizeError ("the map must change size",
    end the read and try again); now the closing store's StoreError. Its next read after
    the close is refused as a closed store's."""
    path = tmp_path / "s"
    st = open_store(path, durability=mode)
    cid = st.recorder("r").checkpoint(0, {"a": 1})
    st.flush()
    env = _env(st)
    reading, go = threading.Event(), threading.Event()
    got: dict[str, BaseException | None] = {"write": None, "read": None}

    def reader() -> None:
        rec = st.recorder("w")
        with st.read(cid) as view:
            view.state()
            reading.set()
            _wait_for(go, "the main thread holding the write lock")
            try:
                rec.checkpoint(1, {"b": 2})
                st.flush()  # batched: the write is the flush's
            except BaseException as exc:
                got["write"] = exc
        try:
            st.read(cid).__enter__()
        except BaseException as exc:
            got["read"] = exc

    th = threading.Thread(target=reader)
    th.start()
    _wait_for(reading, "the reader's read")
    env.write_lock.acquire()  # reentrant: this thread's close takes it again at once
    try:
        go.set()
        for _ in range(1_000_000):  # R past the handle's checks, waiting for the lock
            if "_lock_writes" in _stack_of(th) or not th.is_alive():
                break
            th.join(0.001)
        assert th.is_alive(), got
        st.close()  # waits for R's read, which ends once R's write is refused
    finally:
        env.write_lock.release()
    th.join()
    _assert_closing_error(got["write"], path)
    _assert_closing_error(got["read"], path)


def test_a_thread_past_the_handles_check_meets_the_closed_store_not_an_lmdb_error(
    tmp_path: Path,
) -> None:
    """A thread that passed the handle's closed check before the close (it waited for the
    write lock the close held) begins its txn on the closed environment: it got
    StoreError("LMDB failed", got="Attempt to operate on closed/deleted/dropped object")."""
    path = tmp_path / "s"
    st = open_store(path, durability="none")
    st.recorder("r").checkpoint(0, {"a": 1})
    env = _env(st)
    st.close()
    for attempt in (lambda: env.write(lambda txn: None), env.begin_read, env.grow):
        with pytest.raises(StoreError) as caught:
            attempt()
        _assert_closing_error(caught.value, path)


_STRESS = """
import collections, os, random, shutil, sys, threading, time
import cpstore
from cpstore.errors import CpstoreError
root, mode, trials = sys.argv[1], sys.argv[2], int(sys.argv[3])
rnd = random.Random(36)
seen = collections.Counter()
for trial in range(trials):
    path = os.path.join(root, f"s{trial}")
    st = cpstore.open(path, durability=mode, map_size=1 << 30)  # no growth: no real resize
    first = st.recorder("first").checkpoint(0, {"a": 1})
    st.flush()
    def write(t):
        rec = st.recorder(f"r{t}")
        r = random.Random(trial * 10 + t)
        for step in range(100000):
            try:
                pad = os.urandom(r.choice([10, 300, 3000])).hex()
                if t % 2:  # half the threads write inside a read block
                    with st.read(first):
                        rec.checkpoint(step, {"p": pad})
                else:
                    rec.checkpoint(step, {"p": pad})
            except CpstoreError as exc:
                seen[type(exc).__name__ + ": " + exc.what] += 1
                return
            except BaseException as exc:
                seen["odd " + repr(exc)] += 1
                return
    threads = [threading.Thread(target=write, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    time.sleep(rnd.uniform(0.02, 0.2))
    st.close()
    for th in threads:
        th.join()
    shutil.rmtree(path)
for what, n in sorted(seen.items()):
    print(n, what, flush=True)
"""


@pytest.mark.parametrize("mode", ["sync", "none", "batched"])
def test_every_thread_a_close_stops_is_told_the_store_is_closed(tmp_path: Path, mode: str) -> None:
    """20 times: four threads checkpoint (two inside a read block), the main thread closes
    the store under them; the process lives, and every thread stops on the closed store's
    StoreError, none on ReadHeldDuringResizeError or a raw "LMDB failed".

    Before audit36, besides those errors, "sync" died of SIGSEGV/SIGBUS here (5 runs of
    5): py-lmdb 1.x's close aborts each txn object still alive with the GIL let go
    before it forgets it, and another thread dropping the last reference to one
    meanwhile aborted it again (gdb: trans_dealloc -> mdb_txn_abort on freed memory).
    EnvTxns._txns now holds every txn object until it can be freed with no close beside.
    """
    done = subprocess.run(
        [sys.executable, "-X", "faulthandler", "-c", _STRESS, str(tmp_path), mode, "20"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-4000:])
    kinds = {line.split(" ", 1)[1] for line in done.stdout.splitlines()}
    assert kinds <= {
        "StoreClosedError: the store is closed",
        "StoreClosedError: the store is closing",
    }, done.stdout


def test_the_txn_objects_a_store_holds_for_its_close_stay_few(tmp_path: Path) -> None:
    """EnvTxns._txns holds every txn object until it can be freed with no close beside:
    it must let them go as their users do, or every read and write would leak one (and
    py-lmdb's spare read txn would never be reused). 300 checkpoints and 600 reads in
    four threads, one of them holding a view throughout: a handful left, the held one
    among them until the close."""
    path = tmp_path / "s"
    st = open_store(path, durability="none")
    env = _env(st)
    cid = st.recorder("r").checkpoint(0, {"a": 1})
    held = st.read(cid)
    held.__enter__()

    def work(t: int) -> None:
        rec = st.recorder(f"w{t}")
        for step in range(75):
            mine = rec.checkpoint(step, {"s": step})
            for _ in range(2):
                with st.read(mine) as view:
                    assert view.state() == {"s": step}

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    with st.read(cid) as view:  # one more read ends with nobody else's txn alive
        view.state()
    assert len(env._txns) <= 4, len(env._txns)
    held.__exit__(None, None, None)
    st.close()
    assert not env._txns
