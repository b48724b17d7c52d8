"""audit47: another thread's view of a batch whose flush raised a signal handler's exception
of class Exception (a SIGALRM watchdog's TimeoutError) after its commit, when the store
could not be read back to settle it.

The batch may or may not be stored; the flushing thread gets its TimeoutError, and each
other thread with checkpoints in the batch is told by its next flush. It was told
StoreError "... failed: not stored" (batch_fates.dropped_error took a non-cpstore
Exception for the batch's own failure), for a batch the store held: a false "not stored".
"""

from __future__ import annotations

from typing import Any

import pytest
from test_batched_threads import JobThread

import cpstore
from cpstore.errors import OutcomeUnknownError, StoreError
from cpstore.store import lmdb_backend


def test_an_unsettled_handler_exception_after_the_commit_is_never_not_stored(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    with cpstore.open(str(tmp_path / "s"), durability="batched", batch_size=64) as st:
        backend: Any = st.backend
        rb, b = st.recorder("b"), JobThread()
        cid = b.run(lambda: rb.checkpoint(1, {"b": 1}))
        real = backend.write_txn

        def committed_then_alarm(fn: Any) -> None:
            real(fn)
            raise TimeoutError("a SIGALRM handler's, after the commit")

        def unreadable(*args: object) -> None:
            raise StoreError("cannot read the store back (injected)", where="test")

        with monkeypatch.context() as m:
            m.setattr(backend, "write_txn", committed_then_alarm)
            m.setattr(lmdb_backend, "batch_landed", unreadable)
            with pytest.raises(TimeoutError):
                st.flush()
        got = b.run(st.flush)
        b.stop()
        assert st.ref("b") == cid  # it is stored
        assert got is None or isinstance(got, OutcomeUnknownError), (
            f"B was told a stored checkpoint is not stored: {got!r}"
        )
