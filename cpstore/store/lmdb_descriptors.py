"""LMDB's own descriptors of a store's files, made close-on-exec once an open returns.

LMDB opens its data file (and lock file) without ``O_CLOEXEC``; :func:`close_on_exec`
sets the flag after the open. Moved out of :mod:`cpstore.store.lmdb_open` (damage98, to
keep that module under the size limit), which re-exports it.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["close_on_exec"]


def close_on_exec(env: Any, folder: str, data_id: tuple[int, int] | None = None) -> Any:
    """Set FD_CLOEXEC on every descriptor of this process open on ``folder``'s data or
    lock file (LMDB opens its data file without it: a program exec'd meanwhile, e.g.
    ``subprocess`` with ``close_fds=False`` or ``os.system``, would inherit it and could
    write the store or keep a compacted-away file alive). ``env``, returned: the LMDB
    environment just opened there; ``data_id``: the data file's (st_dev, st_ino) if known
    (then only the lock file is looked up by path).
    Found through ``/proc/self/fd`` (py-lmdb does not expose LMDB's descriptors); nothing
    without it. A program another thread execs between LMDB's open and this still
    inherits it (LMDB gives no way to open it close-on-exec)."""
    files = {data_id}
    # try/except, not ``with suppress(...)``: a suppress object and its two Python calls
    # per descriptor cost a fresh process's open ~40% of the scan (benchmarks/ir_fresh.py).
    # The data file's identity when the caller has it (the held descriptor's fstat of the
    # same pinned folder's data.mdb, just before): not looked up by path a second time.
    for name in ("data.mdb", "lock.mdb") if data_id is None else ("lock.mdb",):
        try:
            st = os.stat(os.path.join(folder, name))
        except (OSError, ValueError):
            continue
        files.add((st.st_dev, st.st_ino))
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return env
    inheritable, fstat = os.get_inheritable, os.fstat
    for name in fds:
        try:
            fd = int(name)
            if inheritable(fd) and ((st := fstat(fd)).st_dev, st.st_ino) in files:
                os.set_inheritable(fd, False)
        except (OSError, ValueError):
            pass  # listdir's own descriptor, closed by now
    return env
