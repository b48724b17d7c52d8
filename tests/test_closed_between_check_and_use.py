"""Calls into LMDB outside a txn of the store's bookkeeping: a close of another thread
frees the environment under them unless they count as a read (EnvTxns.held_open), and
once closed they must raise StoreClosedError, never LMDB's own error (audit50's
findings: ``disk_bytes`` after the close's check, the ``reader_check`` a read makes when
LMDB's reader table is full)."""

from __future__ import annotations

from collections.abc import Container
from pathlib import Path
from threading import get_ident
from typing import Any

import lmdb
import pytest

import cpstore
from cpstore.errors import StoreClosedError
from cpstore.store.lmdb_backend import LmdbBackend


def test_disk_bytes_of_a_store_closed_after_its_check_is_store_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The close lands between ``disk_bytes``' liveness check and its look at the
    environment (here: the check passes, the store closed just before)."""
    st = cpstore.open(str(tmp_path / "s"))
    st.recorder("r").checkpoint(0, {"a": 1})
    assert st.disk_bytes() > 0
    st.close()
    monkeypatch.setattr(LmdbBackend, "live", lambda self: None)
    with pytest.raises(StoreClosedError):  # before: lmdb.Error, "closed/deleted/dropped"
        st.disk_bytes()


class _FullReaders:
    """The store's LMDB environment whose first two read begins find the reader table
    full; what its ``reader_check`` sees of the calling thread's bookkeeping."""

    def __init__(self, real: Any, active: Container[int]) -> None:
        self.real, self.active, self.full = real, active, 2
        self.counted: list[bool] = []

    def begin(
        self, db: Any = None, parent: Any = None, write: bool = False, buffers: bool = False
    ) -> Any:
        # py-lmdb's signature: the store passes these positionally
        if not write and self.full:
            self.full -= 1
            raise lmdb.ReadersFullError("mdb_txn_begin: MDB_READERS_FULL (test)")
        return self.real.begin(db, parent, write, buffers)

    def reader_check(self) -> int:
        self.counted.append(get_ident() in self.active)
        return int(self.real.reader_check())

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def test_the_reader_check_after_a_full_reader_table_counts_as_a_read(tmp_path: Path) -> None:
    """Counted, a close of another thread waits for it instead of closing the environment
    under LMDB's scan of the reader table; the read then goes on."""
    st = cpstore.open(str(tmp_path / "s"))
    cid = st.recorder("r").checkpoint(0, {"a": 1})
    backend = st._backend
    assert isinstance(backend, LmdbBackend)
    env = backend.env
    full = _FullReaders(env.env, env._active)
    env.env = full
    try:
        with st.read(cid) as view:
            assert view.state() == {"a": 1}
    finally:
        env.env = full.real
    assert full.counted == [True]  # before: [False], the close free to run under it
    assert not env._active
    st.close()
