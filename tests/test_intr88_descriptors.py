"""intr88: the other descriptors and locks of cpstore/store an interrupt (a signal
handler's exception: Ctrl-C, a watchdog's alarm) leaked, found by grepping every
``@contextmanager`` and ``os.open`` there not swept before.

- ``lmdb_copy._exclusive`` (a compaction's hold of LMDB's liveness byte, exclusive) was a
  contextlib ``@contextmanager``: a landing on ``next()``'s return in ``__enter__`` raised
  before the ``with`` block, no ``__exit__`` ran, and the suspended generator kept the
  lock and its descriptor while the caller kept the exception: another process found the
  store's liveness lock held (LMDB's open there waits on it).
- ``lmdb_copy._fsync_path`` (a copy's and a compaction's fsyncs), ``highest_reachable_page``
  (the open's walk of a short data file) and ``lmdb_holders._read_proc`` (``/proc`` maps,
  read by the older-release guard) opened by a bare ``fd = os.open(...)`` before the
  ``try`` that closes it: a landing on the open's return leaked the descriptor for the
  process's life (a compaction's copy, already deleted, kept its disk space).

Each is now kept as it is taken (``kept_contextmanager``; ``list.extend(map(os.open, ...))``
inside the ``try``). Swept with tests/test_begin_interrupted.py's landings; the enter's
landing as tests/test_review87_lock_enter.py finds it."""

from __future__ import annotations

import gc
import os
from pathlib import Path
from typing import Any

import pytest
from test_begin_interrupted import fds_in, interrupted_at
from test_review87_lock_enter import _kept_interrupt
from test_review87_open_undo import _liveness_lock

import cpstore
from cpstore.store.lmdb_backend import LmdbBackend
from cpstore.store.lmdb_holders import _read_proc
from cpstore.store.lmdb_pages import highest_reachable_page
from cpstore.store.maintenance import compact_store


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, str, dict[str, Any]]:
    """A store with a checkpoint; its LMDB figures (``last_pgno``, ``last_txnid``, ``psize``)."""
    path = tmp_path / "s"
    with cpstore.open(path) as st:
        cid = st.recorder("r").checkpoint(0, {"a": 1})
        backend = st.backend
        assert isinstance(backend, LmdbBackend)
        figures = {**backend.env.env.info(), "psize": backend.env.env.stat()["psize"]}
    return path, cid, figures


def _reads(path: Path, cid: str) -> None:
    with cpstore.open(path) as st, st.read(cid) as cp:
        assert cp.state() == {"a": 1}
        assert st.verify().ok


def _sweep(names: set[str], call: Any, folder: Path) -> tuple[int, list[str]]:
    """Land at each point of ``names``' frames in turn until ``call`` runs through: the
    landings, and what each left open on ``folder`` (the first found ends the sweep)."""
    k = 0
    while True:
        k += 1
        landed = interrupted_at(k, names, call)
        left = fds_in(folder)
        if left:
            return k, [f"{landed}: {left}"]
        if not landed:
            return k - 1, []


def test_a_compactions_liveness_lock_enter_interrupted_leaves_the_lock_free(
    store: tuple[Path, str, dict[str, Any]],
) -> None:
    path, cid, _ = store
    kept = _kept_interrupt("_exclusive", lambda: compact_store(path))
    assert kept is not None  # it landed
    # Before: 'held' and lock.mdb's descriptor while ``kept`` lived (__enter__@54).
    assert _liveness_lock(path) == "free"
    assert fds_in(path) == []
    _reads(path, cid)
    del kept
    gc.collect()


def test_a_compaction_interrupted_in_its_fsyncs_leaves_no_descriptor(
    store: tuple[Path, str, dict[str, Any]],
) -> None:
    path, cid, _ = store
    landings, left = _sweep({"_fsync_path", "open_into"}, lambda: compact_store(path), path)
    assert left == []  # before: _fsync_path@96, the copy's data.mdb (deleted) kept open
    assert landings >= 6  # three fsyncs
    _reads(path, cid)


def test_a_short_files_page_walk_interrupted_leaves_no_descriptor(
    store: tuple[Path, str, dict[str, Any]],
) -> None:
    path, cid, figures = store
    data = str(path / "data.mdb")

    def walk() -> None:
        top = highest_reachable_page(
            data, figures["psize"], figures["last_pgno"], figures["last_txnid"]
        )
        assert top is not None

    landings, left = _sweep({"highest_reachable_page", "open_into"}, walk, path)
    assert left == []  # before: highest_reachable_page@70, data.mdb kept open
    assert landings >= 3
    _reads(path, cid)


def test_a_proc_read_interrupted_leaves_no_descriptor() -> None:
    me = Path(f"/proc/{os.getpid()}")
    landings, left = _sweep({"_read_proc", "open_into"}, lambda: _read_proc("/proc/self/maps"), me)
    assert left == []  # before: _read_proc@90, /proc/<pid>/maps kept open
    assert landings >= 3
