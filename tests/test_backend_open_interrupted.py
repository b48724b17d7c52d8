"""left86's leftover: an open interrupted (a signal handler's exception) in
``LmdbBackend.__init__`` after it took its handle on the environment.

tests/test_begin_interrupted.py's sweep over every ``__init__`` an open runs and
``shared_reentry``: after each landing nothing is registered, no descriptor is left, and
the store opens in another mode. Before, a landing at ``shared_reentry``'s start (the
first call after ``acquire_env``, before the ``try`` that let the handle go) left the
environment registered with a handle nobody held: a read-only open of the store in this
process, and a compaction, were refused for the process's life."""

from __future__ import annotations

import gc
import os
from pathlib import Path
from typing import Any

from test_begin_interrupted import interrupted_at

import cpstore
from cpstore.store import lmdb_registry_state


def test_an_open_interrupted_after_its_handle_was_taken_lets_it_go(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with cpstore.open(path, durability="none") as st:
        cid = st.recorder("r").checkpoint(0, {"a": 1})
    gc.collect()
    before = set(os.listdir("/proc/self/fd"))
    opened: list[Any] = []

    def open_it() -> None:
        opened.append(cpstore.open(path))

    k = 0
    while True:
        k += 1
        landed = interrupted_at(k, {"__init__", "shared_reentry"}, open_it)
        while opened:
            opened.pop().close()
        gc.collect()
        if not landed:
            break
        assert not lmdb_registry_state._REGISTRY, f"{landed[0]}: left registered"
        assert set(os.listdir("/proc/self/fd")) == before, f"{landed[0]}: descriptors left"
        with cpstore.open(path, readonly=True) as ro, ro.read(cid) as cp:
            assert cp.state() == {"a": 1}, landed[0]
    assert k > 20, k
