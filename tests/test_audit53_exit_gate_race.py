"""The exit flush's wait ends once its worker left the gate, even after the first bound.

The main thread waits ``wait`` seconds for the worker (at_exit.flush_bounded); when the
worker has begun a txn then (it holds the writer lock), it waits for it to end. A txn
that took nothing (another thread's batch in flight, BatchOwners.take) leaves the gate
(ExitGate.leave) and its flush waits for the writer lock again. The worker that had
entered just before the bound ran out and left just after was waited for without bound,
however long its next wait for the lock (another process holding it for ever). Now the
main thread looks again until the worker ends or may be given up.
"""

from __future__ import annotations

import threading
import time

import pytest

from cpstore.errors import StoreError
from cpstore.store.at_exit import ExitGate, flush_bounded


def test_a_worker_leaving_the_gate_after_the_bound_is_given_up() -> None:
    gate = ExitGate()
    never = threading.Event()  # the writer lock another process holds for ever

    def flush() -> None:
        gate.enter()  # the lock held, the first txn begun just before the bound ends
        time.sleep(0.6)  # the bound (0.3 s) runs out meanwhile
        gate.leave()  # it took nothing: its txn ends, it flushes again
        never.wait(30)  # waiting for the lock again
        gate.enter()

    began = time.monotonic()
    with pytest.raises(StoreError, match="writer lock"):
        flush_bounded(flush, gate, 0.3, "test")
    took = time.monotonic() - began
    never.set()
    assert took < 5, took  # before: 30 s, the whole wait for the lock
