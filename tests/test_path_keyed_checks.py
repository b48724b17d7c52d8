"""Checks that must act on the store an environment opened, not on whatever a path names now.

A store folder can be renamed at any time (by another process, or this one): the layout
upgrade's check for older holders, ``space()`` and the registry's key for an open store
each looked by path, so after a rename they could act on another store. Each now works
through what the open holds (its folder's descriptor, its data file's descriptor, the
data file's identity).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from test_older_holders import _BARE, _format_version, _holding, _set_format_version

import cpstore
from cpstore.errors import StoreError
from cpstore.store import lmdb_env, lmdb_holders
from cpstore.store.facade import open as open_store
from cpstore.store.model import STORE_VERSION


def _store(path: Path, run: str, size: int = 0) -> str:
    """A store at ``path`` with one checkpoint on ``run`` (a ``size``-byte payload)."""
    with open_store(path) as st:
        return st.recorder(run).checkpoint(0, {"v": run, "pad": os.urandom(size).hex()})


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="holder marks (Linux)")
def test_an_upgrade_checks_the_holders_of_the_folder_it_opened_not_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """b (an older layout) is held by an older release; opening b writable meets "mv b t;
    mv c b" before its holder check: the check looks at the folder LMDB opened (now t) and
    refuses, and t keeps its older layout (upgrading it would harm the holder)."""
    b, c, t = tmp_path / "b", tmp_path / "c", tmp_path / "t"
    _store(b, "b")
    _store(c, "c")
    _set_format_version(b, STORE_VERSION - 1)
    real = lmdb_holders.refuse_beside_older_holders

    def racing(*args: Any, **kwargs: Any) -> None:
        monkeypatch.setattr(lmdb_env, "refuse_beside_older_holders", real)
        os.rename(b, t)
        os.rename(c, b)  # after LMDB opened b's folder, before its holders are looked at
        real(*args, **kwargs)

    with _holding(_BARE, str(b)) as pid:
        monkeypatch.setattr(lmdb_env, "refuse_beside_older_holders", racing)
        with pytest.raises(StoreError) as err:
            cpstore.open(b)
        assert err.value.got == f"pid {pid}"
        assert _format_version(t) == STORE_VERSION - 1


def test_space_reports_the_data_file_the_store_opened_after_a_rename(tmp_path: Path) -> None:
    """a (large) is open; "mv a t; mv b a" (b small): a's handle reports t's file size,
    the file it reads and writes, not the one now at its path."""
    a, b, t = tmp_path / "a", tmp_path / "b", tmp_path / "t"
    _store(a, "a", size=3 << 20)
    _store(b, "b")
    with open_store(a) as st:
        os.rename(a, t)
        os.rename(b, a)
        got = st.space().file_bytes
        assert got == os.path.getsize(t / "data.mdb"), got
        assert got != os.path.getsize(a / "data.mdb"), got


def test_an_open_of_a_path_whose_open_store_was_renamed_away_opens_the_store_there(
    tmp_path: Path,
) -> None:
    """a is open here; "mv a t; mv c a": a new open of a is of the store now at a (c's),
    not the environment of t that the registry had under a's name; and the open of t
    still shares that environment (its file is opened once)."""
    a, c, t = tmp_path / "a", tmp_path / "c", tmp_path / "t"
    _store(a, "A")
    _store(c, "C")
    with open_store(a) as first:
        os.rename(a, t)
        os.rename(c, a)
        with open_store(a) as second:
            assert second.runs() == ["C"]
            assert second.backend.env is not first.backend.env
            second.recorder("C").checkpoint(1, {"v": 1})
        with open_store(t) as third:
            assert third.backend.env is first.backend.env
            assert third.runs() == ["A"]
    with open_store(a, readonly=True) as st:
        assert len(st.history("C")) == 2 and st.verify().ok
    with open_store(t, readonly=True) as st:
        assert st.runs() == ["A"] and st.verify().ok
