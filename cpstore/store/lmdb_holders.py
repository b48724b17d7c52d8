"""Which processes hold a store open, and whether any of them is of an older release.

A layout upgrade (docs/store.md, "Store layout versions") is safe only if no
process of an older cpstore release has the store open: such a process read
the format record once, at its open, and goes on reading and writing the
older layout — its gc cannot see what the new layout stores, and sweeps what
a new head still reaches. LMDB's own liveness lock says *who* has the
environment open (every process holds a POSIX read lock on byte 0 of
``lock.mdb`` while it does, and ``/proc/locks`` names its pid); this module
adds the other half, *which release*: every process of this release (and
later ones) holds an open-file-description lock on the store folder at byte
offset ``layout << 32 | pid`` (``layout``: the newest store layout the release
writes), from before its LMDB open until after its close. A pid holding
LMDB's lock (or, a second witness, mapping the store's data file in
``/proc/<pid>/maps``) without a mark for the layout being upgraded to (or a
newer one) is an older release (or another LMDB program), and the upgrade
refuses to run beside it. Devices are matched as ``/proc`` names them, read
from this process's own mapping of the data file (``stat`` may give another
number, e.g. on btrfs subvolumes).

OFD locks, not POSIX ones, for the mark: closing any descriptor of a file
drops a process's POSIX locks on it, and any ``os.listdir`` of the folder
would. ``/proc/locks`` shows an OFD lock's owner as pid -1, hence the pid in
the offset (pids stay below 2**22 on Linux). Linux only: where ``/proc/locks``
or OFD locks are missing the check cannot tell, and the documented rule (stop
older processes first) is all there is.
"""

from __future__ import annotations

import fcntl
import operator
import os
import struct
from collections import deque
from collections.abc import Callable, Iterable
from contextlib import suppress
from itertools import starmap
from typing import Any

from cpstore.errors import StoreError
from cpstore.store.lmdb_open import (
    FORK_CLOSED_FDS,
    FORK_GUARD,
    PROCESS,
    open_into,
    release_folders,
)

__all__ = ["HolderMark", "older_holders", "refuse_beside_older_holders"]

#: fcntl(2) ``F_OFD_SETLK`` (Linux >= 3.15); Python exposes it from 3.9 on Linux.
_F_OFD_SETLK: int | None = getattr(fcntl, "F_OFD_SETLK", None)
_PROC_LOCKS = "/proc/locks"
#: Reads of /proc/locks a check unites. The kernel builds the file a page at a time
#: and locks come and go between pages: when one listed before a page boundary is
#: dropped meanwhile, the next page starts a line late and that line is missing from
#: the read (seen with lock churn beside ~4 KB of /proc/locks: up to ~1 read in 35
#: missed a holder at the boundary). A holder is missed only if every read skips it;
#: no read is a snapshot, so this lowers the odds (~p**8), it does not remove them.
_READS = 8


class HolderMark:
    """This process's mark on a store folder: held while its environment is open."""

    # Slots: ``made_in`` as one more instance attribute cost a fresh open ~900
    # instructions (its dict, cold; benchmarks/ir_fresh.py).
    __slots__ = ("fd", "made_in")

    def __init__(self, folder: str, layout: int) -> None:
        self.fd: int | None = None
        if _F_OFD_SETLK is None:
            return
        # The descriptor, kept as it is opened (map opens and the loop's step stores, with
        # no call between: no landing) and closed on every way out but the mark's: an
        # interrupt (a signal handler's exception) landing on a bare open's return, or
        # anywhere after it before the mark held it, leaked it, with its lock (left86).
        fd: int | None = None
        try:
            with FORK_GUARD:  # a fork() meanwhile waits: a child never keeps an unlisted mark
                for fd in map(os.open, (folder,), (os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC,)):
                    FORK_CLOSED_FDS.add(fd)
                    # struct flock: l_type, l_whence, l_start, l_len, l_pid (0 for OFD locks).
                    # The process whose descriptor ``fd`` names (:meth:`_drop`; set
                    # before ``fd`` is, which alone makes the mark's close read it):
                    # lmdb_open.PROCESS, not the pid, which a descendant may get again.
                    self.made_in = PROCESS[0]
                    at = _offset(layout, os.getpid())
                    lock = struct.pack("hhqqi", fcntl.F_RDLCK, os.SEEK_SET, at, 1, 0)
                    fcntl.fcntl(fd, _F_OFD_SETLK, lock)  # never waits (SETLK)
        except OSError:
            # No folder yet (the open makes it), not readable, or a file system without
            # locks: no mark, as without /proc.
            got, late = [fd], None
            while got:  # until closed: an interrupt landing in the close caught, raised after
                try:
                    release_folders(got)
                except BaseException as exc:
                    late = exc
            if late is not None:
                raise late from None
            return
        except BaseException:
            got = [fd]
            while got:  # until closed: a second interrupt landing in the close caught (left86)
                try:
                    release_folders(got)
                except BaseException:
                    continue
            raise
        self.fd = fd  # no call after the try (its last, the guard's release): no landing

    def folder(self, default: str) -> str:
        """The marked folder by this descriptor (``/proc/self/fd``: the one LMDB opened,
        whatever is renamed since); ``default`` without a mark or ``/proc``."""
        at = f"/proc/self/fd/{self.fd}"
        return at if self.fd is not None and os.path.isdir(at) else default

    def close(self) -> None:
        """Drop the mark (closing the only descriptor of its file description)."""
        late: BaseException | None = None
        # Until dropped (the descriptor is ``fd`` until the one call closing it): each
        # interrupt (a signal handler's exception) landing in the drop caught, raised after.
        while self.fd is not None:
            try:
                self._drop()
            except BaseException as exc:
                late = exc
        if late is not None:
            raise late

    def _drop(self) -> None:
        with FORK_GUARD:  # a fork() between discard and close would keep the mark
            fd = self.fd
            # None, or a mark carried into a fork() child: the child closed its descriptor
            # (FORK_CLOSED_FDS) and its next open took that number, listed again when it
            # was another mark or creation lock; told by that listing, the child's close
            # of the parent's mark closed it, and its lock went (left90, as review89 for
            # CreationLock): forgotten there, never closed. Told by lmdb_open.PROCESS: a
            # descendant forked after this process exited may have its pid (review92).
            if fd is None or self.made_in is not PROCESS[0] or fd not in FORK_CLOSED_FDS:
                self.fd = None
                return
            # Forgotten, let go and closed in one C call (starmap calls each, no bytecode
            # between): an interrupt landing on the discard's return skipped the close, and
            # the descriptor and its mark stayed for the process's life (left86).
            with suppress(OSError):  # closed all the same (Linux frees the number)
                _consume(
                    starmap(
                        _call,
                        (
                            (FORK_CLOSED_FDS.discard, fd),
                            (setattr, self, "fd", None),
                            (os.close, fd),
                        ),
                    )
                )


_consume: Callable[[Iterable[Any]], None] = deque(maxlen=0).extend
_call: Callable[..., Any] = operator.call


def _offset(layout: int, pid: int) -> int:
    return layout << 32 | pid


def _device(path: str, kernel_dev: str | None = None) -> tuple[str, int] | None:
    """(``/proc/locks``'s "major:minor", inode) of ``path``, or None if it is missing.

    ``kernel_dev``: the device as the kernel names it in ``/proc`` (see
    :func:`_kernel_device`), which ``stat`` may not give (btrfs subvolumes).
    """
    try:
        st = os.stat(path)
    except OSError:
        return None
    if kernel_dev is None:
        kernel_dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}"
    return kernel_dev, st.st_ino


def _read_proc(path: str) -> str | None:
    """The text of a ``/proc`` file, or None when it cannot be read (gone, not ours)."""
    # Kept as it is opened (open_into), inside the try that closes it: an interrupt (a
    # signal handler's exception) landing on a bare open's return leaked the descriptor
    # (intr88).
    fds: list[int] = []
    try:
        fd = open_into(fds, path, os.O_RDONLY | os.O_CLOEXEC)
        chunks: list[bytes] = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
    except OSError:
        return None
    finally:
        if fds:
            os.close(fds[0])
    return b"".join(chunks).decode("ascii", "replace")


def _maps_line(text: str, inode: int, path: str) -> str | None:
    """The device field of a mapping of ``path`` (inode ``inode``) in a maps text."""
    for line in text.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[4] == str(inode) and fields[5] == path:
            return fields[3]
    return None


def _kernel_device(data: str) -> str | None:
    """The device of ``data`` (this store's data.mdb, which this process maps) as
    ``/proc`` names it, or None when this process does not map it."""
    try:
        inode = os.stat(data).st_ino
        real = os.path.realpath(data)
    except (OSError, ValueError):
        return None
    text = _read_proc("/proc/self/maps")
    return None if text is None else _maps_line(text, inode, real)


def _mapping_pids(device: str, inode: int) -> set[int]:
    """Pids whose ``/proc/<pid>/maps`` maps ``device``:``inode`` (those this user may read).

    Every process with an LMDB environment of the store open maps its data file,
    the older releases' included: a second witness beside ``/proc/locks``, read
    the same racy way (a page at a time) but with independent odds of a skip.
    """
    found: set[int] = set()
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return found
    needle = f" {device} {inode} "
    for pid in pids:
        text = _read_proc(f"/proc/{pid}/maps")
        if text is not None and needle in text:
            found.add(pid)
    return found


def older_holders(folder: str, layout: int) -> list[int] | None:
    """Pids holding ``folder``'s store open (LMDB's liveness lock, or a mapping of its
    data file) without the mark of a release writing ``layout`` or newer (this process
    excluded), sorted; None when this system cannot say."""
    data = os.path.join(folder, "data.mdb")
    kernel_dev = _kernel_device(data)
    lock_file = _device(os.path.join(folder, "lock.mdb"), kernel_dev)
    marked_file = _device(folder, kernel_dev)
    data_file = _device(data, kernel_dev)
    if lock_file is None or marked_file is None or data_file is None or _F_OFD_SETLK is None:
        return None
    lines: list[str] = []
    try:
        for _ in range(_READS):  # the union of a few reads (_READS says why)
            with open(_PROC_LOCKS, encoding="ascii", errors="replace") as f:
                lines += f.read().splitlines()
    except OSError:
        return None
    holding: set[int] = set()
    marked: set[int] = set()
    for line in lines:
        fields = line.split()
        if "->" in fields:  # a waiter on a lock (" -> " lines): holds nothing yet
            continue
        try:
            kind, pid, where, start = fields[1], int(fields[4]), fields[5], fields[6]
        except (IndexError, ValueError):
            continue
        major_minor, _, inode = where.rpartition(":")
        try:
            at = (major_minor, int(inode))
        except ValueError:
            continue
        if at == lock_file and kind == "POSIX" and start == "0":
            holding.add(pid)
        elif at == marked_file and kind == "OFDLCK" and start.isdigit():
            offset = int(start)
            if offset >> 32 >= layout:
                marked.add(offset & 0xFFFFFFFF)
    holding |= _mapping_pids(*data_file)
    holding.discard(os.getpid())
    return sorted(holding - marked)


def refuse_beside_older_holders(
    folder: str, found: int, wanted: int, *, where: str | None = None
) -> None:
    """Raise StoreError when upgrading layout ``found`` to ``wanted`` could harm a
    process of an older release that holds the store open (module docstring).
    ``where``: the store's name in the error (``folder`` may be a ``/proc/self/fd`` one)."""
    older = older_holders(folder, wanted)
    if not older:
        return
    raise StoreError(
        f"this store is at layout {found} and this release upgrades it to layout "
        f"{wanted} at its first writable open, but process(es) of an older cpstore "
        "release (or another LMDB program) hold it open and would go on using the old "
        "layout: stop them, then open it again",
        where=folder if where is None else where,
        expected="no other process of an older release holding the store",
        got="pid " + ", ".join(str(p) for p in older),
    )
