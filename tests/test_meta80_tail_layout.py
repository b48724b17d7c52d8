"""meta80: TailCover.last_pgno reads LMDB's ``last_pgno`` from the meta pages only once
they prove the layout it reads (LMDB 0.9's, 64-bit). A file keeping LMDB's magic at byte
16 with anything else where that layout has it (another page header, another data
version, a 32-bit ``size_t`` and pointer, a value env.info() does not give) makes it ask
LMDB for good, and the store writes and verifies all the same.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any

import cpstore
from cpstore.store import lmdb_pages
from cpstore.store.lmdb_pages import TailCover

_PSIZE = 4096
_MAGIC = 0xBEEFC0DE


def _page64(pgno: int, last: int, txnid: int, *, version: int = 1, flags: int = 0x08) -> bytes:
    """A meta page as LMDB 0.9 writes it on a 64-bit build."""
    page = bytearray(_PSIZE)
    struct.pack_into("<QHHI", page, 0, pgno, 0, flags, 0)  # mp_pgno, mp_pad, mp_flags, bounds
    struct.pack_into("<IIQQ", page, 16, _MAGIC, version, 0, 1 << 30)  # address, mapsize: 0, 1 GiB
    # MDB_db: md_pad (psize in dbs[0]), flags, depth, three page counts, entries, root
    db = struct.Struct("<IHHQQQQQ")
    db.pack_into(page, 40, _PSIZE, 0x08, 0, 0, 0, 0, 0, (1 << 64) - 1)
    db.pack_into(page, 88, 0, 0, 0, 0, 0, 0, 0, (1 << 64) - 1)
    struct.pack_into("<QQ", page, 136, last, txnid)  # mm_last_pg, mm_txnid
    return bytes(page)


def _page32(pgno: int, last: int, txnid: int) -> bytes:
    """A meta page with 64-bit page numbers but a 4-byte pointer and ``size_t`` (LMDB's
    MDB_VL32 idea on a 32-bit build, as 0.9's struct would lay it out): the page header and
    the magic and version where the 64-bit layout has them, everything after moved."""
    page = bytearray(_PSIZE)
    struct.pack_into("<QHHI", page, 0, pgno, 0, 0x08, 0)
    struct.pack_into("<IIII", page, 16, _MAGIC, 1, 0, 1 << 30)  # magic, version, address, mapsize
    db = struct.Struct("<IHHQQQIQ")  # 44 bytes: a 4-byte md_entries
    db.pack_into(page, 32, _PSIZE, 0x08, 0, 0, 0, 0, 0, (1 << 64) - 1)
    db.pack_into(page, 76, 0, 0, 0, 0, 0, 0, 0, (1 << 64) - 1)
    struct.pack_into("<QQ", page, 120, last, txnid)
    return bytes(page)


def _tail(tmp_path: Path, pages: bytes, last: int, txnid: int) -> TailCover:
    """A TailCover holding a data file made of ``pages``, whose LMDB answers ``last``/``txnid``."""
    folder = tmp_path / "f"
    folder.mkdir()
    (folder / "data.mdb").write_bytes(pages + bytes(8 * _PSIZE))
    tail = TailCover(str(folder / "data.mdb"), _PSIZE)
    tail.hold(str(folder), False)
    tail.info = lambda: {"last_pgno": last, "last_txnid": txnid}
    return tail


def test_the_64_bit_layout_is_read_when_lmdb_agrees(tmp_path: Path) -> None:
    """The layout read, and env.info() giving the same: the fast read answers (the newer
    meta page's last_pgno, by txn id), the map kept."""
    tail = _tail(tmp_path, _page64(0, 9, 6) + _page64(1, 11, 7), 11, 7)
    try:
        assert tail.last_pgno() == 11
        assert not isinstance(tail.metas, bool)
    finally:
        tail.close()


def test_a_32_bit_size_t_layout_with_the_magic_in_place_falls_back(tmp_path: Path) -> None:
    """Magic and version where the 64-bit layout has them, mm_last_pg elsewhere: before
    meta80 last_pgno read 0 (bytes past the meta) and the tail cover took it; now LMDB
    is asked, for good."""
    tail = _tail(tmp_path, _page32(0, 9, 6) + _page32(1, 11, 7), 11, 7)
    try:
        assert tail.last_pgno() is None
        assert tail.metas is False
        assert tail.last_pgno() is None
    finally:
        tail.close()


def test_another_data_version_or_page_header_falls_back(tmp_path: Path) -> None:
    """An MDB_DEVEL build's data version (999), a meta page not numbered as its place, a
    page header whose flags are not P_META alone: each is not the layout read."""
    for n, pages in enumerate(
        (
            _page64(0, 9, 6, version=999) + _page64(1, 11, 7, version=999),
            _page64(0, 9, 6) + _page64(0, 11, 7),
            _page64(0, 9, 6, flags=0x0A) + _page64(1, 11, 7),
        )
    ):
        (tmp_path / str(n)).mkdir()
        tail = _tail(tmp_path / str(n), pages, 11, 7)
        try:
            assert tail.last_pgno() is None, n
            assert tail.metas is False, n
        finally:
            tail.close()


def test_a_value_lmdb_does_not_give_falls_back_for_good(tmp_path: Path) -> None:
    """Every field where the layout has it, but env.info() gives another last_pgno or txn
    id: LMDB is asked, and keeps being asked (the map let go), whatever the pages say after."""
    for n, (last, txnid) in enumerate(((12, 7), (11, 8))):
        (tmp_path / str(n)).mkdir()
        tail = _tail(tmp_path / str(n), _page64(0, 9, 6) + _page64(1, 11, 7), last, txnid)
        try:
            assert tail.last_pgno() is None
            assert tail.metas is False
            tail.info = lambda: {"last_pgno": 11, "last_txnid": 7}
            assert tail.last_pgno() is None
        finally:
            tail.close()


def _state(st: Any, cid: str | None) -> Any:
    with st.read(cid) as cp:
        return cp.state()


def _covered(st: Any) -> bool:
    env = st.backend.env
    size = os.fstat(env._tail.held).st_size
    return bool(size >= (env.env.info()["last_pgno"] + 1) * env._tail.psize)


def test_a_store_whose_meta_pages_lmdb_accepts_but_the_layout_does_not(tmp_path: Path) -> None:
    """LMDB 0.9 checks a meta page's P_META flag, magic and version on open, not its page
    number: a store whose meta page 1 is numbered 5 opens; its write txns ask LMDB (the
    pages did not prove the layout), grow and cover the file, and the store verifies."""
    path = tmp_path / "s"
    with cpstore.open(path, durability="none") as st:
        st.recorder("r").checkpoint(0, {"a": 1})
    with open(path / "data.mdb", "r+b") as f:
        f.seek(_PSIZE)
        assert struct.unpack("<Q", f.read(8))[0] == 1
        f.seek(_PSIZE)
        f.write(struct.pack("<Q", 5))
    with cpstore.open(path, durability="none") as st:
        env = st.backend.env
        rec = st.recorder("r")
        ids = [rec.checkpoint(i, {"a": os.urandom(300_000), "i": i}) for i in range(1, 8)]
        assert env._tail.metas is False and env._tail.last_pgno() is None
        assert _covered(st)
        assert _state(st, ids[-1])["i"] == 7
        assert st.verify().ok


def test_a_live_store_whose_meta_version_changes_asks_lmdb(tmp_path: Path) -> None:
    """The data version (never rewritten by a commit) turned to an MDB_DEVEL build's 999
    under an open store, its pages mapped again as the next open maps them: the write txn
    asks LMDB, the checkpoints land and read back verified; put back, the store verifies."""
    path = tmp_path / "s"
    with cpstore.open(path, durability="none") as st:
        env = st.backend.env
        rec = st.recorder("r")
        rec.checkpoint(0, {"a": 1})
        assert env._tail.last_pgno() == env.env.info()["last_pgno"]
        fd = os.open(path / "data.mdb", os.O_RDWR)
        try:
            for at in (16 + 4, _PSIZE + 16 + 4):
                assert os.pread(fd, 4, at) == struct.pack("<I", 1)
                os.pwrite(fd, struct.pack("<I", 999), at)
            env._tail.metas.close()
            env._tail.metas = None
            ids = [rec.checkpoint(i, {"a": os.urandom(300_000), "i": i}) for i in range(1, 6)]
            assert env._tail.metas is False and env._tail.last_pgno() is None
            assert _covered(st)
            assert [_state(st, c)["i"] for c in ids] == [1, 2, 3, 4, 5]
            for at in (16 + 4, _PSIZE + 16 + 4):
                os.pwrite(fd, struct.pack("<I", 1), at)
        finally:
            os.close(fd)
    with cpstore.open(path) as st:
        assert st.verify().ok
        assert _state(st, st.ref("r"))["i"] == 5


def test_the_walk_reads_only_meta_pages_of_the_layout(tmp_path: Path) -> None:
    """The open-time walk (highest_reachable_page) takes a meta page only when it shows
    the layout too: the same pages, their version changed, are not shown."""
    folder = tmp_path / "w"
    folder.mkdir()
    good = _page64(0, 9, 6) + _page64(1, 11, 7)
    (folder / "data.mdb").write_bytes(good + bytes(10 * _PSIZE))
    assert lmdb_pages.highest_reachable_page(str(folder / "data.mdb"), _PSIZE, 11, 7) == 1
    bad = _page64(0, 9, 6, version=999) + _page64(1, 11, 7, version=999)
    (folder / "data.mdb").write_bytes(bad + bytes(10 * _PSIZE))
    assert lmdb_pages.highest_reachable_page(str(folder / "data.mdb"), _PSIZE, 11, 7) is None
