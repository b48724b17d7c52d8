"""One LMDB environment per data file per process, whatever path names the file.

The registry's key is the folder's real path, but a real path does not name a
file uniquely: a bind mount (or a folder renamed while open) gives the same
``data.mdb`` a second real path. A second environment of the same file in one
process is what LMDB forbids: closing it drops every POSIX lock the process holds
on ``lock.mdb``, the first environment's liveness lock included, and then a
compaction (here or in another process) swaps the data file under it and its
later acknowledged checkpoints land in the unlinked file (audit10).
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import cpstore
import cpstore.errors
from cpstore.store.lmdb_registry import is_open_here
from cpstore.store.maintenance import compact_store

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux paths")


def _compact_elsewhere(path: str) -> str:
    """In another process: compact ``path``; what happened, as a word."""
    try:
        compact_store(path)
    except cpstore.errors.StoreError as exc:
        return f"refused: {exc}"
    return "compacted"


def _compact_in_another_process(path: Path) -> str:
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return str(pool.apply(_compact_elsewhere, (str(path),)))


def _assert_both_stored(path: Path, one: str, two: str) -> None:
    """Both acknowledged checkpoints read back from ``path`` with their states."""
    with cpstore.open(path, readonly=True) as again:
        for cid, want in ((one, {"a": 1}), (two, {"a": 2})):
            with again.read(cid) as cp:
                assert cp.state() == want


@pytest.fixture
def bind_alias(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(real folder, the same folder bind-mounted elsewhere); skipped where mount fails."""
    real, alias = tmp_path / "real", tmp_path / "alias"
    real.mkdir()
    alias.mkdir()
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("needs root and mount")
    done = subprocess.run(
        ["mount", "--bind", str(real), str(alias)], capture_output=True, check=False
    )
    if done.returncode != 0:
        pytest.skip(f"mount --bind refused: {done.stderr!r}")
    try:
        yield real, alias
    finally:
        subprocess.run(["umount", str(alias)], capture_output=True, check=False)


def test_a_folder_renamed_while_open_is_one_environment_under_its_new_name(
    tmp_path: Path,
) -> None:
    """A store opened, then its folder renamed, opened again by the new name: the same
    environment (never a second one of the same data file)."""
    first = tmp_path / "a"
    with cpstore.open(first) as st:
        st.recorder("r").checkpoint(0, {"a": 1})
        second = tmp_path / "b"
        os.rename(first, second)
        with cpstore.open(second) as again:
            assert again.backend.env is st.backend.env
        assert is_open_here(str(second))


def test_compact_refuses_a_store_this_process_holds_under_another_name(tmp_path: Path) -> None:
    """compact of a renamed folder this process holds open is refused, and every
    checkpoint written through the open handle afterwards is still there."""
    first, second = tmp_path / "a", tmp_path / "b"
    st = cpstore.open(first)
    one = st.recorder("r").checkpoint(0, {"a": 1})
    os.rename(first, second)
    with pytest.raises(cpstore.errors.StoreError, match="close the store"):
        compact_store(second)
    two = st.recorder("r").checkpoint(1, {"a": 2})
    st.close()
    _assert_both_stored(second, one, two)


def test_closing_a_second_name_keeps_the_first_handles_locks_against_another_process(
    tmp_path: Path,
) -> None:
    """A handle opened and closed under a second name of the same folder leaves the
    first handle's LMDB locks in place: another process's compact is refused, and a
    checkpoint acknowledged afterwards is in the store."""
    first, second = tmp_path / "a", tmp_path / "b"
    st = cpstore.open(first)
    one = st.recorder("r").checkpoint(0, {"a": 1})
    os.rename(first, second)
    cpstore.open(second).close()
    assert _compact_in_another_process(second).startswith("refused")
    two = st.recorder("r").checkpoint(1, {"a": 2})
    st.close()
    _assert_both_stored(second, one, two)


def test_a_bind_mounted_alias_shares_the_environment_and_blocks_compaction(
    bind_alias: tuple[Path, Path],
) -> None:
    """The same store through a bind mount: one environment; after the alias handle
    closes, another process's compact is still refused and nothing is lost."""
    real, alias = bind_alias
    st = cpstore.open(real / "s")
    one = st.recorder("r").checkpoint(0, {"a": 1})
    with cpstore.open(alias / "s") as other:
        assert other.backend.env is st.backend.env
    with pytest.raises(cpstore.errors.StoreError, match="close the store"):
        compact_store(alias / "s")
    assert _compact_in_another_process(alias / "s").startswith("refused")
    two = st.recorder("r").checkpoint(1, {"a": 2})
    st.close()
    _assert_both_stored(alias / "s", one, two)


def test_a_new_store_is_never_given_the_environment_of_a_deleted_open_one(
    tmp_path: Path,
) -> None:
    """A store deleted while open (its folder's inode free for reuse) and new stores made
    next to it: each new one is its own empty store, never the open environment."""
    gone = tmp_path / "gone"
    st = cpstore.open(gone)
    st.recorder("r").checkpoint(0, {"a": 1})
    shutil.rmtree(gone)
    try:
        for i in range(4):
            with cpstore.open(tmp_path / f"new{i}") as fresh:
                assert fresh.backend.env is not st.backend.env
                assert fresh.runs() == []
    finally:
        st.close()


def test_threads_opening_through_a_link_swapped_meanwhile_never_get_two_environments(
    tmp_path: Path,
) -> None:
    """Threads open and close a store through a symlink another thread keeps retargeting
    between two stores, and through both real paths: every handle reads its own store's
    checkpoint, and no data file is ever held by two environments at once."""

    ids: dict[str, str] = {}
    for name in ("one", "two"):
        with cpstore.open(tmp_path / name) as st:
            ids[name] = st.recorder(name).checkpoint(0, {"store": name})
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "one")
    stop = threading.Event()
    problems: list[str] = []
    live: dict[int, cpstore.Store] = {}
    lock = threading.Lock()

    def swap() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            tmp = tmp_path / f"link.{n}"
            tmp.symlink_to(tmp_path / ("one" if n % 2 else "two"))
            os.replace(tmp, link)  # atomic retarget

    def opener(paths: list[Path]) -> None:
        for i in range(60):
            st = cpstore.open(paths[i % len(paths)])
            with lock:
                live[id(st)] = st
                by_file: dict[tuple[int, int], int] = {}
                for h in live.values():
                    env = h.backend.env
                    got = os.stat(os.path.join(env.path, "data.mdb"))
                    if by_file.setdefault((got.st_dev, got.st_ino), id(env)) != id(env):
                        problems.append(f"two environments of {env.path}")
            runs = st.runs()
            with st.read(ids[runs[0]]) as cp:
                if cp.state() != {"store": runs[0]}:
                    problems.append(f"{runs} read {cp.state()!r}")
            with lock:
                del live[id(st)]
            st.close()

    swapper = threading.Thread(target=swap)
    swapper.start()
    workers = [
        threading.Thread(target=opener, args=([link],)),
        threading.Thread(target=opener, args=([link, tmp_path / "one"],)),
        threading.Thread(target=opener, args=([tmp_path / "two", link],)),
    ]
    try:
        for w in workers:
            w.start()
        for w in workers:
            w.join(timeout=300)
    finally:
        stop.set()
        swapper.join(timeout=30)
    assert not any(w.is_alive() for w in workers)
    assert problems == []
