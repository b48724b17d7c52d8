"""The state of the process's registry of open LMDB environments (:mod:`cpstore.store
.lmdb_registry`, its only user): the maps of open environments (by path, data file and
folder), the registry lock, compaction's reservations, the environments a close left open;
the looks that find an environment in them, its forgetting, and their reset in a fork()
child. Opening, closing and compaction's reservation are the registry's own.
"""

from __future__ import annotations

import os
from threading import Lock, get_ident

from cpstore.errors import ForkError
from cpstore.store.lmdb_env import Env
from cpstore.store.lmdb_identity import file_of as _file_of
from cpstore.store.lmdb_identity import same_folder as _same_folder
from cpstore.store.reentry import OwnedLock

__all__ = ["LeftOpenClose"]  # and the registry's own private names, imported there only

_REGISTRY: dict[str, Env] = {}
#: The same environments by their data file's (st_dev, st_ino): a real path does not name a
#: file uniquely (a bind mount, a folder renamed while open), and a second environment of
#: one file would drop the first's LMDB locks when it closes (its inode is held meanwhile).
_BY_FILE: dict[tuple[int, int], Env] = {}
Env.open_files = _BY_FILE  # an open of one of these refuses (lmdb_open.FileOpenHereError)
#: The same environments by the (st_dev, st_ino) of the folder LMDB opened (its holder
#: mark's descriptor holds it; none without a mark): the folder of ``lock.mdb``, which
#: a second environment there would share whatever its data file is (_in_folder).
_BY_FOLDER: dict[tuple[int, int], Env] = {}
#: Never taken twice by a thread: a signal handler's or finaliser's open inside an open or
#: close waited for its own thread for good, and would see the registry mid-update (a
#: half-made env, a closing one still registered). Refused there (OwnedLock.refuse); a
#: close drops its handle only (_drop_nested).
_REGISTRY_LOCK = OwnedLock()
#: Paths (and data files) this process is compacting (reserved_for_compact): opens refuse.
_COMPACTING: set[str | tuple[int, int]] = set()
#: Environments a close left open (release_env), until closed: while it is empty (nearly
#: always) an open does not look for one (_close_left_open), not even a stat.
_LEFT_OPEN: set[Env] = set()


class LeftOpenClose:
    """A close under way of an environment whose last handle was dropped: a user's close
    (lmdb_registry.release_env, from the drop to its end) or the registry's close of one a
    close left open (_close_left_open: ``handle``, it took a handle of its own). The
    thread running it, and ``done``: a lock held from the start, let go (one C call, no
    landing for a signal's handler before it) once the close ended (the environment
    closed, or left open: a txn still running, a new handle). Not an Event: its ``set``
    is Python, and an interrupt landing at its start left it unset, so a look waited out
    its whole bound (registry102)."""

    __slots__ = ("done", "handle", "thread")

    def __init__(self, handle: bool = False) -> None:
        self.thread = get_ident()
        self.handle = handle
        self.done = Lock()
        self.done.acquire()

    def ended(self) -> bool:
        """Whether the close ended (a waiter holds ``done`` for a moment: not ended then)."""
        return not self.done.locked()

    def wait(self, timeout: float) -> bool:
        """Wait at most ``timeout`` seconds for the close's end; whether it ended. The
        timed take and the keeping of its answer are one C call (map, extend): an
        interrupt landing on a bare take's return kept ``done`` held, and every other
        look at the close waited out its bound."""
        took: list[bool] = []
        try:
            took.extend(map(self.done.acquire, (True,), (timeout,)))
        finally:
            if took and took[0]:
                self.done.release()
        return bool(took) and took[0]


#: The closes under way (LeftOpenClose), by environment: a look of another thread at the
#: store meanwhile waits for the close's outcome instead of answering from its middle
#: (registry100: the registry's own closes; registry102: a user's). The handle a
#: ``handle`` close takes is no user's (_after_fork_in_child).
_CLOSING_LEFT: dict[Env, LeftOpenClose] = {}
#: Environments opened on the file of one already open (its data.mdb swapped in between
#: the open's own check and LMDB's open; a renamed folder is caught by that check):
#: never closed, as LMDB's close would clear this process's reader slots in that file
#: and drop its locks on it.
_STRANDED: list[Env] = []


def _after_fork_in_child() -> None:
    """A fork() child starts with a free registry lock and no compaction reservation:
    the thread that held the one or made the other (an open or close under way, a
    compact) is not in the child, so its first open would hang forever or be refused
    that store for its whole life. Every entry stays, no process's (pid 0: a descendant
    given an exited opener's pid took them, review92), refused there (ForkError); a
    half-made one (the open under way) is not in it, never closed in the child."""
    # Made free outright (as threading's own locks), not released when ``locked()``: an
    # acquiring thread sets that flag only once it holds the GIL again, so a parent's thread
    # woken in its blocking acquire had the lock, the flag clear: the child hung (review81).
    _REGISTRY_LOCK.after_fork()
    for env in {*_REGISTRY.values(), *_BY_FILE.values(), *_BY_FOLDER.values(), *_STRANDED}:
        env.pid = 0  # _LEFT_OPEN's and _CLOSING_LEFT's are registered
    _COMPACTING.clear()
    _LEFT_OPEN.clear()
    closing = {env for env, close in _CLOSING_LEFT.items() if close.handle}
    _CLOSING_LEFT.clear()
    # One no handle holds (a close left it open, or a close under way) is forgotten: the
    # child may open the store itself, as beside a half-made one (audit49). So is one whose
    # only handle is _close_left_open's own: the child was refused it for life (audit50).
    for env in {*_REGISTRY.values(), *_BY_FILE.values()}:
        if not env.handles or (env.handles == 1 and env in closing):
            _unregister(env)


os.register_at_fork(after_in_child=_after_fork_in_child)


def _registered(key: str) -> tuple[Env | None, tuple[int, int] | None]:
    """(the environment of ``key``'s data file, that file's identity): by the key while
    ``key`` still names its folder (it may have been renamed away, another store put at
    ``key``), or else by the file (another path to it). Under the registry lock. The
    identity is of the file at ``key`` now: not the environment's when its data.mdb was
    replaced in place (_acquire refuses that)."""
    env, file_id = _REGISTRY.get(key), _file_of(key)
    if env is not None and (env.file_id == file_id or _same_folder(key, env)):
        return env, file_id
    env = None if file_id is None else _BY_FILE.get(file_id)
    return (_in_folder(key) if env is None else env), file_id


def _in_folder(key: str) -> Env | None:
    """The environment this process opened in ``key``'s folder, found by the folder when
    neither the key nor the data file finds it: the folder renamed to ``key`` after its
    data.mdb was replaced or removed ("mv a t", a new data.mdb in t). A second
    environment there would share its ``lock.mdb`` (LMDB's second open in one process
    resets the lock table, and the two files' commits set one txn id: a new handle did not
    see its own acknowledged checkpoint), so _acquire refuses it, as for the key."""
    try:
        st = os.stat(key)
    except (OSError, ValueError):
        return None
    env = _BY_FOLDER.get((st.st_dev, st.st_ino))
    # Not a parent's before fork(): this child closed its mark (the folder may be gone
    # and its inode reused), never uses it, and holds none of its locks.
    return env if env is not None and env.pid == os.getpid() else None


def _shared(key: str, twin: Env) -> Env:
    """``twin``, the environment this process has open on ``key``'s data file; ForkError
    for one inherited through fork(): it must not be reused or closed here, and py-lmdb
    refuses to open the same files again in this process."""
    if twin.pid != os.getpid():
        raise ForkError(
            "the store was opened before fork(); open it only after fork() "
            "(or use the spawn start method)",
            where=key,
            expected="the process that opened it",
            got=f"pid {os.getpid()}",
        )
    return twin


def _unregister(env: Env) -> None:
    """Forget ``env`` in every map of the registry (under the registry lock)."""
    if _REGISTRY.get(env.path) is env:
        del _REGISTRY[env.path]
    if env.file_id is not None and _BY_FILE.get(env.file_id) is env:
        del _BY_FILE[env.file_id]
    # By identity, not its mark's descriptor (a fork() child closed that one).
    for folder_id in [at for at, there in _BY_FOLDER.items() if there is env]:
        del _BY_FOLDER[folder_id]
    _LEFT_OPEN.discard(env)  # last: a landing before leaves it to the next open (left93)
