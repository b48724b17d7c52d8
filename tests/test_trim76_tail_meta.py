"""The write txn's tail cover reads LMDB's ``last_pgno`` from the data file's meta pages
(TailCover.last_pgno, trim76: ``env.info()`` built a dict of six fields every write txn,
~9k instructions of a ~380k put). It must be LMDB's own answer: through growth, after
another process's commits, and LMDB asked instead whenever the pages cannot be mapped or
do not read as meta pages.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import cpstore

_WRITER = r"""
import os, sys
import cpstore
with cpstore.open(sys.argv[1], durability="none") as st:
    rec = st.recorder("other")
    for i in range(20):
        rec.checkpoint(i, {"big": os.urandom(150_000)})
"""


def _env(store: Any) -> Any:
    return store.backend.env


def _agrees(env: Any) -> bool:
    return bool(env._tail.last_pgno() == env.env.info()["last_pgno"])


def test_meta_pages_give_lmdbs_last_pgno_through_growth(tmp_path: Path) -> None:
    """Small and large puts grow the file past several tail steps: after every put the
    meta pages' last_pgno is env.info()'s (the map was made, not the fallback)."""
    with cpstore.open(tmp_path / "s", durability="none") as st:
        env = _env(st)
        rec = st.recorder("r")
        for i in range(60):
            rec.checkpoint(i, {"a": os.urandom(200_000 if i % 5 == 0 else 2_000), "n": i})
            assert _agrees(env), i
        assert env.env.info()["last_pgno"] * env._tail.psize > 2 * (1 << 20)  # past two steps
        assert not isinstance(env._tail.metas, bool)


def test_meta_pages_follow_another_processes_commits(tmp_path: Path) -> None:
    """Another process commits (and grows the file) between this process's writes: the
    next write txn reads the new meta page, as LMDB does, and covers the grown file."""
    path = tmp_path / "s"
    with cpstore.open(path, durability="none") as st:
        env = _env(st)
        st.recorder("r").checkpoint(0, {"a": 1})
        before = env.env.info()["last_pgno"]
        subprocess.run([sys.executable, "-c", _WRITER, str(path)], check=True, timeout=120)
        seen: list[tuple[int | None, int]] = []
        real = type(env)._cover_tail

        def cover(self: Any) -> None:
            seen.append((self._tail.last_pgno(), self.env.info()["last_pgno"]))
            real(self)

        type(env)._cover_tail = cover
        try:
            st.recorder("r").checkpoint(1, {"a": 2})
        finally:
            type(env)._cover_tail = real
        assert seen and seen[0][0] == seen[0][1] > before
        data = os.path.getsize(os.path.join(path, "data.mdb"))
        assert data >= (seen[0][1] + 1) * env._tail.psize


@pytest.mark.parametrize("how", ["unmapped", "not_meta"])
def test_lmdb_is_asked_when_the_meta_pages_do_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """No map (no held descriptor, no mmap), or pages without LMDB's magic: last_pgno says
    None and the write txn takes env.info()'s, covering the file all the same."""
    with cpstore.open(tmp_path / "s", durability="none") as st:
        env = _env(st)
        tail = env._tail
        if how == "unmapped":
            monkeypatch.setattr(type(tail), "_map_metas", lambda self: False)
            tail.metas = None
        else:
            tail.metas = bytes(2 * tail.psize)  # zeros: no magic
        assert tail.last_pgno() is None
        seen: list[tuple[int, int]] = []
        real_cover = type(tail).cover

        def cover(self: Any, last: int) -> None:  # inside the write txn: LMDB's committed meta
            seen.append((last, env.env.info()["last_pgno"]))
            real_cover(self, last)

        monkeypatch.setattr(type(tail), "cover", cover)
        tail.covered = 0  # so the write txn calls cover() with what it found
        st.recorder("r").checkpoint(0, {"a": os.urandom(300_000)})
        assert len(seen) == 1 and seen[0][0] == seen[0][1]
        tail.covered = 0
        st.recorder("r").checkpoint(1, {"a": 1})
        assert len(seen) == 2 and seen[1][0] == seen[1][1] > seen[0][1]
        data = os.path.getsize(os.path.join(tmp_path / "s", "data.mdb"))
        assert data >= (seen[1][0] + 1) * tail.psize


def test_the_write_txn_hands_out_copies_and_takes_the_lock(tmp_path: Path) -> None:
    """The write txn is begun with py-lmdb's positional arguments (trim76): a write txn
    (a put lands) handing out bytes copies (put86: no buffers; every value a commit reads
    is small, and a view costs more than the copy), under the held write lock."""
    with cpstore.open(tmp_path / "s", durability="none") as st:
        env = _env(st)
        seen: list[Any] = []

        def probe(txn: Any) -> None:
            txn.put(b"trim76", b"v", db=env.dbs["meta"])
            seen.append((type(txn.get(b"trim76", None, env.dbs["meta"])), env.writes_here()))
            txn.delete(b"trim76", b"", env.dbs["meta"])

        env.write(probe)
        assert seen == [(bytes, True)]
        assert not env.writes_here()
