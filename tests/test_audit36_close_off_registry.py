"""audit36: a close that waits for another thread's read does not hold up other opens.

The last handle's close waits (at most 5 s, audit34) until no other thread of the process
is inside a txn of the store. It waited holding the process's registry lock
(lmdb_registry.release_env), so every open and close of any store in the process, on
any path, queued behind it. The wait now runs before the registry lock is taken; under
it the close only decides (nobody took a handle meanwhile) and closes LMDB's environment.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from test_audit36_close_errors import _env, _wait_for

from cpstore.store import lmdb_txns
from cpstore.store.facade import open as open_store
from cpstore.store.lmdb_env import Env


@pytest.fixture(autouse=True)
def _close_waits_long(monkeypatch: pytest.MonkeyPatch) -> None:
    """The close's bound (5 s) far out of reach: on a loaded machine B's open, write and
    read must not outlast it, or the close gives up on R and the order tested is lost."""
    monkeypatch.setattr(lmdb_txns, "CLOSE_WAIT_SECONDS", 120.0)


def _hold_a_read(st: object, cid: str, holding: threading.Event, release: threading.Event) -> None:
    with st.read(cid) as view:  # type: ignore[attr-defined]
        view.state()
        holding.set()
        _wait_for(release, "the test letting the read go")


def _close_under_a_read(
    a: Any,
) -> tuple[str, Env, threading.Thread, threading.Event, threading.Thread]:
    """Thread R holds a read of ``a``; thread C closes ``a`` (its close waits for R's
    read until ``release`` is set). Returns (the checkpoint R reads, a's environment, R,
    release, C)."""
    cid = a.recorder("r").checkpoint(0, {"a": 1})
    env_a = _env(a)
    holding, release = threading.Event(), threading.Event()
    reader = threading.Thread(target=_hold_a_read, args=(a, cid, holding, release))
    reader.start()
    _wait_for(holding, "R's read")
    closer = threading.Thread(target=a.close)
    closer.start()
    return cid, env_a, reader, release, closer


def _closing_and_waiting(env: Env, closer: threading.Thread) -> None:
    """Return once ``closer``'s close holds back reads and waits for the open one."""
    for _ in range(1_000_000):
        if env._resizing or not closer.is_alive():
            break
        closer.join(0.001)
    assert closer.is_alive() and env._resizing, "the close did not wait for the open read"


def test_an_open_of_another_store_is_not_held_up_by_a_close_that_waits(tmp_path: Path) -> None:
    """Store A's close waits for thread R's read; store B is opened, written, read and
    closed meanwhile, all before R lets its read go (before audit36 B's open waited for
    A's close, which gave up on R only after 5 s: the close had ended when B's open
    returned)."""
    a = open_store(tmp_path / "a")
    _, env_a, reader, release, closer = _close_under_a_read(a)
    try:
        _closing_and_waiting(env_a, closer)
        with open_store(tmp_path / "b") as b:
            b_cid = b.recorder("r").checkpoint(0, {"b": 2})
            with b.read(b_cid) as view:
                assert view.state() == {"b": 2}
        assert closer.is_alive(), "A's close ended before B's open returned: B waited for it"
        assert not env_a.closed and not release.is_set()
    finally:
        release.set()
        reader.join()
        closer.join()
    assert env_a.closed and a._backend.closed


def test_an_open_of_the_same_store_while_its_close_waits_keeps_it_open(tmp_path: Path) -> None:
    """Store A's close waits for thread R's read; thread D opens A again meanwhile. The
    close then finds a handle taken and leaves the environment open for D (before audit36
    D's open waited for the close and opened a new one): either way D's handle writes
    and reads, and what it wrote is there after its own close."""
    path = tmp_path / "a"
    a = open_store(path)
    cid, env_a, reader, release, closer = _close_under_a_read(a)
    opened: list[object] = []
    failed: list[BaseException] = []

    def reopen() -> None:
        try:
            opened.append(open_store(path))
        except BaseException as exc:
            failed.append(exc)

    try:
        _closing_and_waiting(env_a, closer)
        opener = threading.Thread(target=reopen)
        opener.start()
        for _ in range(2000):  # the open takes A's environment while the close waits
            if env_a.handles or not opener.is_alive():
                break
            opener.join(0.001)
    finally:
        release.set()
        reader.join()
        closer.join()
    opener.join()
    assert not failed, failed
    d = opened[0]
    if _env(d) is env_a:  # it took the waiting close's environment: never closed under it
        assert not env_a.closed and not env_a.closing
    d_cid = d.recorder("d").checkpoint(0, {"d": 4})  # type: ignore[attr-defined]
    with d.read(d_cid) as view:  # type: ignore[attr-defined]
        assert view.state() == {"d": 4}
    with d.read(cid) as view:  # type: ignore[attr-defined]
        assert view.state() == {"a": 1}
    d.close()  # type: ignore[attr-defined]
    with open_store(path, readonly=True) as again:
        assert again.ref("d") == d_cid
        assert again.verify().ok
