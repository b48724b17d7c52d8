"""An interrupt (a signal handler's exception: Ctrl-C, a watchdog's alarm) landing anywhere
in the begin of a txn leaves nothing behind: not the thread's reader entry (which made
every later map resize of that thread refuse and another thread's resize, and a close,
wait for it in vain), not a read txn holding a reader slot, not a write txn holding LMDB's
writer lock. CPython runs a signal handler when a C call returns: the append of the
reader entry and the txn's bookkeeping were outside the try that undoes the begin.

A trace function raises KeyboardInterrupt at every point of the begin where CPython runs
a pending signal's handler (a function's start, a C call's return) in turn, and each time
the bookkeeping is checked."""

from __future__ import annotations

import dis
import fcntl
import functools
import gc
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Container, Iterator
from pathlib import Path
from threading import get_ident
from types import CodeType, FrameType
from typing import Any

import lmdb
import pytest
from trace_interrupts import a_signal_lands_at_entry

import cpstore
from cpstore.store import lmdb_open, lmdb_registry
from cpstore.store.lmdb_backend import Durability, LmdbBackend
from cpstore.store.lmdb_env import Env
from cpstore.store.maintenance import compact_store

#: The functions whose every opcode the sweep lands on.
_BEGIN = {"begin_read", "_begin", "attempt", "_enter_read", "_begin_write", "held_open"}


@functools.cache
def _after_calls(code: CodeType) -> frozenset[int]:
    """The offsets of ``code``'s instructions that follow a call, not inside an ``except``
    (or a ``finally`` run for an exception): an interrupt there is a second exception
    landing in the handling of a first, out of this test's scope (each undo step would
    need one of its own)."""
    after, handling, previous = set(), False, ""
    for ins in dis.get_instructions(code):
        handling = (handling or ins.opname == "PUSH_EXC_INFO") and previous not in _HANDLED
        if previous == "CALL" and not handling:
            after.add(ins.offset)
        previous = ins.opname
    return frozenset(after)


#: The instructions that end the handling of an exception.
_HANDLED = {"POP_EXCEPT", "RERAISE", "RAISE_VARARGS"}


def _interrupting(
    k: int,
    names: Container[str],
    *,
    qualified: bool = False,
    start_counts: Callable[[FrameType], bool] | None = None,
) -> tuple[Callable[..., Any], list[str]]:
    """A trace function raising KeyboardInterrupt at the k-th point, in a frame named in
    ``names``, where CPython runs a pending signal's handler: a frame's start, and the
    return of a call of a C function (not of a Python function: its return runs none).
    Where it landed. A frame's "call" event is a landing only where a signal can land
    (:func:`trace_interrupts.a_signal_lands_at_entry`: its start, a resumption after a
    plain ``yield``; not a resumption by ``throw``/``athrow`` or after ``await``).
    ``qualified``: frames are named by their qualified name (``HolderMark.close``);
    ``start_counts(frame)``: whether that frame's start is a landing swept (default: every
    one)."""
    seen, landed = [0], []
    called_python: set[int] = set()  # frames whose last call was of a Python function

    def trace(frame: FrameType, event: str, arg: object) -> Callable[..., Any] | None:
        if event == "call" and frame.f_back is not None:
            called_python.add(id(frame.f_back))  # its return is no landing point
        name = frame.f_code.co_qualname if qualified else frame.f_code.co_name
        if name not in names:
            return None
        frame.f_trace_opcodes = True
        at_landing = (
            event == "call"
            and a_signal_lands_at_entry(frame)
            and (start_counts is None or start_counts(frame))
        ) or (
            event == "opcode"
            and frame.f_lasti in _after_calls(frame.f_code)
            and id(frame) not in called_python
        )
        if at_landing:
            seen[0] += 1
            if seen[0] == k:
                landed.append(f"{name}@{frame.f_lasti}")
                raise KeyboardInterrupt(landed[0])
        if event == "opcode":
            called_python.discard(id(frame))
        return trace

    return trace, landed


def run_traced(
    trace: Callable[..., Any], call: Callable[[], Any], profile: Callable[..., Any] | None = None
) -> Any:
    """``call()`` with ``trace`` (and ``profile``) set and the collector off while traced:
    its result, None when a KeyboardInterrupt ended it."""
    gc.disable()  # collector off while hooked: tests/trace_interrupts.py
    if profile is not None:
        sys.setprofile(profile)
    sys.settrace(trace)
    try:
        return call()
    except KeyboardInterrupt:
        return None
    finally:
        sys.settrace(None)
        if profile is not None:
            sys.setprofile(None)
        gc.enable()


def kept_landing(trace: Callable[..., Any], call: Callable[[], Any]) -> KeyboardInterrupt | None:
    """``call()`` with ``trace`` set (the collector as the caller left it): the
    KeyboardInterrupt a landing raised, kept as a caller logging it (or a REPL's
    ``sys.last_value``) keeps it; None when ``call`` ran through."""
    sys.settrace(trace)
    try:
        call()
    except KeyboardInterrupt as exc:
        return exc
    finally:
        sys.settrace(None)
    return None


def close_interrupted(st: Any, k: int, names: Container[str]) -> list[str]:
    """``st.close()`` with a KeyboardInterrupt at its k-th landing in a frame named in
    ``names``; where it landed (empty: it ran through). The collector is left off (the
    caller turns it on again once it has looked)."""
    trace, landed = _interrupting(k, names)
    gc.disable()
    kept_landing(trace, st.close)
    return landed


def closes_interrupted(
    url: str, durability: Durability, names: Container[str]
) -> Iterator[tuple[Any, str]]:
    """For k = 1, 2, ... until a close runs through: a store of ``url`` opened, a checkpoint
    recorded and its close interrupted at the k-th landing in a frame named in ``names``
    (:func:`close_interrupted`); (the store, where it landed), the collector still off
    while the caller looks. Then, the collector on again and run, that checkpoint read
    back from a fresh open: acknowledged, never lost. The loop every close sweep runs."""
    k = 0
    while True:
        k += 1
        st = cpstore.open(url, durability=durability)
        cid = st.recorder(f"r{k}").checkpoint(0, {"k": k})  # queued when batched
        try:
            landed = close_interrupted(st, k, names)
            if not landed:
                return
            yield st, landed[0]
        finally:
            gc.enable()
        gc.collect()
        with cpstore.open(url) as again, again.read(cid) as cp:
            assert cp.state() == {"k": k}, landed  # acknowledged, never lost


def landing_at_start(qualname: str, call: Callable[[], Any]) -> bool:
    """Run ``call`` with a KeyboardInterrupt at the first start of a frame named
    ``qualname``; whether it landed (the exception dropped at once, so what only its
    traceback held is freed)."""
    landed: list[str] = []

    def trace(frame: FrameType, event: str, arg: object) -> Callable[..., Any] | None:
        if event == "call" and frame.f_code.co_qualname == qualname and not landed:
            landed.append(qualname)
            raise KeyboardInterrupt(f"{qualname}@0")
        return None

    return kept_landing(trace, call) is not None


def interrupted_at(
    k: int,
    names: Container[str],
    call: Callable[[], Any],
    *,
    qualified: bool = False,
    start_counts: Callable[[FrameType], bool] | None = None,
) -> list[str]:
    """Run ``call`` with a KeyboardInterrupt raised at its k-th landing in a frame named in
    ``names`` (:func:`_interrupting`, with its ``qualified`` and ``start_counts``), the
    collector off while traced; where it landed (empty: ``call`` ran through, its own
    result dropped). The loop every sweep runs."""
    trace, landed = _interrupting(k, names, qualified=qualified, start_counts=start_counts)
    run_traced(trace, call)
    return landed


def sweep_landings(
    interrupt: Callable[[int], list[str]],
    left_wrong: Callable[[], str | None],
    *,
    at_least: int,
) -> list[str]:
    """``interrupt(k)`` (a run interrupted at its k-th landing: where it landed) for k = 1,
    2, ... until a run goes through, garbage collected after each; after each landing
    ``left_wrong()`` says what it left wrong (None: nothing), the sweep stopping at the
    first. What was wrong, and "only n landings" when fewer than ``at_least``."""
    wrong: list[str] = []
    k = 0
    while True:
        k += 1
        landed = interrupt(k)
        gc.collect()
        if not landed:
            break
        why = left_wrong()
        if why is not None:
            wrong.append(f"{landed[0]}: {why}")
            break
        gc.collect()
    if k - 1 < at_least:
        wrong.append(f"only {k - 1} landings")
    return wrong


def take_creation_lock(path: Path, via: str) -> None:
    """Take the store folder's exclusive creation lock and let it go: by
    ``lmdb_open.creation_lock`` itself, or (``via="compact_store"``) by a compaction of
    the store, which takes it so."""
    if via == "compact_store":
        compact_store(path)
    else:
        with lmdb_open.creation_lock(str(path), exclusive=True):
            pass


def one_checkpoint(path: Path) -> str:
    """A store at ``path`` holding one checkpoint, closed, its garbage collected: its id."""
    with cpstore.open(path, durability="none") as st:
        cid: str = st.recorder("r").checkpoint(0, {"a": 1})
    gc.collect()
    return cid


def read_wrong(path: Path, cid: str) -> str | None:
    """What an open of ``path`` reads wrong at :func:`one_checkpoint`'s ``cid`` (None:
    its state)."""
    with cpstore.open(path, durability="none") as again, again.read(cid) as cp:
        state = cp.state()
        return None if state == {"a": 1} else f"read {state!r}"


class LockBlocker:
    """The folder's creation lock held by a descriptor of this process (:meth:`hold`)
    when an open starts, let go as the open starts to wait for it: while entered,
    ``lmdb_registry``'s ``lock_folder`` lets go of it first."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fds: list[int] = []
        self.real = lmdb_open.lock_folder

    def hold(self) -> None:
        fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(fd, fcntl.LOCK_EX)
        self.fds.append(fd)

    def let_go(self) -> bool:
        """Let go of the lock here (an open interrupted before it waited): whether it was
        still held."""
        held = bool(self.fds)
        while self.fds:
            os.close(self.fds.pop())  # the other holder lets go: a wait ends at once
        return held

    def _let_go_then_lock(self, key: str, *, exclusive: bool, wait: bool = True) -> Any:
        self.let_go()
        return self.real(key, exclusive=exclusive, wait=wait)

    def __enter__(self) -> LockBlocker:
        setattr(lmdb_registry, "lock_folder", self._let_go_then_lock)  # noqa: B010 (not exported)
        return self

    def __exit__(self, *exc: object) -> None:
        setattr(lmdb_registry, "lock_folder", self.real)  # noqa: B010
        self.let_go()


def fds_in(folder: Path) -> list[str]:
    """This process's descriptors open on ``folder`` or a file in it, sorted."""
    where, found = str(folder), []
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target == where or target.startswith(where + "/"):
            found.append(target)
    return sorted(found)


def folder_lock_free(path: Path) -> bool:
    """Whether ``path``'s creation lock (an exclusive flock on the folder) is free: a lock
    an interrupt left held makes every later open of the store wait forever."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # drops the flock taken here
    return True


def sweep_in_child(
    module: str, sweep: str, path: Path, *args: object, timeout: float = 240
) -> list[str]:
    """Run ``module.sweep(path, *args)`` (a sweep returning what each landing left wrong;
    ``args`` plain values, passed by their repr) in a child process with a time limit, for
    sweeps where a landing can hang the process: what it returned. A hang fails with what
    the child printed."""
    rest = "".join(f", {arg!r}" for arg in args)
    code = (
        "import sys, json; from pathlib import Path; "
        f"from {module} import {sweep}; "
        f"print(json.dumps({sweep}(Path(sys.argv[1]){rest})))"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, str(path)],
            check=False,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"the sweep hung: {exc.stdout!r}") from None
    assert done.returncode == 0, done.stderr[-3000:]
    result: list[str] = json.loads(done.stdout.splitlines()[-1])
    return result


def _open_txns_of_this_process(env: Env) -> list[str]:
    """LMDB's reader table lines of this process with a txn open (a txn id, not '-')."""
    lines = str(env.env.readers()).splitlines()[1:]
    return [ln for ln in lines if ln.split()[0] == str(os.getpid()) and ln.split()[2] != "-"]


def _sweep(env: Env, begin: Callable[[], Any], end: Callable[[Any], None]) -> int:
    """Interrupt ``begin`` at each call's return in turn until it runs through; after each
    interrupt nothing of the begin may be left. The number of landings."""
    k = 0
    while True:
        k += 1
        trace, landed = _interrupting(k, _BEGIN)
        got = run_traced(trace, begin)
        if not landed:
            end(got)
            return k - 1
        assert got is None, landed
        where = landed[0]
        assert get_ident() not in env._active, where  # before: the entry left
        assert _open_txns_of_this_process(env) == [], where  # no read txn left open
        _assert_writable(env, where)


def _assert_writable(env: Env, where: str) -> None:
    """Another thread can write: LMDB's writer lock is not held by a txn left open."""
    done = threading.Event()

    def write() -> None:
        env.write(lambda txn: txn.put(b"probe", b"1", db=env.dbs["meta"]))
        done.set()

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    thread.join(10)
    assert done.is_set(), f"a write txn left open holds the writer lock ({where})"


class _FullOnce:
    """The store's LMDB environment whose first read begin finds the reader table full
    (the begin then takes _begin, its attempt and held_open's reader check)."""

    def __init__(self, real: Any) -> None:
        self.real, self.full = real, True

    def begin(
        self, db: Any = None, parent: Any = None, write: bool = False, buffers: bool = False
    ) -> Any:
        # py-lmdb's signature: the store passes these positionally
        if not write and self.full:
            self.full = False
            raise lmdb.ReadersFullError("mdb_txn_begin: MDB_READERS_FULL (test)")
        return self.real.begin(db, parent, write, buffers)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


@pytest.fixture
def env(tmp_path: Path) -> Any:
    st = cpstore.open(str(tmp_path / "s"))
    st.recorder("r").checkpoint(0, {"a": 1})
    backend = st._backend
    assert isinstance(backend, LmdbBackend)
    yield backend.env
    st.close()


def test_an_interrupt_anywhere_in_a_read_begin_leaves_nothing(env: Env) -> None:
    assert _sweep(env, env.begin_read, env.end_read) >= 5


def test_an_interrupt_anywhere_in_a_read_begin_after_a_full_reader_table(env: Env) -> None:
    real = env.env

    def begin() -> Any:
        env.env = _FullOnce(real)
        try:
            return env.begin_read()
        finally:
            env.env = real

    assert _sweep(env, begin, env.end_read) >= 10


def test_an_interrupt_anywhere_in_a_write_begin_leaves_no_writer_lock(env: Env) -> None:
    def begin() -> Any:
        with env.write_lock:
            txn = env._begin_write()
        return txn

    def end(txn: Any) -> None:
        txn.abort()

    assert _sweep(env, begin, end) >= 2
