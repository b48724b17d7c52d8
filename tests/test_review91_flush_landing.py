"""review91: put90's new landing point in a batched flush's txn.

put90 reads the txn's LMDB id (``txn.id()``, a C call) in ``_flush_once``'s
``apply_all`` after the batch is applied and before ``applied`` is set: an interrupt (a
signal handler's exception) can land on that call's return, inside the txn, outside
``BatchOwners.applying`` (whose requeue under the writer lock audit42 added for an
interrupt in the apply). The txn is aborted and the batch goes back on the queue only
once the txn has ended; another thread's flush, let go right then with a checkpoint
extending one of the batch queued, must wait for it (``BatchOwners.wait_mine``), never
commit ahead of it (ConflictError dropping its batch) or lose it. A thread with no
checkpoint in the interrupted batch, let go then, must not return from its flush before
its own checkpoint, queued behind that batch, is committed (tidy93: the first case passed
with that wait gone, since W's own checkpoint is in the batch and W waits for it anyway).
"""

from __future__ import annotations

import dis
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from flush_threads import WaitingWriter, assert_all_committed, flush_interrupted_beside_writer

import cpstore
from cpstore.store import lmdb_backend
from cpstore.store.facade import Store


def _after_the_id(landed: list[str]) -> Callable[[], None]:
    """Arm: a KeyboardInterrupt on the return of ``txn.id()`` in the main thread's next
    batch ``apply_all``; where it landed goes to ``landed``."""

    def trace(frame: FrameType, event: str, arg: object) -> Any:
        code = frame.f_code
        if code.co_name != "apply_all" or code.co_filename != lmdb_backend.__file__:
            return None
        frame.f_trace_opcodes = True
        if event == "opcode" and frame.f_lasti in _id_returns(code):
            sys.settrace(None)
            landed.append(f"apply_all@{frame.f_lasti}")
            raise KeyboardInterrupt(landed[-1])
        return trace

    return lambda: sys.settrace(trace)


def _id_returns(code: Any) -> list[int]:
    """Offsets of ``code``'s instructions right after its ``.id()`` calls (a C call's
    return: where CPython runs a pending signal's handler)."""
    out: list[int] = []
    loaded = previous = ""
    for ins in dis.get_instructions(code):
        if previous == "CALL" and loaded == "id":
            out.append(ins.offset)
        if ins.opname in ("LOAD_METHOD", "LOAD_ATTR"):
            loaded = str(ins.argval)
        previous = ins.opname
    return out


@pytest.fixture
def st(tmp_path: Path) -> Iterator[Store]:
    """A batched store (no flush but the test's), closed after the test."""
    store = cpstore.open(tmp_path / "s", durability="batched", batch_size=1000)
    yield store
    store.close()


def test_an_interrupt_on_the_txn_ids_return_keeps_the_batch_ahead(
    st: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    landed: list[str] = []
    try:
        w = flush_interrupted_beside_writer(st, monkeypatch, [lmdb_backend], _after_the_id(landed))
    finally:
        sys.settrace(None)
    assert len(landed) == 1
    assert_all_committed(st, w)


class _LateWriter(WaitingWriter):
    """A WaitingWriter with nothing queued before it is let go: then it queues checkpoint
    0 of ``branch`` and flushes; :attr:`stored` is the branch's steps once its flush
    returned (read in its thread, before the main thread flushes again)."""

    def __init__(self, st: Store, branch: str) -> None:
        super().__init__(st, branch)
        self.stored: list[list[int]] = []

    def _run(self, st: Store, branch: str, then_checkpoint: bool) -> None:
        self.queued.set()
        self.go.wait(60)
        try:
            st.recorder(branch).checkpoint(0, {branch: 0})
            st.flush()
            self.told.append(None)
            self.stored.append([m.step for m in st.history(branch)])
        except BaseException as exc:  # what it was told is the point
            self.told.append(exc)


def test_a_flush_let_go_beside_the_interrupted_batch_returns_once_its_own_is_committed(
    st: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    landed: list[str] = []
    v = _LateWriter(st, "v")
    v.start()
    st.recorder("r").checkpoint(0, {"r": 0})
    v.go_once_the_txn_ended(monkeypatch, [lmdb_backend])
    try:
        _after_the_id(landed)()
        with pytest.raises(KeyboardInterrupt):
            st.flush()
    finally:
        sys.settrace(None)
    v.join()
    assert len(landed) == 1
    assert v.told == [None], v.told
    assert v.stored == [[0]]  # committed by its own flush, not by the one below
    st.flush()
    assert [m.step for m in st.history("r")] == [0]
