"""review87: an interrupt (a signal handler's exception) landing in the creation lock's
``__enter__`` once the lock is taken (LMDB only: the folder's flock).

``creation_lock`` was a ``@contextmanager``: contextlib's ``__enter__`` calls ``next()``
on the generator, which takes the lock and yields; a landing on that C call's return
raised before the ``with`` block began, so no ``__exit__`` ran, and the suspended
generator, kept by the exception's traceback (``__enter__``'s frame), released the lock
only when that was freed. While the caller kept the exception (a REPL's
``sys.last_value``, an agent runtime logging it), the store's exclusive creation lock
stayed held: every open of the store, in this process or another, waited on it. Compact
takes it so, and so does a writable open upgrading an older layout."""

from __future__ import annotations

import gc
import inspect
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from test_begin_interrupted import (
    _after_calls,
    fds_in,
    kept_landing,
    one_checkpoint,
    take_creation_lock,
)

import cpstore
from cpstore.store import lmdb_open, lmdb_registry, lmdb_registry_state
from cpstore.store.maintenance import compact_store

_PROBE = (
    "import fcntl, os, sys\n"
    "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
    "try:\n"
    "    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
    "    print('free')\n"
    "except OSError:\n"
    "    print('held')\n"
)


def _folder_lock(path: Path) -> str:
    """Whether another process finds the folder's creation lock held."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, str(path)], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


_GEN = inspect.CO_GENERATOR


def _is_cm_of(frame: FrameType, name: str) -> bool:
    """Whether ``frame`` is the ``__enter__`` of ``name``'s context manager."""
    owner = frame.f_locals.get("self")
    gen = getattr(owner, "gen", None)
    if name == "creation_lock":
        return getattr(gen, "__name__", "") == name or isinstance(
            owner, getattr(lmdb_open, "CreationLock", ())
        )
    return getattr(gen, "__name__", "") == name


def _landing_in_enter(name: str) -> tuple[Callable[..., Any], list[str]]:
    """A trace function raising KeyboardInterrupt at the first point of ``name``'s
    ``__enter__`` where CPython runs a pending handler: a C function's return (a Python
    function's runs none). Where it landed."""
    landed: list[str] = []
    python_call: set[int] = set()

    def trace(frame: FrameType, event: str, arg: object) -> Callable[..., Any] | None:
        # A generator resumed by next() (a C function) is not a Python call: its return
        # to ``next``'s caller is a C function's.
        if event == "call" and frame.f_back is not None and not frame.f_code.co_flags & _GEN:
            python_call.add(id(frame.f_back))
        if frame.f_code.co_name != "__enter__" or not _is_cm_of(frame, name):
            return None
        frame.f_trace_opcodes = True
        if (
            event == "opcode"
            and not landed
            and frame.f_lasti in _after_calls(frame.f_code)
            and id(frame) not in python_call
        ):
            landed.append(f"{frame.f_code.co_qualname}@{frame.f_lasti}")
            raise KeyboardInterrupt(landed[0])
        if event == "opcode":
            python_call.discard(id(frame))
        return trace

    return trace, landed


def _kept_interrupt(name: str, call: Callable[[], Any]) -> BaseException | None:
    """``call()`` interrupted at the first landing in ``name``'s ``__enter__``: the
    exception, which the caller keeps (None: it ran through)."""
    return kept_landing(_landing_in_enter(name)[0], call)


@pytest.mark.parametrize("via", ["creation_lock", "compact_store"])
def test_an_interrupt_in_the_creation_locks_enter_leaves_the_lock_free(
    tmp_path: Path, via: str
) -> None:
    path = tmp_path / "s"
    cid = one_checkpoint(path)
    kept = _kept_interrupt("creation_lock", lambda: take_creation_lock(path, via))
    # Before: 'held' while ``kept`` lived (contextlib's __enter__@54, after next()).
    assert _folder_lock(path) == "free"
    del kept
    gc.collect()
    assert _folder_lock(path) == "free"
    with cpstore.open(path) as st, st.read(cid) as cp:
        assert cp.state() == {"a": 1}
        assert st.verify().ok


@pytest.mark.parametrize("name", ["reserved_for_compact", "pinned_for_compact"])
def test_an_interrupt_in_compacts_reservation_or_pins_enter_leaves_neither(
    tmp_path: Path, name: str
) -> None:
    """Before: while the exception lived, every open of the store in this process was
    refused "this process is compacting the store" (the reservation's generator not
    finalized), or the pinned folder's descriptor stayed open."""
    path = tmp_path / "s"
    with cpstore.open(path) as st:
        cid = st.recorder("r").checkpoint(0, {"a": 1})
    kept = _kept_interrupt(name, lambda: compact_store(path))
    assert kept is not None
    assert fds_in(path) == []
    with cpstore.open(path) as st, st.read(cid) as cp:
        assert cp.state() == {"a": 1}
    del kept


def test_an_interrupt_in_the_closes_quiesced_enter_leaves_the_env_usable(tmp_path: Path) -> None:
    """release_env enters ``env.quiesced()`` (the write lock taken, new reads held back,
    the gate's lock held while it yields). Before: a landing on contextlib's ``next()``
    return left the suspended generator holding them while the exception lived: every
    other thread's open and read of the store waited (found hung)."""
    path = tmp_path / "s"
    with cpstore.open(path) as st:
        cid = st.recorder("r").checkpoint(0, {"a": 1})
    st = cpstore.open(path)
    env = lmdb_registry_state._REGISTRY[lmdb_registry.canonical(str(path))]
    kept = _kept_interrupt("quiesced", st.close)
    assert kept is not None
    free: list[bool] = []

    def other() -> None:  # another thread: the locks are RLocks, this one's would re-enter
        took = env.write_lock.acquire(blocking=False)
        if took:
            env.write_lock.release()
        free.append(took and not env._resizing)

    probe = threading.Thread(target=other)
    probe.start()
    probe.join()
    assert free == [True]
    assert not lmdb_registry.is_open_here(str(path))  # closed now (left open, idle)
    with cpstore.open(path) as again, again.read(cid) as cp:
        assert cp.state() == {"a": 1}
    del kept


def test_an_interrupt_in_a_held_opens_enter_leaves_no_read_counted(tmp_path: Path) -> None:
    """``env.held_open()`` counts a read (LMDB's copy, ``disk_bytes``). Before: a landing
    on contextlib's ``next()`` return left the entry while the exception lived: another
    thread's close waited its 5 s and left the environment open, and this thread's own
    map resizes were refused as holding a read."""
    path = tmp_path / "s"
    with cpstore.open(path) as st:
        st.recorder("r").checkpoint(0, {"a": 1})
        env = lmdb_registry_state._REGISTRY[lmdb_registry.canonical(str(path))]
        kept = _kept_interrupt("held_open", st.disk_bytes)
        assert kept is not None
        assert threading.get_ident() not in env._active
        del kept
