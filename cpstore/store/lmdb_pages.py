"""Which pages of an LMDB data file the last committed txn can reach (read with pread).

LMDB's ``last_pgno`` counts pages a txn took from the end of the file and
freed again before committing (loose pages): without a write map they are
never written, so a healthy file may end short of ``last_pgno``. The file
is whole when every page reachable from the current meta page (the free
list's and every database's branch, leaf and overflow pages) lies inside it;
only then can a reader, which touches nothing else, never run past the end.

The walk reads the on-disk format of LMDB 0.9 (64-bit ``pgno_t`` and
``size_t``; docs/store.md, "Open-time size check"). Anything it cannot read
as that format makes it answer "not shown whole" and the caller refuses.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Callable, Mapping
from typing import Any

from cpstore.errors import IntegrityError
from cpstore.store.lmdb_open import open_into

__all__ = ["TailCover", "check_data_size", "highest_reachable_page"]

_PAGEHDRSZ = 16
_P_BRANCH, _P_LEAF, _P_OVERFLOW, _P_META, _P_LEAF2 = 0x01, 0x02, 0x04, 0x08, 0x20
_F_BIGDATA, _F_SUBDATA, _F_DUPDATA = 0x01, 0x02, 0x04
_P_INVALID = (1 << 64) - 1
_MAGIC = 0xBEEFC0DE
#: LMDB 0.9's MDB_DATA_VERSION (an MDB_DEVEL build writes 999: another format).
_DATA_VERSION = 1
_DB_SIZE = 48  # struct MDB_db
_META_DBS = _PAGEHDRSZ + 24  # magic, version, address, mapsize precede mm_dbs
_DB_ROOT = 40  # md_root inside MDB_db
#: A meta page past its page header: mm_magic, then (past mm_version, mm_address,
#: mm_mapsize and mm_dbs) mm_last_pg and mm_txnid.
_META_TAIL = struct.Struct(f"<I{_META_DBS + 2 * _DB_SIZE - _PAGEHDRSZ - 4}xQQ")
#: A meta page's head, which LMDB 0.9 writes when it makes the file (mdb_env_init_meta;
#: a commit rewrites a meta from mm_mapsize on, mm_psize with its own value): the page
#: header's mp_pgno (a 64-bit pgno_t) and mp_flags, mm_magic, mm_version and, past the
#: pointer mm_address and the size_t mm_mapsize, mm_psize (mm_dbs[0].md_pad).
_META_HEAD = struct.Struct(f"<Q2xH4xII{_META_DBS - _PAGEHDRSZ - 8}xI")
#: Walks tried while other processes' commits keep moving the meta page on.
_ATTEMPTS = 3
#: TailCover allocates the data file up to a multiple of this.
TAIL_STEP = 1 << 20
#: The zeros TailCover writes, in pieces of this size from one immutable buffer (a
#: fresh 1 MiB one per fill page-faults on each of its 4 KiB pages, in the write txn).
_ZEROS_SIZE = 1 << 16
_ZEROS = memoryview(bytes(_ZEROS_SIZE))


def _meta(page: bytes) -> tuple[int, int, int, int] | None:
    """(txnid, last_pgno, free root, main root) of a meta page, None when it is not one."""
    if len(page) < _META_DBS + 2 * _DB_SIZE + 16:
        return None
    magic, _version = struct.unpack_from("<II", page, _PAGEHDRSZ)
    if magic != _MAGIC:
        return None
    free_root = struct.unpack_from("<Q", page, _META_DBS + _DB_ROOT)[0]
    main_root = struct.unpack_from("<Q", page, _META_DBS + _DB_SIZE + _DB_ROOT)[0]
    last_pg, txnid = struct.unpack_from("<QQ", page, _META_DBS + 2 * _DB_SIZE)
    return txnid, last_pg, free_root, main_root


def _shows_layout(pages: Any, at: int, pgno: int, psize: int) -> bool:
    """Whether the meta page ``pgno`` at byte ``at`` of ``pages`` reads as LMDB 0.9's 64-bit
    layout puts it: its own number, P_META alone, the magic, data version 1 and ``psize``
    each where that layout has it. Another layout keeping the magic at byte 16 (a 32-bit
    ``size_t`` or pointer, an MDB_DEVEL build) shows another value in one of them."""
    if len(pages) < at + _META_HEAD.size:
        return False
    got = _META_HEAD.unpack_from(pages, at)
    return got == (pgno, _P_META, _MAGIC, _DATA_VERSION, psize)


def highest_reachable_page(path: str, psize: int, last_pgno: int, txnid: int) -> int | None:
    """The highest page number the meta page of ``txnid`` reaches, None when not shown.

    ``last_pgno`` and ``txnid`` are LMDB's own (``env.info()``): the meta page
    read here must agree with both, or the answer is None.
    """
    # Kept as it is opened (open_into), inside the try that closes it: an interrupt (a
    # signal handler's exception) landing on a bare open's return leaked the descriptor
    # (intr88).
    fds: list[int] = []
    try:
        fd = open_into(fds, path, os.O_RDONLY | os.O_CLOEXEC)
        file_pages = os.fstat(fd).st_size // psize

        def page(pgno: int) -> bytes | None:
            if pgno >= file_pages or pgno > last_pgno:
                return None
            data = os.pread(fd, psize, pgno * psize)
            return data if len(data) == psize else None

        meta = None
        for pgno in (0, 1):
            raw = page(pgno)
            shown = raw is not None and _shows_layout(raw, 0, pgno, psize)
            found = _meta(raw) if shown and raw is not None else None
            if found is not None and found[0] == txnid and found[1] == last_pgno:
                meta = found
        if meta is None:
            return None
        highest = 1
        seen: set[int] = set()
        stack = [root for root in meta[2:] if root != _P_INVALID]
        while stack:
            pgno = stack.pop()
            if pgno in seen:
                return None  # a cycle: not a tree LMDB wrote
            seen.add(pgno)
            raw = page(pgno)
            if raw is None:
                return None
            flags, lower = struct.unpack_from("<HH", raw, 10)
            highest = max(highest, pgno)
            if flags & _P_LEAF2 or not flags & (_P_BRANCH | _P_LEAF):
                return None  # cpstore's databases hold no DUPFIXED pages
            count = (lower - _PAGEHDRSZ) >> 1
            if lower < _PAGEHDRSZ or _PAGEHDRSZ + 2 * count > psize:
                return None
            for i in range(count):
                at = struct.unpack_from("<H", raw, _PAGEHDRSZ + 2 * i)[0]
                if at + 8 > psize:
                    return None
                lo, hi, nflags, ksize = struct.unpack_from("<HHHH", raw, at)
                if flags & _P_BRANCH:
                    stack.append(lo | hi << 16 | nflags << 32)
                    continue
                start = at + 8 + ksize
                if nflags & _F_BIGDATA:
                    if start + 8 > psize:
                        return None
                    first = struct.unpack_from("<Q", raw, start)[0]
                    head = page(first)
                    if head is None or not struct.unpack_from("<H", head, 10)[0] & _P_OVERFLOW:
                        return None
                    count_pages = struct.unpack_from("<I", head, 12)[0]
                    highest = max(highest, first + max(count_pages, 1) - 1)
                elif nflags & _F_SUBDATA:
                    if start + _DB_SIZE > psize:
                        return None
                    root = struct.unpack_from("<Q", raw, start + _DB_ROOT)[0]
                    if root != _P_INVALID:
                        stack.append(root)
        return highest
    finally:
        if fds:
            os.close(fds[0])


def check_data_size(
    data: str,
    psize: int,
    info: Callable[[], Mapping[str, Any]],
    *,
    seen: int | None = None,
    shown: str | None = None,
) -> None:
    """Refuse ``data`` when it ends before a page its last committed txn reaches.

    A file at least ``last_pgno`` pages long passes at once; a shorter one
    (loose tail pages never written: a writer killed between its commit and
    ``Env._cover_tail``, or a store written before that existed) passes when
    the walk shows every reachable page inside it. ``info`` is LMDB's
    ``env.info``: a walk that another process's commit overtook (the meta
    page moved on) is tried again, so a whole store is not refused for it.

    ``seen``: the file's size read earlier, of the file LMDB mapped (the open's
    stat under the creation lock). A data file only grows, so a size enough then
    is enough now and saves the stat; a size short of it is read again. ``shown``: the
    name of ``data`` in the error (``data`` may be a ``/proc/self/fd`` path).
    """
    for _ in range(_ATTEMPTS):
        now = info()
        needed = (int(now["last_pgno"]) + 1) * psize
        if seen is not None and seen >= needed:
            return
        seen = None
        size = os.path.getsize(data)
        if size >= needed:
            return
        top = highest_reachable_page(data, psize, int(now["last_pgno"]), int(now["last_txnid"]))
        if top is not None and (top + 1) * psize <= size:
            return
        if int(info()["last_txnid"]) == int(now["last_txnid"]):
            break  # nothing committed meanwhile: the walk's answer stands
    raise IntegrityError(
        "the data file is shorter than its last committed page (truncated?)",
        where=data if shown is None else shown,
        expected=f">= {needed} bytes",
        got=f"{size} bytes",
    )


class TailCover:
    """Fills a data file up to its committed pages (``Env._cover_tail`` calls it).

    Without a write map LMDB writes only dirty pages: pages a txn took from the
    end and freed again (loose pages) count in ``last_pgno`` but are never
    written, so the file can end short and :func:`check_data_size` walks it.
    The tail is filled by writing zeros past the end (what glibc's
    ``posix_fallocate`` does where a filesystem lacks fallocate), so the caller
    holds LMDB's writer lock, where no commit can be writing those pages.

    It fills in ``TAIL_STEP`` steps ahead of ``last_pgno`` (pages past it no txn
    uses yet; LMDB ignores bytes past its pages) through one held descriptor,
    and remembers the size last seen (a data file only grows): most txns make
    no system call here. Zeros written, not an fallocate: a commit then
    overwrites blocks the file already has, and its fdatasync carries no
    allocation with it (benchmarks/bench_put_pages.py ``test_tail_fill``: durable
    puts 1.22x (0.92-1.35) filling exactly to ``last_pgno``, 1.10x (1.01-1.33)
    an fallocate step ahead; it writes each byte the file grows by once more,
    as zeros, not synced until the next commit's fdatasync). Best effort:
    a failure (a full disk) must not fail the txn; an uncovered tail is what
    :func:`check_data_size` walks.
    """

    def __init__(self, data: str, psize: int) -> None:
        self.data, self.psize = data, psize
        self.covered = 0
        self.fd: int | None = None
        #: The descriptor :meth:`hold` holds the data file by (``fd`` too if writable).
        self.held: int | None = None
        #: Fill a step ahead; False (exactly what is committed) until the
        #: file is known to be a cpstore store: a refused open changes nothing.
        self.ahead = False
        #: The held file's two meta pages, mapped read-only (:meth:`last_pgno`); None until
        #: a write txn first asks, False when they cannot be mapped or do not prove the
        #: layout read (:meth:`_map_metas`): LMDB is asked then, for good.
        self.metas: mmap.mmap | bool | None = None
        #: LMDB's ``env.info`` (set once open): what the mapped pages must first agree with.
        self.info: Callable[[], Mapping[str, Any]] | None = None

    def hold(self, folder: str, writable: bool) -> str:
        """Hold ``folder``'s data file (the one LMDB opened: ``folder`` is the pinned
        one, lmdb_open.pin_folder), so no later look by path finds another file there
        (a renamed folder). The path it is read by while held; ``data`` if not held."""
        flags = (os.O_RDWR if writable else os.O_RDONLY) | os.O_CLOEXEC
        try:  # not ``with suppress(...)``: its object and two Python calls, cold in every open
            # Kept as it is opened (map opens, the loop's step stores: no landing between):
            # an interrupt (a signal handler's exception) landing on a bare open's return
            # leaked the descriptor (review87).
            for self.held in map(os.open, (os.path.join(folder, "data.mdb"),), (flags,)):
                pass
        except OSError:
            self.held = None
        if writable:  # a read-only open never opens the data file for writing
            self.fd = self.held
        if self.held is None:
            return self.data
        at = f"/proc/self/fd/{self.held}"
        # A folder pinned through /proc (lmdb_open.pin_folder) shows /proc works here:
        # no second look (a fresh process pays each /proc lookup cold).
        return at if folder.startswith("/proc/self/fd/") or os.path.exists(at) else self.data

    def cover(self, last_pgno: int) -> None:
        """Make the file at least ``last_pgno + 1`` pages long (best effort)."""
        need = (last_pgno + 1) * self.psize
        if need <= self.covered:
            return
        try:
            fd = self.fd
            if fd is None:
                # Kept as it is opened (open_into) and closed unless ``fd`` keeps it: an
                # interrupt (a signal handler's exception) landing on a bare open's return
                # leaked the descriptor (intr88). Not a list the cover keeps: one more
                # attribute cost a fresh open ~1.5k instructions (benchmarks/ir_fresh.py).
                opened: list[int] = []
                try:
                    fd = self.fd = open_into(opened, self.data, os.O_WRONLY | os.O_CLOEXEC)
                finally:
                    if self.fd is None and opened:
                        os.close(opened[0])
            size = os.fstat(fd).st_size
            target = -(-need // TAIL_STEP) * TAIL_STEP if self.ahead else need
            if size < target:
                zeros = _ZEROS
                while size < target:
                    written = os.pwrite(fd, zeros[: min(target - size, _ZEROS_SIZE)], size)
                    if written <= 0:
                        break
                    size += written
            self.covered = size
        except OSError:
            pass

    def last_pgno(self) -> int | None:
        """LMDB's ``last_pgno`` (``env.info()``'s: the newer meta page's, by txn id, as
        LMDB 0.9's ``mdb_env_pick_meta`` picks it), read from the held data file's meta
        pages: ~1k instructions where ``env.info()`` builds a dict of six (~9k, every
        write txn). Asked under LMDB's writer lock, where no commit writes a meta page
        (LMDB writes them through the file, which the map shows). None when the pages
        cannot be mapped, did not prove their layout when mapped (:meth:`_map_metas`) or
        either is not a meta page: the caller asks LMDB."""
        metas = self.metas
        if metas is None:
            metas = self.metas = self._map_metas()
        if metas is False:
            return None
        magic0, last0, txnid0 = _META_TAIL.unpack_from(metas, _PAGEHDRSZ)  # type: ignore[arg-type]
        magic1, last1, txnid1 = _META_TAIL.unpack_from(metas, self.psize + _PAGEHDRSZ)  # type: ignore[arg-type]
        if magic0 != _MAGIC or magic1 != _MAGIC:
            return None
        return int(last1 if txnid0 < txnid1 else last0)

    def _map_metas(self) -> mmap.mmap | bool:
        """The two meta pages mapped, once they prove the layout :meth:`last_pgno` reads
        (LMDB 0.9's, 64-bit); False, and LMDB asked for good, when they do not. Proof, once
        per open, in the first write txn (under LMDB's writer lock: no commit moves them):
        each page's head is as that layout has it (:func:`_shows_layout`; ``psize`` is
        env.stat()'s), and the ``last_pgno`` and txn id read are ``env.info()``'s."""
        held, psize, info = self.held, self.psize, self.info
        if held is None or psize <= 0 or info is None:
            return False
        try:
            metas = mmap.mmap(held, 2 * psize, mmap.MAP_SHARED, mmap.PROT_READ)
        except (OSError, ValueError):  # a file shorter than two pages, no mmap here
            return False
        try:
            if _shows_layout(metas, 0, 0, psize) and _shows_layout(metas, psize, 1, psize):
                _, last0, txnid0 = _META_TAIL.unpack_from(metas, _PAGEHDRSZ)
                _, last1, txnid1 = _META_TAIL.unpack_from(metas, psize + _PAGEHDRSZ)
                read = (last1, txnid1) if txnid0 < txnid1 else (last0, txnid0)
                now = info()
                if read == (int(now["last_pgno"]), int(now["last_txnid"])):
                    return metas
        except BaseException:  # env.info()'s failure: the map is let go, the error raised
            metas.close()
            raise
        metas.close()
        return False

    def close(self) -> None:
        """Close the held descriptor (in the opening process). Each step may run again
        (Env._let_go's loop): the map is forgotten only once closed (closing a closed map
        does nothing); taken into a local first, an interrupt (a signal handler's exception)
        landing on ``isinstance``'s return left it, with the descriptor it holds, to that
        exception's traceback, a cycle only the collector frees (intr88). Each descriptor
        is forgotten just before its own close: both forgotten first, one landing on the
        held one's close's return left the cover's own write descriptor in a local only,
        open for the process's life (left90)."""
        metas = self.metas
        if isinstance(metas, mmap.mmap):
            metas.close()
        self.metas = self.info = None
        fd, held = self.fd, self.held
        if fd is not None and fd != held:  # the cover's own (cover: nothing held writable)
            self.fd = None
            os.close(fd)
        self.fd = self.held = None
        if held is not None:
            os.close(held)
