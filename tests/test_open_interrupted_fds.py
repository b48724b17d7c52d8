"""An open interrupted after LMDB opened the data file (session 34): the held data file's
descriptor (``TailCover.hold``) was closed only when a later step of ``Env.__init__``
failed, not when ``_open_files`` itself did, so an interrupt (a signal handler's
exception) landing in ``close_on_exec``'s scan of the process's descriptors, or on the
held file's ``fstat``, leaked it; each leaked descriptor made the next scan longer. The
sweep of tests/test_begin_interrupted.py lands a KeyboardInterrupt at each point of those
two frames; after each no descriptor is left and the store opens and reads here."""

from __future__ import annotations

import gc
import os
from pathlib import Path

from test_begin_interrupted import interrupted_at

import cpstore
from cpstore.store import lmdb_registry_state


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_an_open_interrupted_in_its_file_steps_leaves_no_descriptor(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with cpstore.open(path, durability="none") as st:
        cid = st.recorder("r").checkpoint(0, {"a": 1})
    gc.collect()
    before = _fds()
    left: list[str] = []

    def open_and_close() -> None:
        cpstore.open(path, durability="none").close()

    k = 0
    while True:
        k += 1
        landed = interrupted_at(
            k,
            {"_open_files", "close_on_exec"},
            lambda: cpstore.open(path, durability="none").close(),
        )
        gc.collect()
        if not landed:
            break
        if _fds() != before:  # stop at the first: each leak lengthens the scan swept
            left.append(f"{landed[0]}: {sorted(_fds() - before)}")
            break
        assert not lmdb_registry_state._REGISTRY, landed[0]
        with cpstore.open(path, durability="none") as again, again.read(cid) as cp:
            assert cp.state() == {"a": 1}, landed[0]
        gc.collect()
    assert left == []
    assert k > 10
