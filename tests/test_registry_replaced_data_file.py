"""An open of a path whose store this process has open, after that store's data file left
the path (audit16).

The registry shares one environment per data file. A key whose folder is still the one
the environment opened but whose ``data.mdb`` is another file now (replaced or removed in
place), or whose folder the open cannot tell apart (no holder mark: no OFD locks), was
handed the old environment: LMDB on a file no longer at the path, so a new handle read
another store and the checkpoints it acknowledged were written to an unlinked file and
lost at its close. A second environment there would share the first's lock file, so the
open is refused instead.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from cpstore.errors import StoreError
from cpstore.store import lmdb_holders
from cpstore.store.facade import open as open_store
from cpstore.store.maintenance import compact_store


def _store(path: Path, run: str) -> str:
    """A store at ``path`` with one checkpoint on ``run``."""
    with open_store(path) as st:
        return st.recorder(run).checkpoint(0, {"v": run})


@pytest.mark.parametrize("how", ["replaced", "removed"])
def test_an_open_of_a_path_whose_data_file_left_while_open_here_is_refused(
    tmp_path: Path, how: str
) -> None:
    """a is open here; its data.mdb is replaced by c's (or removed): a new open of a is
    refused (it was handed the old environment: a checkpoint it acknowledged was gone
    once the handles closed); the first handle goes on, and after every close a opens."""
    a, c = tmp_path / "a", tmp_path / "c"
    _store(a, "A")
    _store(c, "C")
    with open_store(a) as first:
        if how == "replaced":
            os.replace(c / "data.mdb", a / "data.mdb")
        else:
            os.rename(a / "data.mdb", tmp_path / "kept.mdb")
        with pytest.raises(StoreError) as err:
            second = open_store(a)
            second.recorder("A").checkpoint(1, {"v": 1})  # acknowledged, then lost
            second.close()
        assert "no longer at this path" in err.value.what
        assert first.runs() == ["A"]
        with pytest.raises(StoreError):
            open_store(a, readonly=True)
    if how == "replaced":
        with open_store(a) as st:
            assert st.runs() == ["C"] and st.verify().ok


def test_an_open_of_a_renamed_away_path_without_holder_marks_never_gets_the_old_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without OFD locks (no holder mark: the registry cannot tell folders apart), a is
    open here and "mv a t; mv c a": an open of a is refused, never handed t's environment
    (it read store A at c's path); t still shares it."""
    monkeypatch.setattr(lmdb_holders, "_F_OFD_SETLK", None)
    a, c, t = tmp_path / "a", tmp_path / "c", tmp_path / "t"
    _store(a, "A")
    _store(c, "C")
    with open_store(a) as first:
        os.rename(a, t)
        os.rename(c, a)
        with pytest.raises(StoreError) as err, open_store(a) as second:
            assert second.runs() == ["C"]  # not reached on 1e4eadb: it was ["A"]
        assert "no longer at this path" in err.value.what
        with open_store(t) as third:
            assert third.backend.env is first.backend.env
    with open_store(a, readonly=True) as st:
        assert st.runs() == ["C"]


@pytest.mark.parametrize("how", ["replaced", "removed"])
def test_an_open_of_a_renamed_open_folder_whose_data_file_left_is_refused(
    tmp_path: Path, how: str
) -> None:
    """a is open here, renamed to t, and t's data.mdb replaced by c's (or removed, then a
    new store made there): an open of t is refused. On 25e8a39 it opened a second
    environment in the first's folder, on its lock file: the first's commits (to its
    unlinked file) set the shared txn id and the new handle no longer saw its own
    acknowledged checkpoint."""
    a, c, t = tmp_path / "a", tmp_path / "c", tmp_path / "t"
    _store(a, "A")
    _store(c, "C")
    with open_store(a) as first:
        os.rename(a, t)
        if how == "replaced":
            os.replace(c / "data.mdb", t / "data.mdb")
        else:
            os.rename(t / "data.mdb", tmp_path / "kept.mdb")
        with pytest.raises(StoreError) as err:
            second = open_store(t)
            try:
                second.recorder("N").checkpoint(0, {"v": "new"})
                first.recorder("A").checkpoint(1, {"v": 1})  # to the unlinked file
                assert "N" in second.runs()  # failed on 25e8a39: ["C"] (or [])
            finally:
                second.close()
        assert "no longer at this path" in err.value.what
        with pytest.raises(StoreError):
            open_store(t, readonly=True)
        assert first.runs() == ["A"]
    if how == "replaced":
        with open_store(t) as st:
            assert st.runs() == ["C"] and st.verify().ok


def test_compact_here_refuses_a_renamed_open_folder_whose_data_file_was_replaced(
    tmp_path: Path,
) -> None:
    """a is open here, renamed to t, and t's data.mdb replaced by c's: compact of t in this
    process is refused. On 25e8a39 it ran: its lock on t/lock.mdb does not conflict with
    this process's own, and its close and its first open drop and reset the first
    environment's LMDB locks and lock table."""
    a, c, t = tmp_path / "a", tmp_path / "c", tmp_path / "t"
    _store(a, "A")
    _store(c, "C")
    with open_store(a) as first:
        os.rename(a, t)
        os.replace(c / "data.mdb", t / "data.mdb")
        with pytest.raises(StoreError) as err:
            compact_store(t)
        assert "close the store" in err.value.what
        assert first.runs() == ["A"]
    compact_store(t)
    with open_store(t, readonly=True) as st:
        assert st.runs() == ["C"]


def _without_proc_fd(monkeypatch: pytest.MonkeyPatch) -> None:
    """Simulate a system without /proc/self/fd: every look there finds nothing."""
    real_stat, real_isdir, real_exists = os.stat, os.path.isdir, os.path.exists

    def hidden(path: object) -> bool:
        return isinstance(path, str) and path.startswith("/proc/self/fd")

    def stat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if hidden(path):
            raise FileNotFoundError(path)
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat)
    monkeypatch.setattr(os.path, "isdir", lambda path: not hidden(path) and real_isdir(path))
    monkeypatch.setattr(os.path, "exists", lambda path: not hidden(path) and real_exists(path))


def test_without_proc_an_open_of_a_path_whose_open_store_was_renamed_away_opens_the_store_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without /proc (simulated), a is open here and "mv a t; mv c a": an open of a opens
    store C (refused on 25e8a39: the registry told a's folder from t's through
    /proc/self/fd only, and so compared a with itself); t still shares the first's."""
    _without_proc_fd(monkeypatch)
    a, c, t = tmp_path / "a", tmp_path / "c", tmp_path / "t"
    _store(a, "A")
    _store(c, "C")
    with open_store(a) as first:
        os.rename(a, t)
        os.rename(c, a)
        with open_store(a) as second:
            assert second.runs() == ["C"]
            assert second.backend.env is not first.backend.env
        with open_store(t) as third:
            assert third.backend.env is first.backend.env
        os.replace(tmp_path / "a" / "data.mdb", t / "data.mdb")
        with pytest.raises(StoreError) as err:
            open_store(t)
        assert "no longer at this path" in err.value.what
