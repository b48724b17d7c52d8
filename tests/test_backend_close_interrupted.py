"""left86's leftover: ``LmdbBackend.close`` interrupted (a signal handler's exception) at
``release_env``'s start.

The close set ``_closed`` and then called ``release_env`` once: a landing at its start
kept the handle, and every later close returned at once (the close was this thread's,
already under way), so the environment stayed open for the process's life: another
mode's open refused ("already open in this process"), a compaction refused. Now the
release is tried again until the handle is dropped, the interrupt raised after. The
sweep lands at every point of ``release_env`` in turn and of what it calls, counting
only a landing before the handle is dropped as the close's to mend (later ones are
release_env's own: tests/test_left86_release_interrupted.py)."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import pytest
from test_begin_interrupted import interrupted_at

import cpstore
from cpstore.store import lmdb_registry
from cpstore.store.lmdb_backend import Durability


@pytest.mark.parametrize("durability", ["sync", "none", "batched"])
def test_a_close_interrupted_at_the_release_lets_the_handle_go(
    tmp_path: Path, durability: Durability
) -> None:
    path = tmp_path / "s"
    with cpstore.open(path) as first:
        cid = first.recorder("r").checkpoint(0, {"a": 1})
    k = 0
    while True:
        k += 1
        st: Any = cpstore.open(path, durability=durability)
        landed = interrupted_at(k, {"release_env"}, st.close)
        gc.collect()
        if not landed:
            assert not lmdb_registry.is_open_here(str(path))
            break
        st.close()  # a caller's retry
        # Before: the handle kept, still open here after every close (release_env@0).
        assert not lmdb_registry.is_open_here(str(path)), landed[0]
        with cpstore.open(path, readonly=True) as ro, ro.read(cid) as cp:
            assert cp.state() == {"a": 1}, landed[0]
    assert k > 3, k
