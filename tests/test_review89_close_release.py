"""review89: a store's close interrupted (a signal handler's exception: Ctrl-C, a
watchdog's alarm) once the close is decided, then closed again by its caller.

intr88 swept every landing in the frames named ``close``. Two more points lie past the
claim, after ``_closed`` is set, where a landing ended the close with nothing released
while the claim stayed this thread's, so the caller's retry returned at once, clean:

- LMDB: the start of ``LmdbBackend._release`` (a frame's start, where CPython runs
  pending handlers): the environment stayed registered with its handle and descriptors
  for the process's life (another mode's open and a compaction here refused);
- PostgreSQL: the return of ``os.getpid()`` before the pool's close: the pool, with its
  server connections, stayed open for the process's life.

Swept as intr88's test (tests/test_begin_interrupted.py's landings), over the frames
named ``close`` and ``_release``, the collector off until each landing is checked.

And a landing at the start of ``threading.Event.set``, which told another closing thread
that the close had ended: skipped, every other thread's close of the store waited for
good. The close now holds a plain lock until it ends and lets it go by a C call."""

from __future__ import annotations

import gc
import threading
from pathlib import Path

import pytest
from pg_cluster import backend_url  # noqa: F401 - fixture
from test_begin_interrupted import closes_interrupted, fds_in

import cpstore
from cpstore.store import lmdb_registry
from cpstore.store.lmdb_backend import Durability


@pytest.mark.parametrize("durability", ["sync", "batched"])
def test_a_close_interrupted_once_decided_then_closed_again_releases_the_store(
    url: str, durability: Durability
) -> None:
    lmdb = "://" not in url
    with cpstore.open(url) as first:
        first.recorder("r").checkpoint(0, {"a": 1})
    wrong: list[str] = []
    landings = 0
    for st, where in closes_interrupted(url, durability, {"close", "_release"}):
        landings += 1
        st.close()  # the caller's retry, the collector off
        if not st.backend.closed:
            wrong.append(f"{where}: not closed")
        if lmdb and lmdb_registry.is_open_here(url):  # before: _release@0
            wrong.append(f"{where}: open here")
        if lmdb and fds_in(Path(url)):
            wrong.append(f"{where}: descriptors {fds_in(Path(url))}")
        if not lmdb and not st.backend._pool.closed:  # before: close@<getpid's return>
            wrong.append(f"{where}: pool open")
        gc.enable()  # looked: the collector on for the undoing
        if lmdb and lmdb_registry.is_open_here(url):
            st.backend.env.handles = 1  # the test's own undoing, to go on sweeping
            lmdb_registry.release_env(st.backend.env)
        if not lmdb:
            st.backend._pool.close()
    assert landings >= 4
    assert wrong == []


@pytest.mark.parametrize("durability", ["sync", "batched"])
def test_a_close_interrupted_anywhere_never_leaves_another_threads_close_waiting(
    url: str, durability: Durability
) -> None:
    """The close's end tells a second closing thread it may go on (``done``): a landing
    in that telling (the start of ``threading.Event.set``, a frame of its own) skipped
    it, and every other thread's close of the store waited for good (LMDB polled a flag
    never set, PostgreSQL waited on it). Swept over the frames named ``close``,
    ``_release`` and ``set``; after each landing and the caller's retry, another
    thread's close must return."""
    stuck: list[str] = []
    landings = 0
    for st, where in closes_interrupted(url, durability, {"close", "_release", "set"}):
        landings += 1
        gc.enable()  # this test looks with the collector on
        st.close()  # the caller's retry
        other = threading.Thread(target=st.close, daemon=True)
        other.start()
        other.join(60)  # a generous bound: it returns at once unless stuck for good
        if other.is_alive():
            stuck.append(where)
            break  # that thread stays stuck: the sweep stops here
    assert landings >= 4 or stuck
    assert stuck == []  # before: ['set@0'], the other thread's close waited for good
