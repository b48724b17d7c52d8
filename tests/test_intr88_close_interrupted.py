"""intr88: a store's close interrupted (a signal handler's exception: Ctrl-C, a watchdog's
alarm) in its own frames, then closed again by its caller.

- ``LmdbBackend.close`` and ``PgBackend.close`` claimed the close (``_closer``, under a
  lock) before the ``try`` whose ``finally`` ends the claim: an interrupt landing on the
  claim lock's release (a C call's return, where CPython runs pending handlers) left it
  set, so every later close by this thread returned at once, clean, with the store still
  open: on LMDB the environment stayed registered with its handle and descriptors for
  the process's life (another mode's open and a compaction here refused), on PostgreSQL
  the pool stayed open, and a batched store refused every put ("the store is closing").
- ``TailCover.close`` took the meta pages' map into a local before closing it: a landing
  on ``isinstance``'s return left the map, with the data file descriptor it holds, to the
  exception's traceback (a cycle through the undo loop's kept exception, freed only by
  the collector, which the sweep keeps off).

tests/test_begin_interrupted.py's sweep lands at every frame start and C call's return of
the frames named ``close`` (the facade's, the backend's, the tail cover's, the holder
mark's, the pool's), the collector off until each landing is checked."""

from __future__ import annotations

from pathlib import Path

import pytest
from pg_cluster import backend_url  # noqa: F401 - fixture
from test_begin_interrupted import closes_interrupted, fds_in

import cpstore
from cpstore.store import lmdb_registry
from cpstore.store.lmdb_backend import Durability


@pytest.mark.parametrize("durability", ["sync", "batched"])
def test_a_close_interrupted_in_its_frames_then_closed_again_is_closed(
    url: str, durability: Durability
) -> None:
    lmdb = "://" not in url
    with cpstore.open(url) as first:
        first.recorder("r").checkpoint(0, {"a": 1})
    wrong: list[str] = []
    landings = 0
    for st, where in closes_interrupted(url, durability, {"close"}):  # the collector off
        landings += 1
        st.close()  # the caller's retry
        if not st.backend.closed:  # before: the claim kept (close@336), the retry clean
            wrong.append(f"{where}: not closed")
            st.backend._closer = None  # the test's own undoing, to go on sweeping
            st.close()
        if lmdb and lmdb_registry.is_open_here(url):
            wrong.append(f"{where}: open here")
        if lmdb and fds_in(Path(url)):  # before: TailCover.close@96's map, data.mdb
            wrong.append(f"{where}: descriptors {fds_in(Path(url))}")
    assert landings >= 4
    assert wrong == []
