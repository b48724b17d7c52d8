"""Which file and folder a store path names, for the registry of open LMDB environments
(:mod:`cpstore.store.lmdb_registry`): the registry's key (``canonical``), a data file's and
an open environment's folder's (st_dev, st_ino). No registry state: plain looks at the disk.
"""

from __future__ import annotations

import os
from stat import S_ISLNK

from cpstore.store.lmdb_env import Env

__all__ = ["canonical", "file_of", "folder_of", "same_folder"]


def file_of(folder: str) -> tuple[int, int] | None:
    """(st_dev, st_ino) of ``folder``'s data.mdb; None without one."""
    try:
        st = os.stat(os.path.join(folder, "data.mdb"))
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def folder_of(env: Env) -> tuple[int, int] | None:
    """(st_dev, st_ino) of the folder ``env`` opened, by its holder mark's descriptor
    (None without a mark: no OFD locks, or the folder was not readable)."""
    mark = env._mark
    fd = None if mark is None else mark.fd
    if fd is None:
        return None
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def same_folder(key: str, env: Env) -> bool:
    """Whether ``key`` names the folder ``env`` opened (its data.mdb replaced in place, not
    renamed away: a second environment there would share its lock file, which LMDB's
    second open in one process resets under the first); True where it cannot tell (no
    holder mark, or a parent's environment in a fork() child, which closed the mark).
    Told by the mark's descriptor itself (fstat), so also without /proc."""
    there = folder_of(env) if env.pid == os.getpid() else None
    try:
        here = os.stat(key)
    except OSError:
        return False
    return there is None or (here.st_dev, here.st_ino) == there


def canonical(path: str) -> str:
    """``os.path.realpath(path)``: the registry's key for a store folder.

    An absolute, normalised path (no ``.``, ``..``, doubled or trailing slash, not
    ``//``-rooted) none of whose components is a symbolic link is its own real path.
    That is checked here with one ``lstat`` per component, as ``realpath`` does, in
    one loop instead of ``realpath``'s ~20 calls (a fresh process's open pays each
    cold, ~25 us in all); every other path (relative, a link, a missing component)
    is ``realpath``'s own answer.
    """
    if path[:1] == "/" and path[:2] != "//" and os.path.normpath(path) == path:
        at = 0
        try:
            while True:
                at = path.find("/", at + 1)
                if S_ISLNK(os.lstat(path if at < 0 else path[:at]).st_mode):
                    break
                if at < 0:
                    return path
        except (OSError, ValueError):
            pass  # missing, unreadable, a NUL: realpath says what it says
    return os.path.realpath(path)
