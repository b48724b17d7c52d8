"""review78: trim76's ``TailCover.last_pgno`` (LMDB's meta pages read from a read-only map
of the held data file) against ``env.info()``, inside every write txn, where it matters:
processes committing into one store at once (each adopting the others' map growth), LMDB's
map grown past its first size, a fork() child inheriting the map, a compaction swapping the
file, a read-only store, and the map's lifetime on close (no descriptor or mapping left).
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import cpstore
from cpstore.errors import ForkError, StoreReadOnlyError
from cpstore.store.lmdb_env import Env
from cpstore.store.maintenance import compact_store

#: Wraps Env._cover_tail: inside each write txn (LMDB's writer lock held), the meta pages'
#: last_pgno against env.info()'s, and the file covering it once the cover ran.
_PROBE = r"""
import os
from cpstore.store.lmdb_env import Env

SEEN, TXNIDS = [], []
_real = Env._cover_tail

def _cover(self):
    info = self.env.info()
    mine, lmdb = self._tail.last_pgno(), info["last_pgno"]
    _real(self)
    size = os.fstat(self._tail.held).st_size
    SEEN.append((mine, lmdb, size >= (lmdb + 1) * self._tail.psize))
    TXNIDS.append(info["last_txnid"])

Env._cover_tail = _cover
"""

_WRITER = (
    _PROBE
    + r"""
import sys
import cpstore
path, who, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with cpstore.open(path, durability="none", map_size=1 << 20, max_map_size=1 << 30) as st:
    rec = st.recorder(who)
    for i in range(n):
        rec.checkpoint(i, {"big": os.urandom(40_000 * (1 + i % 4)), "i": i})
        if i % 10 == 9:
            st.delete_run(who + "-x") if i > 10 else None
            st.recorder(who + "-x").checkpoint(i, {"pad": os.urandom(60_000)})
bad = [s for s in SEEN if s[0] != s[1] or not s[2]]
others = sum(b - a > 1 for a, b in zip(TXNIDS, TXNIDS[1:]))  # another process committed
print(len(SEEN), others, len(bad), bad[:3])
sys.exit(1 if bad or not SEEN else 0)
"""
)


@pytest.fixture
def probe() -> Iterator[list[tuple[int | None, int, bool]]]:
    """The same probe in this process (Env._cover_tail wrapped, put back after)."""
    seen: list[tuple[int | None, int, bool]] = []
    real = Env._cover_tail

    def cover(self: Any) -> None:
        mine, lmdb = self._tail.last_pgno(), self.env.info()["last_pgno"]
        real(self)
        size = os.fstat(self._tail.held).st_size
        seen.append((mine, lmdb, size >= (lmdb + 1) * self._tail.psize))

    Env._cover_tail = cover  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        Env._cover_tail = real  # type: ignore[method-assign]


def _sound(seen: list[tuple[int | None, int, bool]]) -> None:
    assert seen
    assert [s for s in seen if s[0] != s[1] or not s[2]] == []


def test_processes_committing_at_once_each_read_lmdbs_last_pgno(tmp_path: Path) -> None:
    """Three processes write one store at once from a 1 MiB map (each grows it and adopts
    the others' growth), freeing pages as they go: in every write txn of each the meta
    pages' last_pgno is env.info()'s and the file covers it."""
    path = str(tmp_path / "s")
    cpstore.open(path, durability="none").close()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, path, f"w{i}", "80"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(3)
    ]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outs
    assert all(int(out.split()[0]) >= 40 for out, _ in outs), outs  # a probe per txn
    assert sum(int(out.split()[1]) for out, _ in outs) > 0, outs  # they did interleave
    with cpstore.open(path) as st:
        assert st.verify().ok


def test_lmdbs_map_grown_past_its_first_size(tmp_path: Path, probe: list[Any]) -> None:
    """A 1 MiB map grown many times by 300 KB parts (the held file's two pages stay
    mapped as they were): equal in every txn, the map still the first one made."""
    with cpstore.open(tmp_path / "s", durability="none", map_size=1 << 20) as st:
        env = st.backend.env
        rec = st.recorder("r")
        rec.checkpoint(0, {"a": 1})
        first = env._tail.metas
        for i in range(1, 30):
            rec.checkpoint(i, {"a": os.urandom(300_000)})
        assert env.env.info()["map_size"] > 8 << 20  # grown
        assert env._tail.metas is first and not isinstance(first, bool)
    _sound(probe)


def test_a_fork_child_leaves_the_parents_map_as_it_was(tmp_path: Path, probe: list[Any]) -> None:
    """A fork() child inherits the map: its write is ForkError as before (nothing read or
    written through the map there), and its exit, which drops the child's copy of the map,
    changes nothing in the parent, whose later txns read LMDB's value still."""
    with cpstore.open(tmp_path / "s", durability="none") as st:
        env = st.backend.env
        rec = st.recorder("r")
        rec.checkpoint(0, {"a": os.urandom(100_000)})
        metas = env._tail.metas
        before = len(probe)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            code = 3
            try:
                rec.checkpoint(1, {"a": 2})
            except ForkError:
                code = 0 if len(probe) == before else 4
            except BaseException:
                code = 5
            gc.collect()
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        for i in range(1, 10):
            rec.checkpoint(i, {"a": os.urandom(150_000)})
        assert env._tail.metas is metas and not isinstance(metas, bool) and not metas.closed
    _sound(probe)


def test_a_compaction_swaps_the_file_the_next_open_maps(tmp_path: Path, probe: list[Any]) -> None:
    """Compaction needs the store closed everywhere; the next open maps the new file (the
    held one: its inode is data.mdb's), and reads its (smaller) last_pgno as LMDB does."""
    path = tmp_path / "s"
    with cpstore.open(path, durability="none") as st:
        for i in range(20):
            st.recorder(f"r{i}").checkpoint(0, {"a": os.urandom(200_000)})
        for i in range(18):
            st.delete_run(f"r{i}")  # and sweeps
        before = st.backend.env.env.info()["last_pgno"]
    compact_store(path)
    with cpstore.open(path, durability="none") as st:
        env = st.backend.env
        st.recorder("r19").checkpoint(1, {"a": 1})
        held = os.fstat(env._tail.held)
        data = os.stat(path / "data.mdb")
        assert (held.st_dev, held.st_ino) == (data.st_dev, data.st_ino)
        assert env._tail.last_pgno() == env.env.info()["last_pgno"] < before
    _sound(probe)


def _fds_on(path: Path) -> int:
    want = os.stat(path)
    n = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            st = os.stat(f"/proc/self/fd/{name}")
        except OSError:
            continue
        n += (st.st_dev, st.st_ino) == (want.st_dev, want.st_ino)
    return n


def _maps_of(path: Path) -> int:
    want = os.stat(path)
    with open("/proc/self/maps") as maps:
        return sum(
            1
            for line in maps
            if line.split()[4] == str(want.st_ino) and line.rstrip().endswith("data.mdb")
        )


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="/proc")
def test_close_unmaps_and_closes_what_the_map_held(tmp_path: Path, probe: list[Any]) -> None:
    """Python's mmap keeps a dup of the descriptor: on close neither it nor the map stays
    (none of the data file's descriptors or mappings is left), and an open after it maps
    afresh."""
    path = tmp_path / "s"
    for _ in range(2):
        with cpstore.open(path, durability="none") as st:
            tail = st.backend.env._tail
            st.recorder("r").checkpoint(len(probe), {"a": 1})
            assert not isinstance(tail.metas, bool | None)
            assert _fds_on(path / "data.mdb") >= 2  # LMDB's, the held one (and the map's dup)
        assert tail.metas is None and tail.held is None
        assert _fds_on(path / "data.mdb") == 0
        assert _maps_of(path / "data.mdb") == 0
    _sound(probe)


def test_a_read_only_store_never_maps(tmp_path: Path) -> None:
    """A read-only handle begins no write txn: its write is StoreReadOnlyError, as before,
    and nothing is mapped."""
    path = tmp_path / "s"
    with cpstore.open(path) as st:
        st.recorder("r").checkpoint(0, {"a": 1})
    with cpstore.open(path, readonly=True) as st:
        tail = st.backend.env._tail
        with pytest.raises(StoreReadOnlyError):
            st.recorder("r").checkpoint(1, {"a": 2})
        with pytest.raises(StoreReadOnlyError):
            st.backend.env.write(lambda txn: None)
        assert tail.metas is None
