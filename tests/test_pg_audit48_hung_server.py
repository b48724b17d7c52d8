"""Audit 48: the pool's reconnect attempts against a server that accepts and never answers.

psycopg_pool opens its connections with the pool's ``kwargs``, which set no
``connect_timeout``: an attempt against a server that accepts the connection and never
answers (a hung server, a proxy in front of a dead one) waited for ever in libpq. The
worker thread doing it never ended, even after the store's close (psycopg_pool gives up
waiting for it after 5 s and leaves it running), and RECONNECT_SPAN bounded nothing.
Now each attempt gives up after CONNECT_WAIT, as the store's open does (fails before).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from pg_cluster import Cluster, pg_cluster, pg_url  # noqa: F401 - fixtures

import cpstore
from cpstore.errors import StoreConnectionError


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A TCP port that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        server.close()


def _pool_threads(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(name) and t.is_alive()]


def _no_good_connection_left(pool: Any) -> None:
    """Break every idle connection until none has come for a while: a connection the pool
    was still opening to the real server when its address changed lands after the first
    sweep (a loaded machine: ci44 got one, and the acquire below was served)."""
    quiet = 0
    deadline = time.monotonic() + 10
    while quiet < 5 and time.monotonic() < deadline:
        idle = list(pool._pool)
        for conn in idle:
            conn.close()
        pool.check()  # discards the broken ones; its new attempts go to the silent server
        quiet = 0 if idle else quiet + 1
        time.sleep(0.05)


def test_no_pool_thread_is_left_waiting_on_a_silent_server_after_close(
    pg_url: str,
    silent_server: int,
) -> None:
    store = cpstore.open(pg_url)
    pool = store.backend._pool
    try:
        store.recorder("run").checkpoint(0, {"i": 0})
        # The server moves behind an address that never answers (the pool's next
        # connections go there), and the idle connection breaks: check() replaces it.
        pool.conninfo = f"host=127.0.0.1 port={silent_server} user=postgres dbname=postgres"
        _no_good_connection_left(pool)
        with pytest.raises(StoreConnectionError):
            store.backend._acquire(1.0)
    finally:
        store.close()
    deadline = time.monotonic() + 20
    while _pool_threads(pool.name) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _pool_threads(pool.name)  # before: a worker waiting in connect for ever
