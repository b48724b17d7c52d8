"""review87: a ``durability="none"`` store's close whose fsync fails says so to the closer,
also when another thread closes the environment for it (LMDB only: PostgreSQL's
durability is the server's).

Since left86, release_env notes the environment as left open from its last handle's drop
until its close (``_LEFT_OPEN``), so an ``is_open_here``, an open or a compact of another
thread meanwhile (``_close_left_open``) takes a handle and closes it itself. When that
close's fsync failed, the other thread only warned, and the closing thread, finding the
environment closed, returned as from a clean close: the checkpoints committed since the
last sync were reported durable and were not (before left86 the closer's own close ran
the fsync and raised the failure). Since registry102 that look waits for the closer's own
close under way instead (event-driven here: the closer goes on when the look waits), so
the closer runs the failing fsync itself: it raises it as before; the other thread's close
for it (review87's path) is left to a look that does not wait (its own write or read, past
its bound)."""

from __future__ import annotations

import sys
import threading
import warnings
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

import cpstore
from cpstore.errors import StoreError
from cpstore.store import lmdb_env, lmdb_registry, lmdb_registry_state


@pytest.mark.parametrize("other", ["is_open_here", "open"])
def test_a_none_close_whose_fsync_another_thread_ran_and_failed_raises_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, other: str
) -> None:
    path = tmp_path / "s"
    st = cpstore.open(path, durability="none")
    st.recorder("r").checkpoint(0, {"a": 1})
    env = lmdb_registry_state._REGISTRY[lmdb_registry.canonical(str(path))]
    past_drop, go = threading.Event(), threading.Event()
    real = env.quiesced

    def quiesced() -> Any:  # the closer pauses after its handle's drop, before its close
        if threading.current_thread().name == "closer":
            past_drop.set()
            go.wait()
        return real()

    monkeypatch.setattr(env, "quiesced", quiesced)

    def failing_sync(self: lmdb_env.Env) -> None:
        raise StoreError("fsync failed (EIO)", where=self.path)

    monkeypatch.setattr(lmdb_env.Env, "sync", failing_sync)
    got: list[BaseException | None] = []
    opened: list[cpstore.Store] = []

    def closer() -> None:
        try:
            st.close()
            got.append(None)
        except BaseException as exc:
            got.append(exc)

    def on_wait(frame: FrameType, event: str, arg: object) -> None:
        # Since registry102 the look waits for the closer's own close under way: let it go
        # on then (it runs its fsync itself, and raises its failure).
        if event == "call" and frame.f_code.co_qualname == "LeftOpenClose.wait":
            go.set()

    a = threading.Thread(target=closer, name="closer")
    a.start()
    past_drop.wait()
    sys.settrace(on_wait)
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            if other == "is_open_here":
                assert not lmdb_registry.is_open_here(str(path))
            else:
                opened.append(cpstore.open(path, durability="none"))  # a new environment
    finally:
        sys.settrace(None)
        go.set()  # never left waiting (the process would not exit)
    a.join()
    assert env.closed
    # Before: [None] (the close returned as a clean one), the failure a warning only.
    assert len(got) == 1 and isinstance(got[0], StoreError), (got, [str(w.message) for w in seen])
    assert "fsync failed" in str(got[0])
    monkeypatch.undo()
    for again in opened:
        again.close()
    assert not lmdb_registry.is_open_here(str(path))
