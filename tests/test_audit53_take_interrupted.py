"""An interrupt landing as BatchOwners.take returns (the batch in flight, the flush not yet
told it took it) puts the batch back on the queue.

A signal handler's exception lands on the return of any C call: in ``take`` the queue
lock's ``__exit__`` after :meth:`BatchOwners.taken` moved the queue in flight. The LMDB
flush decided whether a batch was taken by its own flag, set once ``take`` returned: an
interrupt there left the flag unset, the batch was settled as dropped (neither committed
nor queued again), and every checkpoint of it, acknowledged as queued, was lost without
a word (the exit flush found the queue empty). The PostgreSQL flush looks at the batch
itself and requeued it; both do now.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures

import cpstore
from cpstore.store.batch_owners import BatchOwners


def test_an_interrupt_as_take_returns_requeues_the_batch(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    st = cpstore.open(url, durability="batched", batch_size=1000)
    try:
        rec = st.recorder("r")
        first = rec.checkpoint(0, {"r": 0})
        second = rec.checkpoint(1, {"r": 1})
        real = BatchOwners.taken
        armed = [True]

        def taken(owners: BatchOwners[Any], *args: Any) -> tuple[int, ...]:
            got = real(owners, *args)  # the queue is in flight now
            if armed[0] and threading.current_thread() is threading.main_thread():
                armed[0] = False
                raise KeyboardInterrupt("injected as take returns")
            return got

        monkeypatch.setattr(BatchOwners, "taken", taken)
        with pytest.raises(KeyboardInterrupt):
            st.flush()
        assert st.pending == 2  # before (LMDB): 0, both lost
        st.flush()
        assert st.ref("r") == second
        assert [m.id for m in st.history("r")] == [second, first]
    finally:
        st.close()
