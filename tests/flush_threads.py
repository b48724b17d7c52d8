"""Other threads of the batched-interrupt tests: a writer that flushes once the main
thread's interrupted flush has left its txn, and a closer started inside the main thread's
batch apply."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from types import ModuleType
from typing import Any

import pytest

from cpstore.store.batch_owners import BatchOwners
from cpstore.store.facade import Store
from cpstore.store.lmdb_backend import LmdbBackend
from cpstore.store.model import CheckpointWrite
from cpstore.store.pg_backend import PgBackend


class WaitingWriter:
    """Thread W: queues checkpoint 0 of ``branch`` ({branch: 0}), waits until :attr:`go`
    is set (60 s at most), then flushes, after checkpoint 1 ({branch: 1}) if
    ``then_checkpoint``; :attr:`told` holds what that raised (None: it returned)."""

    def __init__(self, st: Store, branch: str = "w", *, then_checkpoint: bool = False) -> None:
        self.queued, self.go = threading.Event(), threading.Event()
        self.told: list[BaseException | None] = []
        self._thread = threading.Thread(target=self._run, args=(st, branch, then_checkpoint))

    def _run(self, st: Store, branch: str, then_checkpoint: bool) -> None:
        rec = st.recorder(branch)
        rec.checkpoint(0, {branch: 0})
        self.queued.set()
        self.go.wait(60)
        try:
            if then_checkpoint:
                rec.checkpoint(1, {branch: 1})
            st.flush()
            self.told.append(None)
        except BaseException as exc:  # what it was told is the point
            self.told.append(exc)

    def start(self) -> None:
        """Start W; returns once its checkpoint 0 is queued."""
        self._thread.start()
        assert self.queued.wait(60)

    def go_once_the_txn_ended(
        self, monkeypatch: pytest.MonkeyPatch, modules: Iterable[ModuleType]
    ) -> None:
        """Let W go as the main thread's interrupted flush has left its write txn (at its
        first call of the backend modules' ``interrupted``), and wait (60 s at most) until
        W has ended or waits for a commit to settle (BatchOwners.wait_mine: the main
        thread's batch, whose fate that call settles)."""
        waiting = threading.Event()
        real_wait = BatchOwners.wait_mine

        def wait_mine(owners: BatchOwners[CheckpointWrite], *args: Any) -> bool:
            if threading.current_thread() is self._thread:
                waiting.set()
            return real_wait(owners, *args)

        monkeypatch.setattr(BatchOwners, "wait_mine", wait_mine)
        for module in modules:
            real = module.interrupted

            def between(*args: Any, real: Any = real) -> Any:  # the txn has ended here
                if threading.current_thread() is threading.main_thread() and not self.go.is_set():
                    self.go.set()
                    deadline = time.monotonic() + 60
                    while self._thread.is_alive() and not waiting.is_set():
                        if time.monotonic() >= deadline:
                            break
                        self._thread.join(0.01)
                return real(*args)

            monkeypatch.setattr(module, "interrupted", between)

    def join(self) -> None:
        """W has ended (waited for 60 s at most)."""
        self._thread.join(60)
        assert not self._thread.is_alive()


def close_in_the_next_apply(
    monkeypatch: pytest.MonkeyPatch,
    st: Store,
    until: threading.Event | Callable[[threading.Thread], bool],
    closed: threading.Event | None = None,
) -> tuple[threading.Thread, list[BaseException | None]]:
    """The next batch apply (either backend's) starts thread "closer" closing ``st``, waits
    until ``until`` is set (asserted within 60 s; a function of the closer: until it holds,
    at most 30 s) and raises KeyboardInterrupt instead of applying. The closer (not started
    yet) and what its close raised (None: it returned); ``closed`` is set once the close
    has ended, either way."""
    told: list[BaseException | None] = []

    def close() -> None:
        try:
            st.close()
            told.append(None)
        except BaseException as exc:  # what it was told is the point
            told.append(exc)
        if closed is not None:
            closed.set()

    closer = threading.Thread(target=close, name="closer")
    armed = [True]
    for cls, name in ((LmdbBackend, "_apply"), (PgBackend, "_apply_all")):
        real = getattr(cls, name)

        def apply(owner: Any, txn: Any, ops: Sequence[CheckpointWrite], real: Any = real) -> None:
            if armed[0]:
                armed[0] = False
                closer.start()
                if isinstance(until, threading.Event):
                    assert until.wait(60)
                else:
                    deadline = time.monotonic() + 30
                    while not until(closer) and time.monotonic() < deadline:
                        time.sleep(0.01)
                raise KeyboardInterrupt
            real(owner, txn, ops)

        monkeypatch.setattr(cls, name, apply)
    return closer, told


def flush_interrupted_beside_writer(
    st: Store,
    monkeypatch: pytest.MonkeyPatch,
    modules: Sequence[ModuleType],
    arm: Callable[[], None],
) -> WaitingWriter:
    """Thread W queues w0 and waits; the main thread queues r0 of run r and flushes with
    ``arm()``'s patches in place, which must interrupt that flush (KeyboardInterrupt); W is
    let go once the main thread's txn ended (``modules``' backends), queues w1 (extending
    w0) and flushes. W, joined (:attr:`WaitingWriter.told` says what its flush raised)."""
    w = WaitingWriter(st, then_checkpoint=True)
    w.start()
    st.recorder("r").checkpoint(0, {"r": 0})
    w.go_once_the_txn_ended(monkeypatch, modules)
    arm()
    with pytest.raises(KeyboardInterrupt):
        st.flush()
    w.join()
    return w


def assert_all_committed(st: Store, w: WaitingWriter) -> None:
    """W's flush returned, and once the main thread's requeued batch is flushed too, w0,
    w1 and r0 are stored in order."""
    assert w.told == [None], w.told
    st.flush()
    assert [m.step for m in st.history("w")] == [1, 0]
    assert [m.step for m in st.history("r")] == [0]
