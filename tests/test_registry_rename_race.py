"""A store folder renamed between the registry's identity check and LMDB's open.

The registry keeps one LMDB environment per data file per process (lmdb_registry):
LMDB's close of an environment clears every reader slot of its process in the
file's reader table and drops the process's locks on it, so a second environment
of one file, once closed, leaves the first one's open reads unprotected (a writer
may reuse the pages they read). The identity is checked by stat before the open;
a rename in between (the open store's folder moved to the path being opened)
must not leave two environments of one file.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cpstore.errors import StoreError
from cpstore.store import lmdb_copy, lmdb_env, lmdb_identity, lmdb_open, lmdb_registry
from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store
from cpstore.store.lmdb_env import Env
from cpstore.store.maintenance import compact_store

READERS = "import lmdb, sys; print(lmdb.open(sys.argv[1], readonly=True).readers())"


def _open_a_and_create_b(tmp_path: Path) -> Store:
    """Store a (returned open, one checkpoint written) and store b (created, closed)."""
    first = open_store(tmp_path / "a")
    first.recorder("r").checkpoint(0, {"v": 0})
    open_store(tmp_path / "b").close()
    return first


def _open_b_racing_mv_a_to_b(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Store:
    """Open b while "mv b t; mv a b" lands between the registry's stat of b and LMDB's open."""
    a, b, t = tmp_path / "a", tmp_path / "b", tmp_path / "t"
    real = Env

    def racing(path: str, options: Any, *won: Any) -> Any:
        os.rename(b, t)
        os.rename(a, b)  # after the registry's stat of b, before LMDB opens it
        return real(path, options, *won)

    monkeypatch.setattr(lmdb_registry, "Env", racing)
    second = open_store(b)
    monkeypatch.setattr(lmdb_registry, "Env", real)
    return second


def test_an_open_racing_a_rename_of_an_open_store_shares_its_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Store a is open; opening b races "mv b t; mv a b" between the identity check and
    LMDB's open: the new handle shares a's environment, and closing it leaves the open
    read of the first handle in the reader table."""
    b = tmp_path / "b"
    first = _open_a_and_create_b(tmp_path)
    second = _open_b_racing_mv_a_to_b(tmp_path, monkeypatch)
    try:
        assert second.backend.env is first.backend.env
        txn = first.backend.begin_read()
        try:
            second.close()
            out = subprocess.run(
                [sys.executable, "-c", READERS, str(b)], capture_output=True, text=True, check=True
            ).stdout
            assert str(os.getpid()) in out, out  # the open read still holds its slot
        finally:
            first.backend.end_read(txn)
    finally:
        second.close()
        first.close()


def test_an_open_racing_a_rename_leaves_the_open_stores_reads_in_the_reader_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Store a is open with a read in progress; opening b races "mv b t; mv a b" between
    the identity check and LMDB's open: the open read keeps its reader slot (LMDB opening
    the file a second time in this process takes its lock file as its own and resets the
    reader table and the writer mutex)."""
    b = tmp_path / "b"
    first = _open_a_and_create_b(tmp_path)
    txn = first.backend.begin_read()
    try:
        second = _open_b_racing_mv_a_to_b(tmp_path, monkeypatch)
        try:
            assert second.backend.env is first.backend.env
            out = subprocess.run(
                [sys.executable, "-c", READERS, str(b)], capture_output=True, text=True, check=True
            ).stdout
            assert str(os.getpid()) in out, out  # the read open across the racing open
        finally:
            second.close()
    finally:
        first.backend.end_read(txn)
        first.close()


def test_a_rename_after_the_creation_lock_registers_the_file_lmdb_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opening b races "mv b t; mv a b" (a closed here) after the folder is locked, before
    its checks: the environment, opened on the locked folder (now t), is registered by
    that file, so a later open of t shares it instead of opening the file a second time
    (which resets the reader table under the first environment's open read)."""
    a, b, t = tmp_path / "a", tmp_path / "b", tmp_path / "t"
    for folder in (a, b):
        with open_store(folder) as store:
            store.recorder(folder.name).checkpoint(0, {"v": folder.name})
    real = lmdb_open.check_data_file

    def racing(*args: Any) -> Any:
        monkeypatch.setattr(lmdb_env, "check_data_file", real)
        os.rename(b, t)
        os.rename(a, b)  # after lock_folder took b's folder (now t), before its checks
        return real(*args)

    monkeypatch.setattr(lmdb_env, "check_data_file", racing)
    second = open_store(b)
    try:
        txn = second.backend.begin_read()
        try:
            third = open_store(t)
            try:
                out = subprocess.run(
                    [sys.executable, "-c", READERS, str(t)],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
                assert str(os.getpid()) in out, out  # the open read keeps its slot
                assert third.backend.env is second.backend.env
            finally:
                third.close()
        finally:
            second.backend.end_read(txn)
        assert second.backend.env.file_id == lmdb_identity.file_of(str(t))
    finally:
        second.close()


def test_compact_racing_a_rename_to_an_open_stores_path_never_swaps_its_data_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Compacting b (closed) races "mv b t; mv a b" (a open here) after compact's check of
    this process's open stores, before its creation lock: a's data file is never swapped
    under a's open environment, whose open read keeps its reader slot and whose
    checkpoints acknowledged afterwards are all in a's store."""
    a, b, t = tmp_path / "a", tmp_path / "b", tmp_path / "t"
    first = open_store(a)
    one = first.recorder("r").checkpoint(0, {"v": 1})
    with open_store(b) as other:
        other.recorder("o").checkpoint(0, {"v": "b"})
    real = lmdb_open.creation_lock

    def racing(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(lmdb_copy, "creation_lock", real)
        os.rename(b, t)
        os.rename(a, b)  # after reserved_for_compact's check of b, before the lock
        return real(*args, **kwargs)

    monkeypatch.setattr(lmdb_copy, "creation_lock", racing)
    txn = first.backend.begin_read()
    try:
        with contextlib.suppress(StoreError):  # refused, or t (the locked one) compacted
            compact_store(b)
        out = subprocess.run(
            [sys.executable, "-c", READERS, str(b)], capture_output=True, text=True, check=True
        ).stdout
        assert str(os.getpid()) in out, out  # a's open read keeps its slot
    finally:
        first.backend.end_read(txn)
    two = first.recorder("r").checkpoint(1, {"v": 2})
    first.close()
    with open_store(b, readonly=True) as again:
        for cid, want in ((one, {"v": 1}), (two, {"v": 2})):
            with again.read(cid) as cp:
                assert cp.state() == want


#: In a child process (a hang is bounded there): compact b while "mv b t; mv a b" lands
#: before its creation lock and, once it holds that lock (argv[4] "locked") or while it
#: copies ("copying"), "mv b a" and another thread opens a (its data file is not the one
#: compact reserved first). Prints what each side did.
_COMPACT_WHILE_AN_OPEN_WAITS = """
import contextlib, fcntl, os, sys, threading
from cpstore.store import lmdb_copy, lmdb_open
from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store
from cpstore.store.maintenance import compact_store

a, b, t, when = sys.argv[1:5]
real_lock, real_copy, real_flock = lmdb_copy.creation_lock, lmdb_copy.copy_env, fcntl.flock
waiting, opener, said = threading.Event(), [], []

def flock(fd, op):
    if threading.current_thread() in opener:
        waiting.set()  # the open holds the registry lock from here on
    return real_flock(fd, op)

def open_a():
    try:
        with open_store(a) as st:
            said.append("opened " + str(len(st.history("a"))))
    except Exception as exc:
        said.append("refused " + type(exc).__name__)

def open_meanwhile():
    os.rename(b, a)  # the locked folder back at a: no reservation names its data file
    opener.append(threading.Thread(target=open_a, daemon=True))
    opener[0].start()
    waiting.wait(30)  # the open blocks on this creation lock, or was refused at once
    opener[0].join(0.5 if waiting.is_set() else 30)

@contextlib.contextmanager
def lock(*args, **kwargs):
    lmdb_copy.creation_lock = real_lock
    os.rename(b, t)
    os.rename(a, b)  # after reserved_for_compact looked at b, before the lock
    with real_lock(*args, **kwargs) as fd:
        if when == "locked":
            open_meanwhile()
        yield fd

def copy(*args, **kwargs):
    lmdb_copy.copy_env = real_copy
    if when == "copying":
        open_meanwhile()
    return real_copy(*args, **kwargs)

fcntl.flock = flock
lmdb_copy.creation_lock, lmdb_copy.copy_env = lock, copy
try:
    compact_store(b)
    said.append("compacted")
except Exception as exc:
    said.append("compact " + type(exc).__name__ + ": " + str(exc))
opener[0].join(30)
print(sorted(said))
"""


@pytest.mark.parametrize("when", ["copying", "locked"])
def test_compact_never_deadlocks_with_an_open_of_its_locked_folder_by_another_name(
    tmp_path: Path, when: str
) -> None:
    """Compacting b races "mv b t; mv a b" before its creation lock, then, once it holds
    the lock or while it copies, "mv b a" and another thread of the process opens a: that
    open (whose data file no reservation names) waits for the creation lock holding the
    registry lock, and the compaction's pin and verify of its copy need the registry lock:
    neither may wait forever (the open is refused, or the compaction; both finish)."""
    a, b, t = tmp_path / "a", tmp_path / "b", tmp_path / "t"
    for folder in (a, b):
        with open_store(folder) as store:
            store.recorder(folder.name).checkpoint(0, {"v": folder.name})
    run = [sys.executable, "-c", _COMPACT_WHILE_AN_OPEN_WAITS, str(a), str(b), str(t), when]
    try:
        done = subprocess.run(run, capture_output=True, text=True, timeout=90, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail("compact and an open of its locked folder deadlocked (registry lock)")
    assert done.returncode == 0, done.stderr
    said = done.stdout  # compact did, or refused typed (b may be gone: "not a store folder")
    assert "compacted" in said or "compact StoreError" in said or "compact InvalidInput" in said
    for folder in (a, t):
        with open_store(folder, readonly=True) as store:
            assert len(store.history(folder.name if folder == a else "b")) == 1
            assert store.verify().ok


#: In a child process (a hang is bounded there): compact a in one thread; once compact has
#: pinned a's folder (its copy starts), another thread's open of b, after the registry's
#: stat of b, meets "mv b t; mv a b" and so locks the folder compact holds. Prints what each
#: side did.
_OPEN_RACING_A_RENAME_INTO_COMPACT = """
import fcntl, os, sys, threading
from cpstore.store import lmdb_copy, lmdb_registry
from cpstore.store.facade import open as open_store
from cpstore.store.maintenance import compact_store

a, b, t = sys.argv[1:4]
real_copy, real_flock, real_env = lmdb_copy.copy_env, fcntl.flock, lmdb_registry.Env
waiting, said, opener = threading.Event(), [], []

def flock(fd, op):
    if threading.current_thread().name == "opener":
        waiting.set()  # the open is at compact's creation lock (registry lock held)
    return real_flock(fd, op)

def open_b():
    try:
        with open_store(b) as st:
            said.append("opened " + ",".join(sorted(st.runs())))
    except Exception as exc:
        said.append("refused " + type(exc).__name__)

def copy(*args, **kwargs):
    # compact holds a's folder (locked, pinned): another thread opens b meanwhile.
    lmdb_copy.copy_env = real_copy
    opener.append(threading.Thread(target=open_b, name="opener"))
    opener[0].start()
    waiting.wait(30)
    return real_copy(*args, **kwargs)

def racing_env(path, options, *won):
    if threading.current_thread().name != "opener":
        return real_env(path, options, *won)  # compact's own opens
    lmdb_registry.Env = real_env
    os.rename(b, t)
    os.rename(a, b)  # after the registry's stat of b, before the open locks b's folder
    return real_env(path, options, *won)

fcntl.flock, lmdb_copy.copy_env, lmdb_registry.Env = flock, copy, racing_env
try:
    compact_store(a)
    said.append("compacted")
except Exception as exc:
    said.append("compact " + type(exc).__name__ + ": " + str(exc))
opener[0].join()
print(sorted(said))
"""


def test_an_open_racing_a_rename_into_a_compacting_folder_never_deadlocks(
    tmp_path: Path,
) -> None:
    """Compact of a has pinned its folder; an open of b, between the registry's stat of b
    and its folder lock, meets "mv b t; mv a b": it must not wait for compact's creation
    lock holding the registry lock (compact's verify of its copy needs that lock): both
    finish, compact swapped its copy in and the open is of the store at b then (a's)."""
    a, b, t = tmp_path / "a", tmp_path / "b", tmp_path / "t"
    for folder in (a, b):
        with open_store(folder) as store:
            store.recorder(folder.name).checkpoint(0, {"v": folder.name})
    run = [sys.executable, "-c", _OPEN_RACING_A_RENAME_INTO_COMPACT, str(a), str(b), str(t)]
    try:
        done = subprocess.run(run, capture_output=True, text=True, timeout=60, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail("an open waiting for compact's creation lock under the registry lock hung")
    assert done.returncode == 0, done.stderr
    assert "compacted" in done.stdout, done.stdout
    assert "opened a" in done.stdout or "refused StoreError" in done.stdout, done.stdout
    for folder, run_id in ((b, "a"), (t, "b")):
        with open_store(folder, readonly=True) as store:
            assert len(store.history(run_id)) == 1
            assert store.verify().ok
