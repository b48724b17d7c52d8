"""A copy_store that fails or is interrupted while LMDB writes the copy leaves no partial
data file behind (and not the folder it made), so the retry into the same destination
works; before (audit50's finding) the partial data.mdb stayed and the retry was refused
"the copy's destination must be a new or empty folder". A folder the caller made, or
something else in it, is left as it was."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lmdb
import pytest

import cpstore
from cpstore.errors import StoreError
from cpstore.store import copy_store
from cpstore.store.lmdb_backend import LmdbBackend


class _FailingCopy:
    """The store's LMDB environment whose first copy writes the file, then fails."""

    def __init__(self, real: Any, failure: BaseException) -> None:
        self.real = real
        self.failure: BaseException | None = failure

    def copy(self, dest: str, compact: bool = False) -> None:
        failure, self.failure = self.failure, None
        self.real.copy(dest, compact=compact)
        if failure is not None:
            raise failure

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


@pytest.mark.parametrize(
    "failure",
    [lmdb.DiskError("mdb_env_copy2: No space left on device (test)"), KeyboardInterrupt()],
    ids=["enospc", "interrupt"],
)
@pytest.mark.parametrize("made", [False, True], ids=["new", "empty"])
def test_a_failed_copy_leaves_nothing_and_the_retry_copies(
    tmp_path: Path, failure: BaseException, made: bool
) -> None:
    st = cpstore.open(str(tmp_path / "s"))
    cid = st.recorder("r").checkpoint(0, {"a": 1})
    backend = st._backend
    assert isinstance(backend, LmdbBackend)
    dest = tmp_path / "copy"
    if made:
        dest.mkdir()
    backend.env.env = _FailingCopy(backend.env.env, failure)
    try:
        with pytest.raises(type(failure) if isinstance(failure, KeyboardInterrupt) else StoreError):
            copy_store(st, dest)
        assert dest.is_dir() is made  # the caller's empty folder stays, ours is gone
        if made:
            assert list(dest.iterdir()) == []  # before: the partial data.mdb
        assert copy_store(st, dest).ok  # before: refused, not a new or empty folder
    finally:
        backend.env.env = backend.env.env.real
        st.close()
    with cpstore.open(str(dest), readonly=True, create=False) as copy:
        assert copy.ref("r") == cid


def test_a_failed_copy_keeps_what_else_is_in_the_folder(tmp_path: Path) -> None:
    """A file put into the destination while the copy ran stays (only the copy's own data
    file is removed, and the folder only when empty)."""
    st = cpstore.open(str(tmp_path / "s"))
    st.recorder("r").checkpoint(0, {"a": 1})
    backend = st._backend
    assert isinstance(backend, LmdbBackend)
    dest = tmp_path / "copy"

    class _Beside(_FailingCopy):
        def copy(self, dest: str, compact: bool = False) -> None:
            Path(dest, "notes.txt").write_text("mine")
            super().copy(dest, compact)

    backend.env.env = _Beside(backend.env.env, lmdb.DiskError("EIO (test)"))
    try:
        with pytest.raises(StoreError):
            copy_store(st, dest)
    finally:
        backend.env.env = backend.env.env.real
        st.close()
    assert sorted(p.name for p in dest.iterdir()) == ["notes.txt"]
