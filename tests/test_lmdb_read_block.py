"""``EnvTxns.read()`` (every LMDB ``read_txn``): the txn is ended however the block ends,
an LMDB error raised in it is translated, any other exception passes unchanged, and the
thread's read bookkeeping (``holds_read``) follows the block, nested blocks included."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import lmdb
import pytest

from cpstore.errors import CpstoreError, StoreError, StoreFullError
from cpstore.store import Store
from cpstore.store.facade import open as open_store


@pytest.fixture
def lmdb_store(tmp_path: Path) -> Iterator[Store]:
    store = open_store(tmp_path / "s")
    yield store
    store.close()


def test_a_read_block_ends_its_txn_and_its_bookkeeping(lmdb_store: Store) -> None:
    env = lmdb_store.backend.env
    assert not env.holds_read()
    with lmdb_store.backend.read_txn() as txn:
        assert env.holds_read()
        with lmdb_store.backend.read_txn() as inner:
            assert inner is not txn
        assert env.holds_read()  # the outer block's read is still open
        assert txn.get(b"nothing", db=env.dbs["meta"]) is None
    assert not env.holds_read()
    with pytest.raises(lmdb.Error):
        txn.get(b"nothing", db=env.dbs["meta"])  # ended: LMDB refuses it


def test_an_lmdb_error_in_the_block_is_translated_and_the_txn_ended(lmdb_store: Store) -> None:
    env = lmdb_store.backend.env
    with pytest.raises(StoreFullError) as caught, lmdb_store.backend.read_txn():
        raise lmdb.MapFullError("mdb_put: MDB_MAP_FULL: Environment mapsize limit reached")
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    assert not env.holds_read()
    with pytest.raises(CpstoreError), lmdb_store.backend.read_txn():
        raise lmdb.CorruptedError("mdb_get: MDB_CORRUPTED")
    assert not env.holds_read()


def test_another_exception_passes_unchanged_and_the_txn_is_ended(lmdb_store: Store) -> None:
    env = lmdb_store.backend.env
    err = KeyError("mine")
    with pytest.raises(KeyError) as caught, lmdb_store.backend.read_txn():
        raise err
    assert caught.value is err
    assert not env.holds_read()
    with pytest.raises(KeyboardInterrupt), lmdb_store.backend.read_txn():
        raise KeyboardInterrupt
    assert not env.holds_read()


def test_one_read_block_object_is_entered_once(lmdb_store: Store) -> None:
    block = lmdb_store.backend.read_txn()
    with block, pytest.raises(StoreError, match="entered once"):
        block.__enter__()
    assert not lmdb_store.backend.env.holds_read()
