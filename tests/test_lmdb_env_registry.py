"""One LMDB environment per data file per process, across threads that open and close it.

LMDB's locks on ``lock.mdb`` are POSIX locks: closing any environment of the
file drops every lock this process holds on it, the ones of another
environment of the same file included. So a second environment must never be
opened while the first one is still closing.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from pathlib import Path

import pytest

import cpstore
import cpstore.errors
from cpstore.store import lmdb_copy
from cpstore.store.lmdb_open import creation_lock
from cpstore.store.lmdb_registry import canonical
from cpstore.store.maintenance import compact_store

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads /proc/locks (Linux)"
)


def _lmdb_locks_of_this_process(path: Path) -> list[str]:
    """``/proc/locks`` lines of this process's POSIX locks on the store's ``lock.mdb``."""
    inode = os.stat(path / "lock.mdb").st_ino
    with open("/proc/locks", encoding="ascii") as f:
        return [
            ln
            for ln in f
            if f":{inode} " in ln and ln.split()[1] == "POSIX" and ln.split()[4] == str(os.getpid())
        ]


def test_a_store_opened_while_another_thread_closes_it_keeps_lmdbs_locks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An open racing the last close of the same store gets an environment holding
    LMDB's liveness and reader locks (never one whose locks the close then drops)."""
    path = tmp_path / "s"
    st = cpstore.open(path)
    cid = st.recorder("r").checkpoint(0, {"a": 1})
    env = st.backend.env
    real_close = env.close_quiesced  # the close proper, under the registry lock (audit36)
    opened: list[cpstore.Store] = []
    opener = threading.Thread(target=lambda: opened.append(cpstore.open(path)))

    def close_while_another_thread_opens() -> None:
        opener.start()
        # Unfixed, the open completes here, beside this not yet closed environment;
        # fixed, it waits for this close (the bound only ends the wait).
        opener.join(timeout=2.0)
        real_close()

    monkeypatch.setattr(env, "close_quiesced", close_while_another_thread_opens)
    st.close()
    opener.join()
    (again,) = opened
    try:
        with again.read(cid) as cp:
            assert cp.state() == {"a": 1}
        starts = sorted(int(ln.split()[6]) for ln in _lmdb_locks_of_this_process(path))
        assert 0 in starts  # LMDB's liveness lock: other processes see this one
        assert os.getpid() in starts  # the reader-pid lock: its read slots are not freed
    finally:
        again.close()


def test_compact_refuses_a_store_another_thread_opened_after_its_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An open racing the start of compact is refused (never a store whose acknowledged
    checkpoints the swap would strand); compact completes and nothing is lost."""
    path = tmp_path / "s"
    with cpstore.open(path) as st:
        first = st.recorder("r").checkpoint(0, {"a": 1})
    real_lock = creation_lock
    opened: list[cpstore.Store] = []
    refused: list[cpstore.errors.StoreError] = []

    def open_it() -> None:
        try:
            opened.append(cpstore.open(path))
        except cpstore.errors.StoreError as exc:
            refused.append(exc)

    @contextlib.contextmanager
    def opened_meanwhile(where: str, *, exclusive: bool):  # type: ignore[no-untyped-def]
        if where == str(path):
            opener = threading.Thread(target=open_it)
            opener.start()
            opener.join(timeout=30)  # unfixed, the open completes here; fixed, it is refused
        with real_lock(where, exclusive=exclusive):
            yield

    monkeypatch.setattr(lmdb_copy, "creation_lock", opened_meanwhile)
    compact_store(path)
    assert not opened
    (exc,) = refused
    assert "compacting" in str(exc)
    with cpstore.open(path) as st:
        cid = st.recorder("r2").checkpoint(0, {"b": 2})
    with cpstore.open(path, readonly=True) as again:
        for got, want in ((cid, {"b": 2}), (first, {"a": 1})):
            with again.read(got) as cp:
                assert cp.state() == want


def test_a_store_open_in_this_process_is_not_compacted(tmp_path: Path) -> None:
    """compact refuses while this process holds the store, and opens work again after."""
    path = tmp_path / "s"
    st = cpstore.open(path)
    st.recorder("r").checkpoint(0, {"a": 1})
    with pytest.raises(cpstore.errors.StoreError, match="close the store"):
        compact_store(path)
    st.close()
    compact_store(path)
    with cpstore.open(path) as st:
        assert st.recorder("r").checkpoint(1, {"a": 2})


def test_the_registry_key_is_realpath_for_every_path_shape(tmp_path: Path) -> None:
    """canonical() (the registry key's fast path) equals os.path.realpath on every shape."""
    real = tmp_path / "real"
    (real / "store").mkdir(parents=True)
    (tmp_path / "link").symlink_to(real)  # a link inside the path
    (tmp_path / "chain").symlink_to(tmp_path / "link")  # a link to a link
    (real / "up").symlink_to("..")  # a relative link leading back up
    (real / "loop").symlink_to(real / "loop")
    base = str(tmp_path)
    shapes = [
        f"{base}/real/store",
        f"{base}/link/store",
        f"{base}/chain/store",
        f"{base}/real/up/real/store",
        f"{base}/link/../real/store",
        f"{base}/real/./store",
        f"{base}/real//store",
        f"{base}/real/store/",
        f"/{base}/real/store",
        f"{base}/real/missing/deeper",
        f"{base}/link/missing",
        f"{base}/real/loop/x",
        "/",
        "relative/store",
        ".",
    ]
    for shape in shapes:
        assert canonical(shape) == os.path.realpath(shape), shape


def test_handles_opened_through_a_link_and_the_real_path_share_one_environment(
    tmp_path: Path,
) -> None:
    """A store opened by its real path and through a symlink is one registry entry."""
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with cpstore.open(str(tmp_path / "real" / "s")) as a:
        with cpstore.open(str(tmp_path / "link" / "s")) as b:
            assert b.backend.env is a.backend.env
        with pytest.raises(cpstore.errors.StoreError, match="another mode"):
            cpstore.open(str(tmp_path / "link" / "s"), readonly=True)
