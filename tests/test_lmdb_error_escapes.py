"""LMDB failures in map growth and in the closing fsync reach callers as cpstore errors.

Every error cpstore raises is a ``CpstoreError``: a caller catching the root must not
get a raw ``lmdb.Error``. Two paths let one through (audit12): the map's resize
(``mdb_env_set_mapsize`` failing after a commit found the map full) and the fsync a
``durability="none"`` store makes when its last handle closes. The real LMDB
environment runs underneath; only the one call is made to fail.
"""

from __future__ import annotations

from pathlib import Path

import lmdb
import pytest
from test_group_commit_errors import FailingEnv, fail_commits

from cpstore.errors import CpstoreError, OutcomeUnknownError, StoreError, StoreFatalError
from cpstore.store.facade import open as open_store
from cpstore.store.lmdb_errors import translate


def test_a_resize_lmdb_refuses_after_a_full_map_is_a_store_error_saying_not_stored(
    tmp_path: Path,
) -> None:
    """A commit that found the map full wrote nothing; when LMDB then refuses the
    resize, the caller gets a StoreError (not a raw lmdb.Error, not "may or may not be
    stored"), and nothing of the txn is stored."""
    with open_store(tmp_path / "s") as st:
        st.recorder("run").checkpoint(0, {"v": 0})
        env = st.backend.env
        real = env.env
        fail_commits(st, lands=False, error=lambda: lmdb.MapFullError("mdb_txn_commit"))
        env.env = FailingEnv(
            real, "set_mapsize", lambda: lmdb.InvalidParameterError("mdb_env_set_mapsize")
        )
        try:
            with pytest.raises(CpstoreError) as info:
                st.append_audit("note", {"n": 1})
        finally:
            env.env = real
        assert isinstance(info.value, StoreError), repr(info.value)
        assert not isinstance(info.value, OutcomeUnknownError), repr(info.value)
        assert "set_mapsize" in str(info.value)
        assert [r for r in st.audit_records() if r.kind == "note"] == []
        st.append_audit("note", {"n": 2})
        assert [r.body for r in st.audit_records() if r.kind == "note"] == [{"n": 2}]


def test_a_failed_fsync_when_a_none_store_closes_is_a_store_error_and_still_closes(
    tmp_path: Path,
) -> None:
    """durability="none": the last handle's close fsyncs; when LMDB fails that fsync
    (its environment in the fatal state after a failed write) the caller gets a
    StoreError, not a raw lmdb.Error, and the environment is closed all the same."""
    st = open_store(tmp_path / "s", durability="none")
    st.recorder("run").checkpoint(0, {"v": 0})
    env = st.backend.env
    real = env.env
    env.env = FailingEnv(real, "sync", lambda: lmdb.PanicError("mdb_env_sync"))
    with pytest.raises(CpstoreError) as info:
        st.close()
    assert isinstance(info.value, StoreError), repr(info.value)
    with pytest.raises(lmdb.Error):
        real.info()  # closed: py-lmdb refuses a closed environment
    with open_store(tmp_path / "s") as again:
        assert again.verify().ok


def test_a_panic_lmdb_reports_is_a_store_fatal_error_saying_to_reopen(tmp_path: Path) -> None:
    """lmdb.PanicError translates to StoreFatalError (a StoreError, not an IntegrityError),
    whatever its text; other LMDB errors do not."""
    got = translate(lmdb.PanicError("mdb_txn_begin: something new"), str(tmp_path))
    assert isinstance(got, StoreFatalError) and isinstance(got, StoreError), repr(got)
    assert "open the store again" in got.what
    other = translate(lmdb.Error("mdb_txn_begin: MDB_PANIC mentioned"), str(tmp_path))
    assert not isinstance(other, StoreFatalError), repr(other)
