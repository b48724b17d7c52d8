"""An open that finds its folder's creation lock busy keeps the lock its wait wins
(audit16), and the folder descriptor of that lock is closed on every exit path.

Since trust5 an open finding the lock busy lets the registry lock go and waits for the
creation lock at the path. That wait used to end by letting the lock go again and
needing another free moment for a non-blocking try (two for a layout upgrade): under
a churn of short read-only opens (each holds the lock shared) a writable upgrade took
~20 times as long. The lock the wait won is now used for the open (and its upgrade)
when the path still names the folder it locked; nothing waits for a creation lock
while holding the registry lock (tests/test_registry_rename_race.py's deadlock tests).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import select
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import lmdb
import pytest
from test_older_holders import _set_format_version

import cpstore
from cpstore.native.canonical import decode_value
from cpstore.store import lmdb_open, lmdb_registry
from cpstore.store.model import STORE_VERSION

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc, flock")

#: Holds the folder's creation lock shared (as a read-only open does) until told to go.
_HOLDER = """
import fcntl, os, select, sys
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
fcntl.flock(fd, fcntl.LOCK_SH)
print("held", flush=True)
select.select([sys.stdin], [], [], 60)
"""


@contextmanager
def _lock_held_elsewhere(folder: Path) -> Iterator[IO[str]]:
    """Another process holds ``folder``'s creation lock shared until a line is written
    to the yielded pipe (or 60 s pass)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(folder)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready and proc.stdout.readline() == "held\n"
        yield proc.stdin
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=60)


def _format_version(path: Path) -> int:
    env = lmdb.open(str(path), max_dbs=16, readonly=True)
    try:
        with env.begin() as txn:
            raw = txn.get(b"format", db=env.open_db(b"meta", txn=txn, create=False))
            return int(decode_value(raw)["version"])
    finally:
        env.close()


@pytest.mark.parametrize("upgrade", [False, True], ids=["same-layout", "layout-upgrade"])
def test_a_writable_open_uses_the_creation_lock_its_wait_won(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, upgrade: bool
) -> None:
    """Found busy, a writable open waits for the folder's lock once and opens (and upgrades)
    under the lock that wait won: no further try at the lock, which churn could refuse."""
    path = tmp_path / "s"
    with cpstore.open(path) as st:
        st.recorder("r").checkpoint(0, {"a": 1})
    if upgrade:
        _set_format_version(path, STORE_VERSION - 1)
    folder = os.stat(path).st_ino
    tries: list[str] = []
    real = fcntl.flock
    with _lock_held_elsewhere(path) as release:

        def counting(fd: int, op: int) -> None:
            if os.fstat(fd).st_ino != folder:
                return real(fd, op)
            if op & fcntl.LOCK_NB:
                try:
                    real(fd, op)
                except OSError as exc:
                    tries.append("busy" if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK) else "?")
                    raise
                tries.append("won at once")
                return None
            release.write("go\n")  # the holder lets go: this wait ends (bounded by its 60 s)
            release.flush()
            real(fd, op)
            tries.append("won by waiting")
            return None

        monkeypatch.setattr(fcntl, "flock", counting)
        with cpstore.open(path) as st:
            assert st.recorder("r").checkpoint(1, {"a": 2})
        monkeypatch.setattr(fcntl, "flock", real)
    assert tries == ["busy", "won by waiting"]
    assert _format_version(path) == STORE_VERSION


def _descriptors() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_an_interrupt_during_the_creation_lock_wait_leaks_no_descriptor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A KeyboardInterrupt raised by the blocking flock (lock_folder's, and the registry's wait
    after a busy try) propagates and leaves no folder descriptor open or fork-closed."""
    path = tmp_path / "s"
    with cpstore.open(path) as st:
        st.recorder("r").checkpoint(0, {"a": 1})
    real = fcntl.flock

    def interrupted_wait(fd: int, op: int) -> None:
        if op & fcntl.LOCK_NB:  # the open's own try: busy
            raise OSError(errno.EWOULDBLOCK, "busy")
        raise KeyboardInterrupt

    before, fork_closed = _descriptors(), set(lmdb_open.FORK_CLOSED_FDS)
    monkeypatch.setattr(fcntl, "flock", interrupted_wait)
    with pytest.raises(KeyboardInterrupt):
        lmdb_open.lock_folder(str(path), exclusive=True)
    assert _descriptors() == before
    with pytest.raises(KeyboardInterrupt):
        cpstore.open(path)  # busy at once, then interrupted in acquire_env's wait
    assert _descriptors() == before
    assert set(lmdb_open.FORK_CLOSED_FDS) == fork_closed
    monkeypatch.setattr(fcntl, "flock", real)
    with cpstore.open(path) as st:  # the store opens as before
        assert st.recorder("r").checkpoint(1, {"a": 2})


def test_a_won_lock_on_a_folder_renamed_away_is_not_used_for_the_store_now_at_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the path names another folder after the wait (a rename), the open tries that
    folder's own lock and opens the store there, not under the lock on the old folder."""
    path, other, away = tmp_path / "s", tmp_path / "other", tmp_path / "away"
    with cpstore.open(path) as st:
        st.recorder("first").checkpoint(0, {"a": 1})
    with cpstore.open(other) as st:
        st.recorder("second").checkpoint(0, {"b": 1})
    folders = {os.stat(path).st_ino: "s", os.stat(other).st_ino: "other"}
    tries: list[str] = []
    real = fcntl.flock
    with _lock_held_elsewhere(path) as release:

        def renaming(fd: int, op: int) -> None:
            name = folders.get(os.fstat(fd).st_ino)
            if name is None:
                return real(fd, op)
            if op & fcntl.LOCK_NB:
                try:
                    real(fd, op)
                except OSError:
                    tries.append(f"{name} busy")
                    raise
                tries.append(f"{name} won at once")
                return None
            release.write("go\n")
            release.flush()
            real(fd, op)
            tries.append(f"{name} won by waiting")
            os.rename(path, away)  # the path names another folder once the wait is over
            os.rename(other, path)
            return None

        monkeypatch.setattr(fcntl, "flock", renaming)
        with cpstore.open(path) as st:
            assert st.runs() == ["second"]
        monkeypatch.setattr(fcntl, "flock", real)
    assert tries == ["s busy", "s won by waiting", "other won at once"]


def test_an_interrupt_right_after_the_registry_lets_a_won_lock_go_closes_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A KeyboardInterrupt landing just after acquire_env closed the lock its wait won (busy
    again: it waits anew), when another thread already reuses that descriptor number:
    acquire_env's exit closes nothing more. On 34c0d0f its finally closed the number
    again: the other thread's file (e.g. LMDB's lock.mdb, whose close drops this process's
    locks) was closed under it (audit18)."""
    path = tmp_path / "s"
    with cpstore.open(path) as st:
        st.recorder("r").checkpoint(0, {"a": 1})
    real_release = lmdb_open.release_folders  # the registry's own (review85: was unlock_folder)
    reused: list[int] = []

    def busy(key: str, options: object, won: int | None = None) -> object:
        raise lmdb_open.FolderBusyError(key)

    def release_then_interrupted(held: list[int | None]) -> None:
        had = any(fd is not None for fd in held)
        real_release(held)
        if had and not reused:
            reused.append(os.open(tmp_path / "other", os.O_RDWR | os.O_CREAT, 0o644))
            raise KeyboardInterrupt

    monkeypatch.setattr(lmdb_registry, "_acquire", busy)
    monkeypatch.setattr(lmdb_registry, "release_folders", release_then_interrupted)
    try:
        with pytest.raises(KeyboardInterrupt):
            cpstore.open(path)
        assert reused
        os.fstat(reused[0])  # still open: EBADF on 34c0d0f
    finally:
        if reused:
            with contextlib.suppress(OSError):
                os.close(reused[0])
