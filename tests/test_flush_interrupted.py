"""A batched flush interrupted before its commit keeps its batch; a store write from a
signal handler inside a write of the same store is refused, never hung (LMDB).

Before: a ``sys.exit()`` from a signal handler (a SIGTERM handler's usual body) that
landed while a flush applied its batch dropped the batch without a word -- complete
checkpoints the exit flush promises to commit (docs/durability.md, "the queue, once")
were lost, and the store kept the head of before the flush; a KeyboardInterrupt there
did the same, and every other thread whose checkpoints were in that batch was told
"may or may not be stored". Now the batch goes back to the head of the queue: the exit
flush, the next flush, or the other thread's own flush commits it.

A checkpoint, flush or close asked from a signal handler that runs inside a commit or
flush of the same store on the same thread waited for the very write it interrupted for
ever (batched flush: its own batch; sync: the group it leads) or failed with LMDB's raw
"A write transaction is already active" (``durability="none"``). It is now
``ReentrantWriteError``, and the interrupted write goes on.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures

import cpstore
from cpstore.errors import ReentrantWriteError, StoreError
from cpstore.store.lmdb_backend import LmdbBackend
from cpstore.store.model import CheckpointWrite
from cpstore.store.pg_backend import PgBackend

#: Queues 50 checkpoints and flushes; the flush's first apply runs ``INSIDE`` (a signal
#: sent to itself, or an exception raised as a signal handler would). Prints what the
#: handler was told; the parent reads the store afterwards.
_SCRIPT = """
import os, signal, sys
import cpstore
from cpstore.store.lmdb_backend import LmdbBackend
from cpstore.store.pg_backend import PgBackend
path, inside, mode = sys.argv[1], sys.argv[2], sys.argv[3]
cls, name = (PgBackend, "_apply_all") if "://" in path else (LmdbBackend, "_apply")
st = cpstore.open(path, durability=mode, batch_size=1000)
told = []
spare = st.recorder("h")

def handler(signum, frame):
    try:
        if inside == "flush":
            st.flush()
        elif inside == "checkpoint":
            spare.checkpoint(0, {"h": 0})
        elif inside == "close":
            st.close()
        else:
            sys.exit(3)
    except cpstore.CpstoreError as exc:
        told.append(type(exc).__name__)

signal.signal(signal.SIGUSR1, handler)
real = getattr(cls, name)
armed = [mode == "batched"]

def apply(self, txn, ops):
    if armed[0]:
        armed[0] = False
        os.kill(os.getpid(), signal.SIGUSR1)  # the handler runs at the next bytecode
        for _ in range(1000):  # inside this apply, before the batch is written
            pass
    return real(self, txn, ops)

setattr(cls, name, apply)
rec = st.recorder("r")
for i in range(50):
    if i == 49 and mode != "batched":
        armed[0] = True
    rec.checkpoint(i, {"i": i, "a": "x" * 500})
st.flush()
print(",".join(told) or "-", flush=True)
"""


def _run(where: str, inside: str, mode: str = "batched") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _SCRIPT, where, inside, mode],
        capture_output=True,
        text=True,
        timeout=120,  # before: a flush from the handler waited for ever
        check=False,
    )


def _steps(path: str, run_id: str = "r") -> list[int]:
    with cpstore.open(path, readonly=True, create=False) as st:
        report = st.verify()
        assert report.ok, report.problems
        return [m.step for m in st.history(run_id)]


@pytest.mark.parametrize("backend", ["lmdb", "postgresql"])
def test_sys_exit_from_a_signal_handler_mid_flush_commits_the_queue_at_exit(
    backend: str,
    tmp_path: Path,
    pg_url: str,  # noqa: F811 - the fixture
) -> None:
    where = str(tmp_path / "s") if backend == "lmdb" else pg_url
    done = _run(where, "exit")
    assert done.returncode == 3, done.stderr[-2000:]
    assert "RuntimeWarning" not in done.stderr, done.stderr[-2000:]
    assert _steps(where) == list(range(49, -1, -1))  # before: [] (all 50 lost)


@pytest.mark.parametrize(
    ("backend", "mode"),
    [("lmdb", "batched"), ("lmdb", "sync"), ("lmdb", "none"), ("postgresql", "batched")],
)
def test_a_flush_or_checkpoint_from_a_signal_handler_inside_a_write_is_refused(
    backend: str,
    mode: str,
    tmp_path: Path,
    pg_url: str,  # noqa: F811 - the fixture
) -> None:
    """Before: batched and sync hung (the subprocess timed out); none raised LMDB's raw
    'A write transaction is already active' as a plain StoreError."""
    where = str(tmp_path / "s") if backend == "lmdb" else pg_url
    inside = "flush" if mode == "batched" else "checkpoint"
    done = _run(where, inside, mode)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["ReentrantWriteError"]
    assert _steps(where) == list(range(49, -1, -1))
    assert _steps(where, "h") == []


def test_a_close_from_a_signal_handler_inside_a_flush_is_refused(tmp_path: Path) -> None:
    """The close would release the environment under the write it interrupted."""
    done = _run(str(tmp_path / "s"), "close")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["ReentrantWriteError"]
    assert _steps(str(tmp_path / "s")) == list(range(49, -1, -1))


def _interrupt_the_next_apply(
    monkeypatch: pytest.MonkeyPatch, exc: BaseException, before: threading.Event | None = None
) -> None:
    """The next batch apply (either backend's) raises ``exc`` (once ``before`` has been set,
    if given, plus a moment for the thread that set it to reach its wait)."""
    armed = [True]
    for cls, name in ((LmdbBackend, "_apply"), (PgBackend, "_apply_all")):
        real = getattr(cls, name)

        def apply(self: Any, txn: Any, ops: Sequence[CheckpointWrite], real: Any = real) -> None:
            if armed[0] and len(ops) > 1:
                armed[0] = False
                if before is not None:
                    before.set()
                    time.sleep(0.3)  # the other thread's flush: waiting on this batch
                raise exc
            real(self, txn, ops)

        monkeypatch.setattr(cls, name, apply)


@pytest.fixture(params=["lmdb", "postgresql"])
def batched(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    pg_url: str,  # noqa: F811 - the fixture
) -> Iterator[cpstore.Store]:
    where = str(tmp_path / "s") if request.param == "lmdb" else pg_url
    with cpstore.open(where, durability="batched", batch_size=1000) as st:
        yield st


def test_a_keyboard_interrupt_mid_flush_leaves_the_batch_queued(
    batched: cpstore.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    st = batched
    rec = st.recorder("r")
    ids = [rec.checkpoint(i, {"i": i}) for i in range(10)]
    _interrupt_the_next_apply(monkeypatch, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        st.flush()
    assert st.pending == 10  # before: 0, the batch dropped
    assert st.ref("r") is None
    ids.append(rec.checkpoint(10, {"i": 10}))  # the recorder goes on from its queue
    st.flush()
    assert st.pending == 0 and st.ref("r") == ids[-1]
    assert [m.step for m in st.history("r")] == list(range(10, -1, -1))


def test_a_signal_handlers_exception_mid_flush_leaves_the_batch_queued(
    batched: cpstore.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A watchdog's handler raising TimeoutError inside the flush: the batch is not the
    store's to drop (a store error raised by the batch itself still drops it)."""
    st = batched
    rec = st.recorder("r")
    for i in range(5):
        rec.checkpoint(i, {"i": i})
    _interrupt_the_next_apply(monkeypatch, TimeoutError("watchdog"))
    with pytest.raises(TimeoutError):
        st.flush()
    assert st.pending == 5
    _interrupt_the_next_apply(monkeypatch, StoreError("the batch's own failure"))
    with pytest.raises(StoreError):
        st.flush()
    assert st.pending == 0 and st.ref("r") is None  # dropped, as documented


def test_another_threads_flush_commits_a_batch_an_interrupt_requeued(
    batched: cpstore.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the other thread, whose checkpoint was in the interrupted batch, was told
    OutcomeUnknownError "may or may not be stored" and its checkpoint was lost."""
    st = batched
    st.recorder("a").checkpoint(0, {"a": 0})
    taken = threading.Event()
    told: list[BaseException | None] = []
    queued = threading.Event()

    def other() -> None:
        st.recorder("b").checkpoint(0, {"b": 0})
        queued.set()
        taken.wait(60)
        try:
            st.flush()  # its checkpoint is in the main thread's batch
            told.append(None)
        except BaseException as exc:
            told.append(exc)

    thread = threading.Thread(target=other)
    thread.start()
    assert queued.wait(60)
    _interrupt_the_next_apply(monkeypatch, KeyboardInterrupt(), before=taken)
    with pytest.raises(KeyboardInterrupt):
        st.flush()
    thread.join(60)
    assert not thread.is_alive()
    assert told == [None]
    assert st.pending == 0
    assert st.ref("a") is not None and st.ref("b") is not None


def test_reentrant_write_error_is_a_store_error() -> None:
    assert issubclass(ReentrantWriteError, StoreError)
    assert ReentrantWriteError.__name__ in cpstore.__all__
