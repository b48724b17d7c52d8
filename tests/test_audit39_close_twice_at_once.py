"""audit39: two threads closing one LMDB store handle at once release its environment once.

``LmdbBackend.close`` looked at ``_closed``, flushed (batched mode), then set it and
released the environment: two threads closing the same handle at once both passed the
look and both released, dropping two handles of the shared environment for one. Another
handle of the same path, still open, then found its environment closed under it
(StoreClosedError "closed by another thread" on its next checkpoint). Now one close
releases; the other waits for it.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

from cpstore.store.facade import open as open_store
from cpstore.store.lmdb_backend import LmdbBackend


def test_two_threads_closing_one_handle_leave_another_handle_open(tmp_path: Path) -> None:
    path = tmp_path / "s"
    first = open_store(path, durability="batched")
    second = open_store(path, durability="batched")
    backend = first._backend
    assert isinstance(backend, LmdbBackend)
    first.recorder("a").checkpoint(0, {"a": 0})
    both_in = threading.Barrier(2, timeout=3)
    flush = backend.flush

    def flush_when_both_close() -> None:  # each close is past its look at _closed
        # One close waits for the other (the fixed code): the barrier breaks, it flushes.
        with contextlib.suppress(threading.BrokenBarrierError):
            both_in.wait()
        flush()

    backend.flush = flush_when_both_close  # type: ignore[method-assign]
    errors: list[BaseException] = []

    def close() -> None:
        try:
            first.close()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=close) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    assert backend.env.handles == 1
    cid = second.recorder("b").checkpoint(0, {"b": 1})
    second.flush()
    with second.read(cid) as view:
        assert view.state() == {"b": 1}
    second.close()
