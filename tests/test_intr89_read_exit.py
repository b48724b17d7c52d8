"""intr89: an interrupt (a signal handler's exception: Ctrl-C, a watchdog's alarm) landing
at the start of a read block's ``__exit__`` on LMDB: ``_Read.__exit__`` (every
``read_txn()`` block, the LangGraph saver's reads among them) and
``CheckpointView.__exit__`` (``store.read(id)``).

A frame's start is a point where CPython runs pending signal handlers, so such a landing
runs nothing of ``__exit__``: the thread's read entry stayed for good (LMDB's txn ended
only when its object was freed). Another thread's close then gave up after 5 s ("left
open"), the store stayed open in this process, and this thread's map resizes were
refused. Now the read object, once freed with the exception, hands its read over as lost
(``EnvTxns.lost_read``): a close or another thread's resize no longer waits for it (it
ends the txn, not the thread's entry) and this thread's next read or resize ends it."""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Callable
from pathlib import Path
from threading import get_ident
from typing import Any

import pytest
from test_begin_interrupted import interrupted_at, landing_at_start, sweep_landings

import cpstore
from cpstore.store import lmdb_registry
from cpstore.store.lmdb_backend import LmdbBackend
from cpstore.store.lmdb_env import Env


def _env(st: Any) -> Env:
    backend = st._backend
    assert isinstance(backend, LmdbBackend)
    return backend.env


def _open_txns_of_this_process(env: Env) -> list[str]:
    """LMDB's reader table lines of this process with a txn open (a txn id, not '-')."""
    lines = str(env.env.readers()).splitlines()[1:]
    return [ln for ln in lines if ln.split()[0] == str(os.getpid()) and ln.split()[2] != "-"]


def _close_in_another_thread(st: Any) -> list[str]:
    """``st.close()`` in a thread of its own: what it raised, if anything."""
    got: list[str] = []

    def close() -> None:
        try:
            st.close()
            got.append("closed")
        except BaseException as exc:  # the test reports it
            got.append(f"{type(exc).__name__}: {exc}")

    thread = threading.Thread(target=close)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "the close hung"
    return got


def _exits(st: Any, cid: str) -> dict[str, Callable[[], Any]]:
    def read_txn_block() -> None:
        with st._backend.read_txn() as txn:
            txn.get(b"x")

    def checkpoint_view() -> None:
        with st.read(cid) as cp:
            cp.state()

    return {"_Read.__exit__": read_txn_block, "CheckpointView.__exit__": checkpoint_view}


_WHERE = ["_Read.__exit__", "CheckpointView.__exit__"]


@pytest.mark.parametrize("where", _WHERE)
def test_a_read_exit_interrupted_at_its_start_does_not_keep_a_close_waiting(
    tmp_path: Path, where: str
) -> None:
    path = tmp_path / "s"
    st = cpstore.open(path)
    cid = st.recorder("r").checkpoint(0, {"a": 1})
    assert landing_at_start(where, _exits(st, cid)[where])
    gc.collect()  # the exception is gone: nothing keeps the read object
    got = _close_in_another_thread(st)
    assert got == ["closed"]  # before: StoreError "left open" after 5 s
    assert not lmdb_registry.is_open_here(str(path))
    with cpstore.open(path) as again, again.read(cid) as cp:
        assert cp.state() == {"a": 1}


@pytest.mark.parametrize("where", _WHERE)
def test_this_thread_reads_and_grows_the_map_after_a_read_exit_interrupted(
    tmp_path: Path, where: str
) -> None:
    path = tmp_path / "s"
    st = cpstore.open(path, map_size=1 << 20, max_map_size=1 << 26)
    cid = st.recorder("r").checkpoint(0, {"a": 1})
    env = _env(st)
    size = env.env.info()["map_size"]
    assert landing_at_start(where, _exits(st, cid)[where])
    gc.collect()
    with st.read(cid) as cp:  # the next read of this thread
        assert cp.state() == {"a": 1}
    assert get_ident() not in env._active  # the lost read's entry ended
    assert _open_txns_of_this_process(env) == []
    rec = st.recorder("big")
    for step in range(40):  # ~2.5 MB of random values: the map must grow from 1 MiB
        rec.checkpoint(step, {"blob": os.urandom(64 * 1024).hex()})
    assert env.env.info()["map_size"] > size  # before: ReadHeldDuringResizeError
    assert _close_in_another_thread(st) == ["closed"]


@pytest.mark.parametrize("where", _WHERE)
def test_another_thread_grows_the_map_past_a_read_lost_at_its_exit(
    tmp_path: Path, where: str
) -> None:
    """The thread that lost its read never reads again: another thread's map growth ends
    the lost txn and goes on (before: it waited for that read for good)."""
    path = tmp_path / "s"
    st = cpstore.open(path, map_size=1 << 20, max_map_size=1 << 26)
    cid = st.recorder("r").checkpoint(0, {"a": 1})
    env = _env(st)
    env.resize_wait = 20.0  # before: StoreError "a read of another thread did not end"
    size = env.env.info()["map_size"]
    assert landing_at_start(where, _exits(st, cid)[where])
    gc.collect()
    got: list[str] = []

    def grow() -> None:
        try:
            rec = st.recorder("big")
            for step in range(40):
                rec.checkpoint(step, {"blob": os.urandom(64 * 1024).hex()})
            got.append("grown")
        except BaseException as exc:  # the test reports it
            got.append(f"{type(exc).__name__}: {exc}")

    thread = threading.Thread(target=grow)
    thread.start()
    thread.join(120)
    assert not thread.is_alive()
    assert got == ["grown"]
    assert env.env.info()["map_size"] > size
    assert _open_txns_of_this_process(env) == []  # the lost txn ended
    assert _close_in_another_thread(st) == ["closed"]


_SWEPT = {
    "read_txn": {"_Read.__exit__", "EnvTxns.end_read"},
    "view": {"CheckpointView.__exit__", "LmdbBackend.end_read", "EnvTxns.end_read"},
}


@pytest.mark.parametrize("block", sorted(_SWEPT))
def test_every_landing_in_a_read_blocks_exit_ends_the_read_exactly_once(
    tmp_path: Path, block: str
) -> None:
    """tests/test_begin_interrupted.py's sweep over the exit (and what it calls by those
    names) of a read block nested in an open read: after each landing and the exception's
    drop, this thread's next read ends the lost one, and the outer read's entry is kept
    (ending a read twice took it: a resize or a close then ran under that read)."""
    st = cpstore.open(tmp_path / "s")
    cid = st.recorder("r").checkpoint(0, {"a": 1})
    env, me = _env(st), get_ident()
    inner = _exits(st, cid)["_Read.__exit__" if block == "read_txn" else "CheckpointView.__exit__"]

    def left_wrong() -> str | None:
        with st._backend.read_txn() as txn:  # the next read of this thread
            txn.get(b"x")
        lost = getattr(env, "_lost", ())  # the reads handed over, not ended yet
        if env._active.count(me) != 1 or lost:
            return f"entries {env._active.count(me)} (1: the outer read's), lost {lost}"
        return None

    with st._backend.read_txn():
        wrong = sweep_landings(
            lambda k: interrupted_at(k, _SWEPT[block], inner, qualified=True),
            left_wrong,
            at_least=3,
        )
        assert wrong == []
        assert env._active.count(me) == 1
    assert me not in env._active
    assert _open_txns_of_this_process(env) == []
    assert _close_in_another_thread(st) == ["closed"]


@pytest.mark.parametrize("where", _WHERE)
def test_a_lost_reads_thread_waits_for_a_resize_under_way(tmp_path: Path, where: str) -> None:
    """A thread holding a read goes on past a resize under way (the resize waits for that
    read anyway); one whose only entry is a lost read must not: the resize counts that one
    as ended, and LMDB's begin could run beside its remap (taken for nested: before)."""
    st = cpstore.open(tmp_path / "s")
    cid = st.recorder("r").checkpoint(0, {"a": 1})
    env = _env(st)
    assert landing_at_start(where, _exits(st, cid)[where])
    gc.collect()  # this thread's only entry is a lost read now, not ended yet
    assert env._active.count(get_ident()) == 1
    entered = threading.Event()

    def resize_under_way() -> None:  # as _resize does while it waits for reads
        with env._gate:
            env._resizing = True
        entered.wait(3)  # the read below returns at once if it goes past the resize
        with env._gate:
            env._resizing = False
            env._gate.notify_all()

    resizer = threading.Thread(target=resize_under_way)
    with env._gate:
        resizer.start()
        while not env._resizing:
            env._gate.wait(0.01)
    env._enter_read()  # a read's entry, as a begin makes it
    went_past_the_resize = env._resizing
    entered.set()
    resizer.join(30)
    env._leave_read()
    assert not went_past_the_resize
    with st._backend.read_txn() as txn:  # the next read ends the lost one
        txn.get(b"x")
    assert get_ident() not in env._active
    assert _close_in_another_thread(st) == ["closed"]
