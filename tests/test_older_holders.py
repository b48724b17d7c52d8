"""A layout upgrade refuses to run while a process of an older release holds the store.

An older release reads the format record once, at its open, and keeps using
the layout it found; upgrading under it lets its gc sweep what the new layout
stores (docs/store.md, "Store layout versions"). "Older release" here is any
process holding LMDB's liveness lock without this release's holder mark —
played in these tests by a bare py-lmdb open, which is exactly what an older
cpstore's open leaves behind.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import lmdb
import pytest

import cpstore
from cpstore.errors import StoreError
from cpstore.native.canonical import decode_value, encode_value
from cpstore.store import lmdb_holders
from cpstore.store.lmdb_holders import older_holders
from cpstore.store.model import STORE_VERSION

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="holder marks read /proc/locks (Linux)"
)

#: A process that opens the store folder and waits for a line on stdin before it exits.
_BARE = """
import sys, lmdb
env = lmdb.open(sys.argv[1], max_dbs=16)
with env.begin() as txn:
    txn.get(b"x")
print("ready", flush=True)
sys.stdin.readline()
"""
_CURRENT = """
import os, sys, cpstore
st = cpstore.open(sys.argv[1], readonly=sys.argv[2] == "ro")
os.listdir(sys.argv[1])  # closes a descriptor of the folder: the mark must survive it
print("ready", flush=True)
sys.stdin.readline()
st.close()
"""


@contextmanager
def _holding(code: str, *args: str) -> Iterator[int]:
    """A child process holding the store open while the block runs; yields its pid."""
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield proc.pid
    finally:
        assert proc.stdin is not None
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.wait(timeout=60) == 0


def _format_version(path: Path) -> int:
    env = lmdb.open(str(path), max_dbs=16, readonly=True)
    try:
        with env.begin() as txn:
            raw = txn.get(b"format", db=env.open_db(b"meta", txn=txn, create=False))
            return int(decode_value(raw)["version"])
    finally:
        env.close()


def _set_format_version(path: Path, version: int) -> None:
    env = lmdb.open(str(path), max_dbs=16)
    try:
        with env.begin(write=True) as txn:
            fmt = {"layout": "cpstore", "version": version, "digest": "xxh3-128"}
            txn.put(b"format", encode_value(fmt), db=env.open_db(b"meta", txn=txn))
    finally:
        env.close()


@pytest.fixture
def older_store(tmp_path: Path) -> tuple[Path, str]:
    """A store with one checkpoint whose format record says the layout before this one."""
    path = tmp_path / "s"
    with cpstore.open(path) as st:
        cid = st.recorder("r").checkpoint(0, {"a": 1})
    _set_format_version(path, STORE_VERSION - 1)
    return path, cid


def test_an_upgrade_refuses_while_an_older_release_holds_the_store(
    older_store: tuple[Path, str],
) -> None:
    """The writable open names the holder's pid, writes nothing, and works once it is gone."""
    path, cid = older_store
    with _holding(_BARE, str(path)) as pid:
        assert older_holders(str(path), STORE_VERSION) == [pid]
        with pytest.raises(StoreError) as err:
            cpstore.open(path)
        assert err.value.got == f"pid {pid}"
        assert f"layout {STORE_VERSION - 1}" in str(err.value)
        assert _format_version(path) == STORE_VERSION - 1
        with cpstore.open(path, readonly=True) as st, st.read(cid) as cp:
            assert cp.state() == {"a": 1}  # a read-only open never upgrades: allowed
    with cpstore.open(path) as st:
        assert st.backend.layout == STORE_VERSION
    assert _format_version(path) == STORE_VERSION


@pytest.mark.parametrize("mode", ["ro", "rw"])
def test_processes_of_this_release_do_not_block_an_upgrade(
    older_store: tuple[Path, str], mode: str, tmp_path: Path
) -> None:
    """A holder carrying this release's mark (even after it listed the folder) is no older one."""
    path, cid = older_store
    if mode == "rw":
        # A writable holder of this release upgrades at its own open; set the
        # version back afterwards so the open under test still has one to do.
        with _holding(_CURRENT, str(path), mode) as pid:
            assert older_holders(str(path), STORE_VERSION) == []
            del pid
        _set_format_version(path, STORE_VERSION - 1)
    with _holding(_CURRENT, str(path), "ro"):
        assert older_holders(str(path), STORE_VERSION) == []
        with cpstore.open(path) as st, st.read(cid) as cp:
            assert st.backend.layout == STORE_VERSION
            assert cp.state() == {"a": 1}


def test_an_older_holder_does_not_block_a_store_already_at_this_layout(tmp_path: Path) -> None:
    """No upgrade, no check: a bare LMDB reader beside a current store changes nothing."""
    path = tmp_path / "s"
    with cpstore.open(path) as st:
        st.recorder("r").checkpoint(0, {"a": 1})
    with _holding(_BARE, str(path)) as pid:
        assert older_holders(str(path), STORE_VERSION) == [pid]
        with cpstore.open(path) as st:
            assert st.recorder("r").checkpoint(1, {"a": 2})


def test_a_holder_marked_by_a_release_of_an_older_layout_blocks_the_next_upgrade(
    older_store: tuple[Path, str],
) -> None:
    """A release that marks layout N - 1 is older than an upgrade to N: it blocks it."""
    path, _ = older_store
    code = f"""
import os, sys, fcntl, struct, lmdb
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
lock = struct.pack("hhqqi", fcntl.F_RDLCK, 0, {STORE_VERSION - 1} << 32 | os.getpid(), 1, 0)
fcntl.fcntl(fd, fcntl.F_OFD_SETLK, lock)
env = lmdb.open(sys.argv[1], max_dbs=16)
print("ready", flush=True)
sys.stdin.readline()
"""
    with _holding(code, str(path)) as pid:
        assert older_holders(str(path), STORE_VERSION) == [pid]
        assert older_holders(str(path), STORE_VERSION - 1) == []
        with pytest.raises(StoreError):
            cpstore.open(path)


def test_the_mark_is_dropped_when_the_store_closes(tmp_path: Path) -> None:
    """After close this process holds neither LMDB's lock nor the mark on the folder."""
    path = tmp_path / "s"
    st = cpstore.open(path)
    inode = os.stat(path).st_ino

    def marks() -> list[str]:
        with open("/proc/locks", encoding="ascii") as f:
            return [ln for ln in f if f":{inode} " in ln and ln.split()[1] == "OFDLCK"]

    mine = str(STORE_VERSION << 32 | os.getpid())
    assert any(ln.split()[6] == mine for ln in marks())
    st.close()
    assert not any(ln.split()[6] == mine for ln in marks())


def _marks_of(path: Path, pid: int) -> list[str]:
    """``/proc/locks`` lines of ``pid``'s holder mark on the folder ``path``."""
    inode, mine = os.stat(path).st_ino, str(STORE_VERSION << 32 | pid)
    with open("/proc/locks", encoding="ascii") as f:
        return [
            ln
            for ln in f
            if f":{inode} " in ln and ln.split()[1] == "OFDLCK" and ln.split()[6] == mine
        ]


def test_a_forked_child_does_not_keep_the_parents_mark_after_the_parent_closes(
    tmp_path: Path,
) -> None:
    """The child's inherited descriptor is closed at fork: the parent's close drops its mark.

    Otherwise the mark of the parent's pid outlives it (a daemon's parent exits, a
    worker lives on), and an older release given that pid again passes as this one.
    """
    path = tmp_path / "s"
    st = cpstore.open(path)
    read_end, write_end = os.pipe()
    ready_read, ready_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child says it runs (its fork handlers ran), then waits
        os.write(ready_write, b"r")
        os.read(read_end, 1)
        os._exit(0)
    os.close(read_end)
    try:
        assert os.read(ready_read, 1) == b"r"
        assert _marks_of(path, os.getpid())
        st.close()
        assert _marks_of(path, os.getpid()) == []
    finally:
        os.write(write_end, b"x")
        for fd in (write_end, ready_read, ready_write):
            os.close(fd)
        os.waitpid(pid, 0)


def test_a_holder_one_read_of_proc_locks_misses_still_blocks_the_upgrade(
    older_store: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel builds /proc/locks a page at a time while locks come and go, so one read
    can skip the line at a page boundary: every other read missing the holder (as such a
    skip would) still finds it and refuses the upgrade."""
    path, _ = older_store
    with _holding(_BARE, str(path)) as pid:
        reads: list[str] = []

        def every_other_read_skips_the_holder(file: Any, *args: Any, **kwargs: Any) -> IO[str]:
            with open(file, *args, **kwargs) as f:  # the module opens only /proc/locks
                text = f.read()
            reads.append(text)
            if len(reads) % 2 == 0:
                return io.StringIO(text)
            return io.StringIO(
                "".join(
                    ln
                    for ln in text.splitlines(keepends=True)
                    if not (ln.split()[1] == "POSIX" and ln.split()[4] == str(pid))
                )
            )

        monkeypatch.setattr(lmdb_holders, "open", every_other_read_skips_the_holder, raising=False)
        assert older_holders(str(path), STORE_VERSION) == [pid]
        with pytest.raises(StoreError):
            cpstore.open(path)
        assert reads  # the check read /proc/locks through the stand-in
    assert _format_version(path) == STORE_VERSION - 1


def test_a_holder_missing_from_every_read_of_proc_locks_is_found_by_its_mapping(
    older_store: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second witness: a holder whose lock line no read of /proc/locks shows still
    maps the data file (/proc/<pid>/maps), and the upgrade refuses beside it."""
    path, _ = older_store
    with _holding(_BARE, str(path)) as pid:

        def never_shows_the_holder(file: Any, *args: Any, **kwargs: Any) -> IO[str]:
            with open(file, *args, **kwargs) as f:  # the module opens only /proc/locks
                text = f.read()
            return io.StringIO(
                "".join(ln for ln in text.splitlines(keepends=True) if ln.split()[4] != str(pid))
            )

        monkeypatch.setattr(lmdb_holders, "open", never_shows_the_holder, raising=False)
        assert older_holders(str(path), STORE_VERSION) == [pid]
        with pytest.raises(StoreError):
            cpstore.open(path)
    assert _format_version(path) == STORE_VERSION - 1


def test_devices_are_matched_as_proc_names_them(tmp_path: Path) -> None:
    """The device read from this process's own mapping of data.mdb is the one
    /proc/locks gives this process's LMDB lock (stat may differ on some file systems)."""
    path = tmp_path / "s"
    with cpstore.open(path):
        device = lmdb_holders._kernel_device(str(path / "data.mdb"))
        inode = os.stat(path / "lock.mdb").st_ino
        with open("/proc/locks", encoding="ascii") as f:
            mine = [
                ln.split()[5]
                for ln in f
                if ln.split()[1] == "POSIX"
                and ln.split()[4] == str(os.getpid())
                and ln.split()[5].endswith(f":{inode}")
            ]
    assert device is not None and mine
    assert {m.rpartition(":")[0] for m in mine} == {device}
