"""The process's registry of open LMDB environments: one :class:`Env` per data file.

py-lmdb refuses a second open of the same files in one process, and LMDB's fcntl locks belong
to the process, so every store handle on a path shares one environment
(:mod:`cpstore.store.lmdb_env`); the last handle closes it. The maps, the lock and the
looks at them are :mod:`cpstore.store.lmdb_registry_state`'s.
"""

from __future__ import annotations

import gc
import os
import time
import warnings
from collections.abc import Iterator
from contextlib import nullcontext, suppress
from threading import Thread, get_ident
from typing import cast

from cpstore.errors import InvalidInputError, StoreError
from cpstore.native.kept import kept_contextmanager
from cpstore.store import lmdb_txns
from cpstore.store.lmdb_env import Env
from cpstore.store.lmdb_identity import canonical
from cpstore.store.lmdb_identity import file_of as _file_of
from cpstore.store.lmdb_identity import folder_of as _folder_of
from cpstore.store.lmdb_open import (
    EnvOptions,
    FileOpenHereError,
    FolderBusyError,
    lock_folder,
    pin_folder,
    release_folders,
    unlock_folder,
)
from cpstore.store.lmdb_registry_state import (
    _BY_FILE,
    _BY_FOLDER,
    _CLOSING_LEFT,
    _COMPACTING,
    _LEFT_OPEN,
    _REGISTRY,
    _REGISTRY_LOCK,
    _STRANDED,
    LeftOpenClose,
    _in_folder,
    _registered,
    _shared,
    _unregister,
)
from cpstore.store.lmdb_txns import take_write_lock

__all__ = [
    "acquire_env",
    "canonical",
    "is_open_here",
    "pinned_for_compact",
    "registry_settled",
    "release_env",
    "reserved_for_compact",
]


def acquire_env(path: str, options: EnvOptions) -> Env:
    """The process's :class:`Env` for ``path``, opened on first use.

    An open never waits for a folder's creation lock while it holds the registry lock:
    compact holds that lock (a folder renamed to ``path`` after the registry looked) and
    its verify of its copy opens through this registry. Found busy, the open lets the
    registry lock go, waits for the creation lock at ``path`` without it, and looks again
    holding the lock it won: the open (and a layout upgrade) uses it when ``path`` still
    names that folder (Env), so lock churn cannot refuse it a second time.
    """
    _REGISTRY_LOCK.refuse(path)
    key, me = canonical(path), get_ident()
    _close_left_open(key)  # another mode or durability may open it then
    won: int | None = None
    # The env whose handle _acquire counted, kept with no landing between (a Python return):
    # an interrupt landing after (the registry lock's release, a won lock's) left it with a
    # handle nobody held, open for the process's life (left86). Dropped on the way out.
    taken: list[Env | None] = [None]
    try:
        try:
            while True:
                try:
                    with _REGISTRY_LOCK:  # held here, not in _acquire: see ``taken``
                        env = taken[0] = _acquire(key, options, won)
                    return env
                except FolderBusyError:
                    pass
                # Forgotten before it is closed: an interrupt landing after the close must
                # not make the finally close the number again (another thread's file by
                # then); ``held`` says what is left open when one lands in the release.
                held, won = [won], None
                late: BaseException | None = None
                while held:  # until closed: each interrupt landing in it caught, raised after
                    try:
                        release_folders(held)
                    except BaseException as exc:
                        late = exc
                if late is not None:
                    raise late
                _REGISTRY_LOCK.beside[me] = True  # a handler's open here would wait for ``won``
                won = lock_folder(key, exclusive=not options.readonly)  # waits: no registry lock
        finally:
            _REGISTRY_LOCK.beside[me] = (
                False  # first, and no call: no landing before ``won``'s release
            )
            if won is not None:  # no call otherwise: no landing after _acquire's return
                # Until released: an interrupt at its start left the lock held (review85), a
                # second one at the start of the release tried again too (left86).
                going: list[int | None] = [won]
                last: BaseException | None = None
                while going:
                    try:
                        release_folders(going)
                    except BaseException as exc:
                        last = exc
                if last is not None:
                    raise last
    except BaseException as exc:
        # Its handle, dropped (the last closes it): until ``taken`` says so, each interrupt
        # landing before the drop caught (release_env clears it as it drops the handle).
        while taken[0] is not None:
            try:
                release_env(taken[0], exc, taken=taken)
            except BaseException:
                continue
        raise


def _acquire(key: str, options: EnvOptions, won: int | None = None) -> Env:
    """acquire_env's look and open, under the registry lock (the caller's: an interrupt
    landing on its release is the caller's to undo, the handle counted here)."""
    env, file_id = _registered(key)
    if env is not None:
        _shared(key, env)  # ForkError for one inherited through fork()
    if env is not None and env.file_id != file_id:  # _same_folder's: never shared
        # Its LMDB works on a file no longer at ``key`` (a new handle's writes would be
        # acknowledged and lost), and a second environment would share its lock file.
        raise StoreError(
            "this process has the store here open on a data file no longer at this "
            "path (data.mdb replaced or removed while open, or the folder renamed "
            "where the open cannot tell): close every handle of it here, then open again",
            where=key,
            expected=f"data.mdb {env.file_id}",
            got=f"data.mdb {file_id}",
        )
    if env is None:
        if key in _COMPACTING or (file_id is not None and file_id in _COMPACTING):
            # Never wait here: compact's own verify of its copy opens a store
            # through this registry while it holds the folder's creation lock.
            raise StoreError(
                "this process is compacting the store; open it after compact returns",
                where=key,
            )
        env = _open_new(key, options, won)
    if env.options.readonly != options.readonly:
        raise StoreError(
            "the store is already open in this process with another mode",
            where=key,
            expected=f"readonly={env.options.readonly}",
            got=f"readonly={options.readonly}",
        )
    if env.options.sync != options.sync and not options.readonly:
        # MDB_NOSYNC is a flag of the one LMDB environment handle this process has for
        # the path: "none" beside "sync"/"batched" would silently weaken (or strengthen)
        # the other handle's commits.
        raise StoreError(
            "the store is already open in this process with another durability",
            where=key,
            expected='durability="none"'
            if not env.options.sync
            else 'durability="sync" or "batched"',
            got='durability="none"' if not options.sync else 'durability="sync" or "batched"',
        )
    env.handles += 1
    return env


def _open_new(key: str, options: EnvOptions, won: int | None = None) -> Env:
    """Open and register the environment of ``key`` (under the registry lock), or, when
    its data file is one an environment of this process has open already (its folder
    was renamed to ``key`` after :func:`_registered` looked), that environment. The
    open itself checks, on the folder it then opens (lmdb_open.pin_folder): LMDB must
    never open that file a second time (FileOpenHereError says why)."""
    env: Env | None = None
    try:
        try:  # ``won``: acquire_env's. Kept as made (map calls, the loop stores: no landing
            # between; one on a class call's return lost the Env, mark and held file: review87)
            for env in map(Env, (key,), (options,), (won,)):  # noqa: B007
                pass
        except FileOpenHereError as here:
            return _shared(key, _BY_FILE[here.file_id])
        env = cast(Env, env)
        at_key = _file_of(key)  # a new store's file exists now
        file_id = env.file_id or at_key  # the file LMDB opened (key's folder may be renamed)
        twin = None if file_id is None else _BY_FILE.get(file_id)
        if twin is not None:  # its data file swapped after the open's check
            _STRANDED.append(env)  # see _STRANDED: closing it would unprotect twin's reads
            return _shared(key, twin)
        if at_key == file_id:  # else key names another folder now: found by file only
            _REGISTRY[key] = env
        env.file_id = file_id
        if file_id is not None:
            _BY_FILE[file_id] = env
        folder_id = _folder_of(env)
        held = None if folder_id is None else _BY_FOLDER.get(folder_id)
        if folder_id is not None and (held is None or held.pid != env.pid):
            # A parent's before fork() is never this child's (_in_folder): it must not hide it.
            _BY_FOLDER[folder_id] = env
        return env
    except BaseException:
        # An interrupt landing before the handle is counted: the env, seen by no other thread
        # (the registry lock held), forgotten and closed (left open: left86). Never a stranded one.
        while env is not None and env not in _STRANDED and not env.closed:  # until closed:
            try:  # a second interrupt landing in the close caught (Env.close_quiesced's own)
                _unregister(env)
                env.close_quiesced()
            except BaseException:
                continue
        raise


_CLOSE_HERE = "close the store in this process before compacting it"


@kept_contextmanager  # contextlib's leaves a landing after the yield: see its own
def reserved_for_compact(path: str) -> Iterator[list[str | tuple[int, int]]]:
    """Refuse every open of ``path`` in this process while the block runs.

    Raises StoreError when this process has it open already. Decided under the
    registry lock, so no thread's open slips between the check and the
    compaction (LMDB's locks are per process: a thread's open would not
    conflict with the compaction's own lock on ``lock.mdb``). Yields what is
    reserved (:func:`pinned_for_compact` adds to it; all released at the end).
    """
    _REGISTRY_LOCK.refuse(path)
    key = canonical(path)
    _close_left_open(key)
    reserved: list[str | tuple[int, int]] = []
    try:
        # Inside the try: an interrupt landing on the update's return or the lock's release
        # left the reservation for good (every later open here refused as compacting).
        with _REGISTRY_LOCK:
            env, file_id = _registered(key)
            if (
                (env is not None and env.pid == os.getpid())
                or key in _COMPACTING
                or (file_id is not None and file_id in _COMPACTING)
            ):
                raise StoreError(_CLOSE_HERE, where=path)
            reserved[:] = [key] if file_id is None else [key, file_id]  # no call: no
            _COMPACTING.update(reserved)  # landing between the two
        yield reserved
    finally:
        if reserved:
            with _REGISTRY_LOCK:
                _COMPACTING.difference_update(reserved)


def _pin_for_compact(
    path: str, locked: int | None, reserved: list[str | tuple[int, int]]
) -> tuple[str, int | None]:
    """:func:`pinned_for_compact`'s work under the registry lock: the folder pinned, its
    data file refused if open here and else reserved."""
    try:
        folder, own = pin_folder(path, locked, _BY_FILE)
    except FileOpenHereError:
        # reserved_for_compact looked before a rename to ``path``, and this process's
        # own locks on lock.mdb would not conflict with compact's.
        raise StoreError(_CLOSE_HERE, where=path) from None
    file_id = _file_of(folder)
    # (no /proc: the path's file; a folder an environment here opened: its lock.mdb)
    if file_id is None or file_id in _BY_FILE or _in_folder(folder) is not None:
        unlock_folder(own)
        if file_id is None:  # the folder at the path when it was locked (or none)
            raise InvalidInputError("not a store folder (no data.mdb)", where=path)
        raise StoreError(_CLOSE_HERE, where=path)
    if file_id not in _COMPACTING:
        reserved.append(file_id)  # first: reserved_for_compact's end releases it
        _COMPACTING.add(file_id)
    return folder, own


@kept_contextmanager
def pinned_for_compact(
    path: str, locked: int | None, reserved: list[str | tuple[int, int]]
) -> Iterator[str | None]:
    """The folder compact's creation lock (``locked``) holds, pinned (lmdb_open.pin_folder),
    its data file refused if open here and else added to ``reserved`` (from
    :func:`reserved_for_compact`, released after the creation lock): an open of it by any
    name is refused at once instead of waiting for that lock while it holds the registry
    lock, which compact's verify of its copy needs (a deadlock). Yields None, holding
    nothing, when the registry lock is busy: an open may hold it while it waits for this
    very creation lock; the caller lets the lock go and takes it again.
    """
    _REGISTRY_LOCK.refuse(path)  # a timed take would not wait: the re-entrant lock is its own
    took: list[bool] = []
    try:
        # The timed take and the keeping of its answer are one C call (map calls acquire,
        # extend appends what it returned, no bytecode between): an interrupt (a signal
        # handler's exception) landing on a bare acquire's return lost the answer with
        # the lock held, and the next take of this thread (reserved_for_compact's end)
        # waited on itself for good, as did every open of the process.
        took.extend(map(_REGISTRY_LOCK.acquire, (True,), (0.05,)))
        if took[0]:
            folder, own = _pin_for_compact(path, locked, reserved)
    finally:
        if took and took[0]:
            _REGISTRY_LOCK.release()
    if not took[0]:
        yield None
        return
    try:
        yield folder
    finally:
        held = [own]
        late: BaseException | None = None
        while held:  # until released: each interrupt landing in it caught (release_folders)
            try:
                release_folders(held)
            except BaseException as exc:
                late = exc
        if late is not None:
            raise late


def registry_settled() -> None:
    """Wait until no thread of this process holds the registry lock (an open may hold it
    while it waits for a creation lock: call this without one)."""
    _REGISTRY_LOCK.refuse("the registry of open stores")  # else it returns at once: held here
    with _REGISTRY_LOCK:
        pass


def is_open_here(path: str) -> bool:
    """True when this process (not a parent before fork()) has ``path`` open."""
    _REGISTRY_LOCK.refuse(path)
    try:
        real = canonical(path)
    except (ValueError, OSError):  # a NUL byte, a loop: no store of ours is open there
        return False
    _close_left_open(real)  # left open, its txn ended: closed now (compact may run)
    with _REGISTRY_LOCK:
        env = _registered(real)[0]
        return env is not None and env.pid == os.getpid()


def release_env(
    env: Env, failed: BaseException | None = None, *, taken: list[Env | None] | None = None
) -> None:
    """Drop one handle; the last one closes the environment, unless another thread's txn
    of it did not end (Env.left_open: raised, or a note on ``failed``, the close's own
    error, which it does not hide). ``taken``: _close_left_open's note of the handle it
    took, cleared as the handle is dropped (with no point between where an interrupt
    can land), so its ``finally`` gives back a handle this call never dropped.

    The close proper runs under the registry lock: closing drops every POSIX lock this
    process holds on ``lock.mdb``, so an environment opened beside this one meanwhile
    would be left without LMDB's liveness and reader locks. Its wait for other threads'
    txns (Env.quiesced, up to 5 s) runs before, without the registry lock, the
    environment still registered: an open of any other store goes on meanwhile, and an
    open of this one shares it (a handle taken), which leaves it open (audit36).

    On a thread already inside an open or close (a signal handler's or finaliser's close,
    the registry lock its own): the handle is dropped at once, never waiting for that lock
    (_drop_nested)."""
    if _REGISTRY_LOCK._is_owned():  # type: ignore[attr-defined]
        _drop_nested(env, failed, taken)
        return
    # This close's entry in _CLOSING_LEFT, made as the last handle is dropped (none when
    # another close of the env is under way: _close_left_open's own calling this): a look
    # of another thread waits for its outcome, not answering from its middle (is_open_here
    # True, compact refused, an open refused "another mode"), and the finally publishes it
    # whatever lands (registry102).
    closing: list[LeftOpenClose] = []
    try:
        with _REGISTRY_LOCK:
            env.handles -= 1
            if taken is not None:
                taken[0] = None
            if env.handles > 0:
                return
            # Noted as left open from its last handle's drop until closed (_unregister
            # forgets it): an interrupt landing before the close ended left it open with no
            # handle, unnoted: "already open in this process" for good (left86). The next
            # open's _close_left_open closes it (a fork() child's: forgets it, left93).
            _LEFT_OPEN.add(env)
            other = _CLOSING_LEFT.get(env)
            if other is None or other.ended():
                closing.append(LeftOpenClose())
                _CLOSING_LEFT[env] = closing[0]  # no call: no landing before it
        if env.pid != os.getpid():  # a fork() child: closes nothing, waits for nothing
            with _REGISTRY_LOCK:
                if env.handles == 0:
                    _unregister(env)
            return
        # A wait run out while reads stay open collects garbage once (a reader or a kept view
        # dropped in a reference cycle holds its read until collected: the close gave up on a
        # read nothing alive held), then waits again only if that ended every read.
        wait, collected = True, False
        while True:
            quiesced = env.quiesced() if wait else nullcontext(False)
            with quiesced as quiet, _REGISTRY_LOCK:  # the env's locks, then the registry's
                if env.handles > 0 or env.closed:
                    _LEFT_OPEN.discard(env)  # in use again (its last close notes it again)
                    if env.handles == 0 and env.unsynced is not None:  # closed by another
                        if failed is None:  # thread's _close_left_open, its fsync failed: this
                            raise env.unsynced  # close's too (review87: it returned as clean)
                        failed.add_note(str(env.unsynced))
                    return  # opened again while the close waited (or closed by an earlier release)
                if not quiet and (collected or not env.reads_anywhere()):
                    left = env.left_open()  # left open and registered: an open of it shares it
                    if failed is None:
                        raise left
                    failed.add_note(str(left))
                    return
                if quiet:  # forgotten and closed, each interrupt landing in them caught, tried
                    # again until closed (one in _unregister left it forgotten and open: its
                    # descriptors leaked, and LMDB's open here again opened its file twice);
                    # the close's error, or the last one, raised
                    late: BaseException | None = None
                    while not env.closed:
                        try:
                            _unregister(env)
                            env.close_quiesced()
                        except BaseException as exc:
                            late = exc
                    if late is not None:
                        raise late
                    return
            gc.collect()  # the give-up path only, holding no lock: its finalisers may close stores
            collected = True
            wait = not env.reads_anywhere()
    finally:
        if closing:  # published: forgotten, then ``done`` let go (one C call, no landing
            # before it), each interrupt landing in the forgetting caught, the last raised
            lost: BaseException | None = None
            try:
                while True:
                    try:
                        if _CLOSING_LEFT.get(env) is closing[0]:
                            del _CLOSING_LEFT[env]
                        break
                    except BaseException as exc:
                        lost = exc
            finally:
                closing[0].done.release()
            if lost is not None:
                raise lost


def _drop_nested(env: Env, failed: BaseException | None, taken: list[Env | None] | None) -> None:
    """release_env on a thread holding the registry lock (a handler's or finaliser's close in its
    open or close): the handle dropped at once. The last one's env (the interrupted step may
    share it) synced (``none``), left open, and closed by a thread once the lock is free if idle
    (left to the path's next open, it kept its locks: others' compacts refused; review97)."""
    env.handles -= 1  # no call between: ``taken`` says whether it was dropped
    if taken is not None:
        taken[0] = None
    if env.handles > 0:
        return
    _LEFT_OPEN.add(env)
    if env.pid != os.getpid():
        return  # a fork() child's: its next open here forgets it
    try:
        if not (env.options.sync or env.options.readonly):
            env.sync()
    except StoreError as exc:
        if failed is None:
            raise
        failed.add_note(str(exc))
    finally:  # no daemon: the exit waits for the close (a RuntimeError: left as before)
        with suppress(RuntimeError):  # (at the exit, or no thread to be had)
            Thread(target=_close_left_open, args=(env.path,), daemon=False).start()


def _close_left_open(key: str) -> None:
    """Close ``key``'s environment when a close left it open (release_env: registered, no
    handle) and the txn that kept it open has ended since: an open with another mode or
    durability and a compact were refused "already open in this process" for ever after
    every handle was closed (audit49). Still in use: left as it is (an open shares it).

    Another thread's close of it under way (a user's last close, from its handle's drop
    to its end: registry102; the registry's own thread closing what a handler's close left
    open: _drop_nested, registry100), its outcome is waited for, at most about as long as
    that close may wait for txns (never on its own thread, nor inside this thread's write
    or read of it, which that close waits for): in its middle its own handle, or its wait
    for other threads' txns, had is_open_here say "open here" with no handle left, compact
    refuse and an open with another mode refuse "already open"."""
    if not _LEFT_OPEN:  # read without the lock: filled from a last handle's drop to its close
        return
    deadline: float | None = None
    while (pending := _close_left_open_once(key)) is not None:
        if deadline is None:  # that close's waits for txns (two at most) and its fsync
            deadline = time.monotonic() + 3 * lmdb_txns.CLOSE_WAIT_SECONDS
        if not pending.wait(max(0.0, deadline - time.monotonic())):
            return  # still under way: answered as it is (open)


def _close_left_open_once(key: str) -> LeftOpenClose | None:
    """_close_left_open's one look (and close): another thread's close of the environment
    when one is under way (nothing done then), else None."""
    # The env whose handle this close took, until release_env drops it: an interrupt (a
    # signal handler's exception) landing between the two (the registry lock's release,
    # release_env's first line) left the handle taken and the env open for good: every
    # later open with another mode or durability and every compact refused "already
    # open" (meta80). ``added``: the env this close put in _CLOSING_LEFT, with ``closing``
    # (made only then: every close made is registered, and published by the finally).
    taken: list[Env | None] = [None]
    added: Env | None = None
    closing: LeftOpenClose | None = None
    try:
        with _REGISTRY_LOCK:
            env = _registered(key)[0]
            if env is not None and not env.handles and env.pid != os.getpid():
                _unregister(env)  # a fork() child's, its close interrupted past the drop
            other = None if env is None else _CLOSING_LEFT.get(env)
            if (
                env is not None
                and other is not None
                and other.thread != get_ident()
                and not other.ended()
                and not env.writes_here()
                and not env.holds_read()
            ):
                return other  # checked before its handle: that close's, not a user's
            if env is None or env.handles > 0 or env.closed or env.pid != os.getpid():
                return None
            if env.reads_anywhere() or env.writes_here():  # this thread's write: its RLock
                return None  # (a handler's open inside it closed the env under that write; audit50)
            if not take_write_lock(env.write_lock, blocking=False):
                return None  # still in use (or another thread's release is closing it)
            env.write_lock.release()
            closing = LeftOpenClose(handle=True)
            added = env
            # First: a fork() child must never see the handle alone. No call between.
            _CLOSING_LEFT[env] = closing
            env.handles += 1  # this close's own handle, dropped by release_env
            taken[0] = env
        release_env(env, taken=taken)
    except StoreError as exc:  # release_env's: ``added`` is its env
        if added is not None and added.closed:  # closed, its ``none`` fsync failed: say so
            warnings.warn(_UNSYNCED.format(path=added.path, exc=exc), RuntimeWarning, 4)
        # else a txn began meanwhile: left open again, shared as before (audit50)
    finally:
        try:
            if taken[0] is not None:  # interrupted before release_env dropped it: left open
                with _REGISTRY_LOCK:  # as it was, for the next open's close to close
                    held, taken[0] = taken[0], None
                    if held is not None:
                        held.handles -= 1
        finally:
            if added is not None and closing is not None:  # published whatever lands
                late: BaseException | None = None
                try:
                    while True:
                        try:
                            if _CLOSING_LEFT.get(added) is closing:
                                del _CLOSING_LEFT[added]
                            break
                        except BaseException as exc:
                            late = exc
                finally:  # a waiter looks again at once (registry102)
                    closing.done.release()
                if late is not None:
                    raise late
    return None


#: What the close of an environment a close left open says when its fsync failed: the
#: commits of a ``none`` store since the first close's own sync may not be on disk.
_UNSYNCED = (
    "cpstore store {path}: closing the environment an earlier close left open, its fsync "
    "failed; checkpoints committed after that close may be lost if the system crashes: {exc}"
)
